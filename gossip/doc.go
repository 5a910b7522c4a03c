// Package gossip wires Rollcall gateways together with hashicorp/memberlist:
// membership and failure detection (memberlist's), dissemination of session
// deltas, anti-entropy, peer leases, routed messages and keyring rotation.
//
// It moves bytes and executes decisions; it makes none. Every decision of
// dissemination and anti-entropy is made by a dissem.Node (the protocol
// core, shared with the simulator), which the Cluster feeds from one
// goroutine and whose Ready it executes; merge rules live in crdt/ behind
// the Host (the node). It does not import the gateway (node/): it declares
// the Host it drives, the values both sides pass (routed messages, member
// states) live in package cluster, and *Cluster satisfies node.Cluster and
// its optional interfaces structurally (cmd/rollcall checks that at compile
// time).
//
// Files, one concern each:
//
//	config.go      Config and its defaults
//	host.go        Host: what a Cluster drives (the node, or a ReplicaHost)
//	cluster.go     Cluster: construction, memberlist config, join, leave, shutdown; the member view the core reads
//	loop.go        the one loop: feeds the core, executes its Ready (applies, sends, pulls, answers, rejoins)
//	send.go        owner writes into the core, and the send helpers
//	broadcast.go   the piggyback queue's broadcast types
//	route.go       request/answer exchanges: routed messages, keyring steps
//	delegate.go    memberlist's Delegate, EventDelegate and AliveDelegate
//	members.go     what `rollcall members` shows
//	ready.go       readiness, client addresses, drain announcements (for node's /readyz and drain)
//	ui.go          member states for node's status page
//	keys.go        keyring files and rotation
//	transport.go   the UDP and TCP transport under memberlist; plain user packets framed and read here
//	faults.go      a fault-injecting transport for tests and calibration
//	replicahost.go a Host over a bare crdt.Replica, for tests and calibration
//	stats.go       counters
//	validate.go    bounds on the values peers send: what is refused, counted and logged
//
// Concurrency: memberlist calls the delegates on its own goroutines (event
// callbacks with its node lock held), so they only copy and queue. One
// goroutine (run) feeds the core what arrives, in order, and the passing
// of time. Without encryption, the best-effort packets the core sends
// (deltas, announcements to a member) are framed and written by the
// Cluster, and the transport's reader hands them to that goroutine's
// queue itself, not through memberlist. Publish hands the core a write
// under the Cluster's mutex, which guards the core. Reliable sends, pulls
// and answers run on goroutines of their own and report back under the
// mutex. The Cluster never holds its mutex while memberlist could call
// back into it.
package gossip
