// Package gossip wires Rollcall gateways together with hashicorp/memberlist:
// membership and failure detection (memberlist's), dissemination of session
// deltas, anti-entropy, peer leases, routed messages and keyring rotation,
// and the wire codec of gossip messages.
//
// It moves bytes and drives decisions; it must not implement merge rules,
// which live in crdt/ behind the Host (the node). It does not import the
// gateway (node/): it declares the Host it drives, the values both sides
// pass (routed messages, member states) live in package cluster, and
// *Cluster satisfies node.Cluster and its optional interfaces
// structurally (cmd/rollcall checks that at compile time). The dissemination
// decisions are pure functions in plan.go, shared with the simulator (sim/).
//
// Files, one concern each:
//
//	config.go      Config and its defaults
//	plan.go        pure decisions: mode, packing, leases, gap detection, memberlist's formulas
//	wire.go        the gossip wire format (one place: types, layout, limits)
//	host.go        Host: what a Cluster drives (the node, or a ReplicaHost)
//	cluster.go     Cluster: construction, memberlist config, join, leave, shutdown
//	send.go        the write path: batch, coalesce, pack, eager fan-out or epidemic queue
//	handle.go      inbound messages and memberlist events, on one goroutine
//	route.go       request/answer exchanges: routed messages, keyring steps
//	tick.go        alive announcements, lease expiry, reconnecting to dead members
//	delegate.go    memberlist's Delegate and EventDelegate, broadcasts
//	members.go     what `rollcall members` shows
//	ready.go       readiness, client addresses, drain announcements (for node's /readyz and drain)
//	ui.go          member states for node's status page
//	keys.go        keyring files and rotation
//	faults.go      a fault-injecting transport for tests and calibration
//	replicahost.go a Host over a bare crdt.Replica, for tests and calibration
//	stats.go       counters
//
// Concurrency: memberlist calls the delegates on its own goroutines (event
// callbacks with its node lock held), so they only copy and queue. One
// handler goroutine applies what arrives, in order; one flusher sends the
// node's writes; one ticker announces and expires leases. The Cluster never
// calls memberlist while holding its own mutex.
package gossip
