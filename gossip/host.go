package gossip

import (
	"github.com/rollcall/rollcall/cluster"
	"github.com/rollcall/rollcall/crdt"
)

// Host is what a Cluster drives: the local replica and the sessions it
// serves. *node.Node implements it for a gateway; ReplicaHost implements it
// over a bare crdt.Replica. Every method must be safe for concurrent use:
// the Cluster calls them from its handling loop and from the goroutines
// that answer peers.
//
//	ApplyDeltas    merge deltas received from peers; emit events; close local
//	               connections superseded by a newer epoch elsewhere
//	Digest,        anti-entropy over the node's replica: DiffPage is
//	DiffPage,      crdt Replica.DiffPage, a page of the answer to a
//	ApplySync      peer's digest, taken under the host's lock (one page
//	               at a time, so a large answer never holds it long)
//	MarkNodeDown,  a peer gateway failed (lease passed or memberlist declared
//	MarkNodeUp     it dead) or was heard from again: its sessions are shown
//	               expired / active in this node's projection
//	DeliverLocal   deliver a routed message to the local active sessions of
//	               msg.To; returns how many it reached
//	KickLocal      end the local sessions of user (of device only, unless
//	               empty): write them disconnected and close their
//	               connections with kicked; returns how many it ended
//	SessionCount   the number of sessions this node owns that are active
//	Watermark      the replica's watermark for one origin, O(1): what an
//	               alive announcement is compared with
type Host interface {
	ApplyDeltas(deltas []crdt.Delta) error
	Digest() crdt.Digest
	DiffPage(peer crdt.Digest, cur crdt.PageCursor, maxRecords, maxBytes int) (crdt.Sync, crdt.PageCursor, bool)
	ApplySync(s crdt.Sync) error
	MarkNodeDown(node string)
	MarkNodeUp(node string)
	DeliverLocal(msg cluster.Message) int
	KickLocal(user, device string) int
	SessionCount() int
	Watermark(o crdt.Origin) uint64
}
