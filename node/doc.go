// Package node is the Rollcall gateway: it accepts client connections over
// TCP, authenticates them and authorizes their requests from their tokens'
// grants (auth/; authz.go), owns their sessions (epochs, heartbeat deadlines,
// expiry), answers queries, group views and subscriptions from the local
// projection (a crdt.Replica), routes messages, and serves HTTP.
//
// node drives crdt/ with real sockets and clocks; it must not implement merge
// rules itself. Cluster dissemination is behind the Cluster interface, which
// gossip/ implements; without one a node runs standalone.
//
// The client protocol is in protocol.go (and docs/protocol.md). A node's
// life, as cmd/rollcall's agent drives it:
//
//	n, err := node.New(cfg)         // validates cfg, creates the replica
//	n.SetCluster(cluster)           // optional: gossip.Cluster, built with n as its Host
//	err = n.Start()                 // listeners, sweeper, notifier, crdt GC
//	<-ctx.Done()                    // SIGTERM
//	err = n.Drain(drainCtx)         // stop accepting, disconnect and publish every session
//	leave()                         // the cluster layer flushes and leaves
//	n.Close()
//
// Concurrency: each connection has one reader goroutine (requests are
// handled in order on it) and one writer goroutine draining a bounded queue.
// One mutex guards the replica and the node's indexes; Cluster methods and
// connection queues are only called after it is released. Heartbeats take no
// lock at all (deadlines.go).
package node
