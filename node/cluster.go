package node

import (
	"context"

	"github.com/rollcall/rollcall/cluster"
	"github.com/rollcall/rollcall/crdt"
)

// Cluster is how a node reaches its peers; gossip.Cluster implements it. A
// node without one runs standalone. Methods must be safe for concurrent use
// and must not call back into the Node synchronously while the caller might
// hold the node's lock (the node never calls them with its lock held).
type Cluster interface {
	// Publish disseminates deltas of records this node wrote (connects,
	// status/group changes, disconnects, expiries, account writes), in the
	// order they were written. It must not block on the network.
	Publish(deltas []crdt.Delta)

	// Route hands a message to the gateway named gateway, which delivers it
	// to the active sessions of msg.To it owns, and returns how many sessions
	// it reached.
	Route(ctx context.Context, gateway string, msg Message) (int, error)
}

// AddressBook is implemented by a Cluster that knows its members' client
// addresses; locate replies then say where each session lives.
type AddressBook interface {
	ClientAddrOf(gateway string) string
}

// GatewayLister is implemented by a Cluster that knows where clients reach
// the other gateways. A draining node lists them in its clients'
// shutting_down, so they can reconnect there at once, and holds their
// sessions for Config.DrainGrace only while the list is not empty.
type GatewayLister interface {
	// OtherGateways returns the client addresses advertised by the other
	// live members that have not announced a leave.
	OtherGateways() []string
}

// DrainAnnouncer is implemented by a Cluster that can tell its peers at
// once that this node is draining, so their own drains stop listing it
// among the gateways to reconnect to. Drain calls it first. It must not
// block on the network for long.
type DrainAnnouncer interface {
	AnnounceDrain()
}

// LastSeenGate is implemented by a Cluster whose members may not all read
// last-seen records (a gateway of an earlier version refuses a message
// holding one). The node writes a user's last seen only while
// LastSeenReady reports true; a Cluster without it counts as ready.
// LastSeenReady is called with the node's lock held: it must take no lock
// and never call back into the Node.
type LastSeenGate interface {
	LastSeenReady() bool
}

// lastSeenReady reports whether the node may write last-seen records now.
func (n *Node) lastSeenReady() bool {
	if g, ok := n.getCluster().(LastSeenGate); ok {
		return g.LastSeenReady()
	}
	return true
}

// ReadinessReporter is implemented by a Cluster that can tell whether
// this node has joined its cluster and caught up with it. GET /readyz
// answers 503 until Readiness reports true; a Cluster without it counts as
// ready. Readiness must be cheap and must not call back into the Node.
type ReadinessReporter interface {
	// Readiness reports whether the node has joined and caught up, and if
	// not, why not (a sentence for operators).
	Readiness() (ready bool, reason string)
}

// Message is a user-to-user message routed through the gateway that owns
// each recipient session. It is defined in package cluster, which gossip
// shares without importing node.
type Message = cluster.Message
