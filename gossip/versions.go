package gossip

import (
	"sync/atomic"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
)

// Record kinds between versions. A gateway of an earlier version refuses a
// delta batch or an anti-entropy answer holding a record kind it does not
// know (crdt's codec), so a newer gateway must not make new kinds while
// such a member is in the cluster, nor send it any.
//
// Each gateway says what it understands through memberlist's delegate
// protocol range, which every member's alive message carries and which
// gateways of every version accept: the current version stays 0, and the
// maximum is the newest record kind this build knows. A gateway of an
// earlier version announces a maximum of 0.
//
//	0  sessions and account records
//	1  last-seen records (crdt.LastSeen)
const delegateProtocolMax = 1

// lastSeenProtocol is the delegate protocol maximum of a member that knows
// last-seen records.
const lastSeenProtocol = 1

// setProtocolRange announces what this build understands.
func setProtocolRange(mlc *memberlist.Config) {
	mlc.DelegateProtocolVersion = 0
	mlc.DelegateProtocolMin = 0
	mlc.DelegateProtocolMax = delegateProtocolMax
}

// legacyBook tracks the live members that do not know last-seen records.
// A member that failed or left no longer counts: writes resume without
// it, and if it comes back memberlist reports it alive again (what it
// missed meanwhile reaches it by anti-entropy, which leaves last-seen
// records out for it). allKnow is read without a lock (LastSeenReady).
type legacyBook struct {
	legacy  map[string]struct{}
	allKnow atomic.Bool
}

func newLegacyBook() *legacyBook {
	b := &legacyBook{legacy: make(map[string]struct{})}
	b.allKnow.Store(true)
	return b
}

// set records what a member announced and its state (alive, dead or
// left).
func (b *legacyBook) set(n *memberlist.Node, state string) {
	if n.DMax < lastSeenProtocol && state == "alive" {
		b.legacy[n.Name] = struct{}{}
	} else {
		delete(b.legacy, n.Name)
	}
	b.allKnow.Store(len(b.legacy) == 0)
}

// forget drops a member memberlist forgot.
func (b *legacyBook) forget(name string) {
	delete(b.legacy, name)
	b.allKnow.Store(len(b.legacy) == 0)
}

// knows reports whether a member understands last-seen records; n is
// its memberlist node, nil for a member not reported (yet), which is
// taken to.
func knows(n *memberlist.Node) bool { return n == nil || n.DMax >= lastSeenProtocol }

// LastSeenReady reports whether every member this node knows of
// understands last-seen records, so that the node may write them. It
// takes no lock: a node calls it with its own lock held.
func (c *Cluster) LastSeenReady() bool { return c.view.legacy.allKnow.Load() }

// forPeer returns an anti-entropy answer as peer can read it: without
// last-seen records for a member of an earlier version. The watermarks
// still cover them: such a member can never hold them, and must not ask
// for them again and again.
func (c *Cluster) forPeer(peer string, s crdt.Sync) crdt.Sync {
	c.mu.Lock()
	ok := knows(c.view.node(peer))
	c.mu.Unlock()
	if ok {
		return s
	}
	return s.WithoutLastSeen()
}
