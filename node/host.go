package node

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// The Host side of a Node: what the cluster layer calls (gossip.Host, which
// gossip declares). Every method takes mu for its replica work and releases
// it before touching connections.

// ApplyDeltas merges deltas received from peers. Users whose presence
// changed get events exactly as for local changes, and a local connection
// whose (user, device) is now held by a newer record of another gateway is
// sent superseded and closed. Invalid deltas are skipped and reported in the
// returned error; the valid ones are applied regardless.
func (n *Node) ApplyDeltas(deltas []crdt.Delta) error {
	now := n.clock.Now().UnixNano()
	var errs []error
	lk := lockOf(&n.mu)
	defer lk.unlock()
	touched := make(map[string]struct{})
	var keys []crdt.Key // the sessions changed, for the tracked ones (lostTrackedLocked)
	if len(n.tracked) > 0 {
		keys = make([]crdt.Key, 0, len(deltas))
	}
	for i := range deltas {
		d := &deltas[i]
		changed, dropped, err := n.replica.Apply(*d, now)
		if err != nil {
			n.stats.m.deltasInvalid.Add(1)
			errs = append(errs, fmt.Errorf("delta %d from %s: %w", i, d.Origin(), err))
			continue
		}
		if changed {
			touched[d.User()] = struct{}{}
			if d.Session != nil && keys != nil {
				keys = append(keys, d.Session.Key())
			}
			n.stats.m.deltasApplied.Add(1)
			n.stats.m.lag.observe(time.Duration(now - d.WrittenAt()))
		} else {
			n.stats.m.deltasStale.Add(1)
		}
		for _, u := range dropped {
			touched[u] = struct{}{}
		}
	}
	lost := n.afterRemoteChangeLocked(touched, keys)
	n.unlockAndPublish(&lk, nil)
	n.closeSuperseded(lost)
	if len(errs) > 0 {
		return fmt.Errorf("node: apply deltas: %w", errors.Join(errs...))
	}
	return nil
}

// ApplySync merges a peer's answer to this node's digest, with the same
// events and supersession as ApplyDeltas.
func (n *Node) ApplySync(s crdt.Sync) error {
	now := n.clock.Now().UnixNano()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	users, err := n.replica.ApplySync(s, now)
	if err != nil {
		lk.unlock()
		return fmt.Errorf("node: apply sync: %w", err)
	}
	touched := make(map[string]struct{}, len(users))
	for _, u := range users {
		touched[u] = struct{}{}
	}
	lost := n.afterRemoteChangeLocked(touched, nil)
	n.unlockAndPublish(&lk, nil)
	n.closeSuperseded(lost)
	return nil
}

// afterRemoteChangeLocked marks the touched users dirty and returns the
// local connections whose sessions a remote record has replaced (they no
// longer own anything); it forgets the tracked sessions replaced too, those
// of keys when the caller knows the keys changed (nil: of every touched
// user).
func (n *Node) afterRemoteChangeLocked(touched map[string]struct{}, keys []crdt.Key) []*conn {
	var lost []*conn
	for u := range touched {
		n.markDirtyLocked(u)
		n.scheduleLapseLocked(u)
		for dev, c := range n.local[u] {
			held, ok := n.replica.Session(crdt.Key{User: u, Device: dev})
			if ok && held.Gateway == n.cfg.Name && held.Origin == n.origin && held.ID == c.sess.id {
				continue
			}
			lost = append(lost, c)
		}
	}
	for _, c := range lost {
		n.unregisterLocked(c)
	}
	n.lostTrackedLocked(touched, keys)
	return lost
}

func (n *Node) closeSuperseded(lost []*conn) {
	for _, c := range lost {
		n.stats.superseded.Add(1)
		n.log.Info("session superseded by another gateway", zap.Uint64("conn", c.id))
		c.closeWithError(nil, protocol.CodeSuperseded, "a newer connection on another gateway took this session")
	}
}

// Digest returns the replica's per-origin watermarks.
func (n *Node) Digest() crdt.Digest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replica.Digest()
}

// Diff answers a peer's digest with the records the peer lacks.
func (n *Node) Diff(peer crdt.Digest) crdt.Sync {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replica.Diff(peer)
}

// DiffPage is Diff in pages (crdt Replica.DiffPage), one page under the
// node lock at a time.
func (n *Node) DiffPage(peer crdt.Digest, cur crdt.PageCursor, maxRecords, maxBytes int) (crdt.Sync, crdt.PageCursor, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replica.DiffPage(peer, cur, maxRecords, maxBytes)
}

// MarkNodeDown shows every session of the gateway node as expired in this
// node's projection (without writing over its records), with events.
func (n *Node) MarkNodeDown(node string) {
	now := n.clock.Now().UnixNano()
	lk := lockOf(&n.mu)
	defer lk.unlock()
	users := n.replica.SetNodeDown(node, now)
	for _, u := range users {
		n.markDirtyLocked(u)
	}
	n.unlockAndPublish(&lk, nil)
	n.log.Info("gateway marked down", zap.String("gateway", node), zap.Int("users", len(users)))
}

// MarkNodeUp undoes MarkNodeDown: the gateway was heard from again.
func (n *Node) MarkNodeUp(node string) {
	lk := lockOf(&n.mu)
	defer lk.unlock()
	users := n.replica.SetNodeUp(node)
	for _, u := range users {
		n.markDirtyLocked(u)
	}
	n.unlockAndPublish(&lk, nil)
	if len(users) > 0 {
		n.log.Info("gateway marked up", zap.String("gateway", node), zap.Int("users", len(users)))
	}
}

// SessionCount returns the number of active sessions this node owns.
func (n *Node) SessionCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.localCount
}

// Watermark returns the replica's watermark for origin o.
func (n *Node) Watermark(o crdt.Origin) uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replica.Watermark(o)
}
