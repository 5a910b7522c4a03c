// Package node is the Rollcall gateway: it accepts client connections over
// TCP, authenticates them, owns their sessions (epochs, heartbeat deadlines,
// expiry), answers queries, group views and subscriptions from the local
// projection (a crdt.Replica), routes messages, and serves HTTP.
//
// node drives crdt/ with real sockets and clocks; it must not implement merge
// rules itself. Cluster dissemination is behind the Cluster interface, which
// gossip/ implements; without one a node runs standalone.
package node
