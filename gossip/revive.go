package gossip

// Reviving a peer: a gateway heard again after this node marked it down is
// shown up only once this node holds the writes it made meanwhile.

import (
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
)

// revival is a peer heard again after it was marked down, whose writes up to
// target this replica does not all hold yet.
type revival struct {
	origin crdt.Origin
	target uint64 // the origin's version the replica must hold
	since  int64  // lease clock when it was heard again
}

// reviveTimeout bounds how long a peer heard again stays shown down while
// its missed writes are pulled: if the pull fails, the peer is shown up
// anyway (anti-entropy goes on) rather than hidden while it is alive.
func (c *Cluster) reviveTimeout() time.Duration { return c.cfg.LeaseTimeout / 2 }

// revive handles a peer heard again after it was marked down (Leases.Heard
// reported wasDown), in a message from origin o whose writes go up to
// target. While the peer was down here it may have ended sessions in writes
// this node missed (a partition, lost packets): showing it up at once would
// show those sessions online again until anti-entropy repaired them. So it
// is shown up at once only if the replica holds o's writes up to target;
// otherwise it stays shown down while they are pulled (checkRevivals).
// Called on handleLoop.
func (c *Cluster) revive(node string, o crdt.Origin, target uint64, now int64) {
	if target == 0 || c.host.Watermark(o) >= target {
		c.host.MarkNodeUp(node)
		return
	}
	c.mu.Lock()
	c.reviving[node] = revival{origin: o, target: target, since: now}
	pull := !c.pulling[node]
	if pull {
		c.pulling[node] = true
	}
	c.mu.Unlock()
	c.log.Info("peer heard again; its sessions stay shown expired until its missed writes arrive",
		zap.String("node", node), zap.Uint64("watermark", target))
	if pull {
		c.stats.GapPulls.Add(1)
		c.goPull(node)
	}
}

// checkRevivals shows up each reviving peer this replica has caught up
// with, or that has waited past reviveTimeout. Called on handleLoop after
// anything that can raise a watermark, and on the lease tick.
func (c *Cluster) checkRevivals(now int64) {
	c.mu.Lock()
	if len(c.reviving) == 0 {
		c.mu.Unlock()
		return
	}
	pending := make(map[string]revival, len(c.reviving))
	for n, r := range c.reviving {
		pending[n] = r
	}
	c.mu.Unlock()
	for node, r := range pending {
		caughtUp := c.host.Watermark(r.origin) >= r.target
		if !caughtUp && now-r.since <= int64(c.reviveTimeout()) {
			continue
		}
		c.mu.Lock()
		cur, ok := c.reviving[node]
		if ok && cur == r {
			delete(c.reviving, node)
		}
		c.mu.Unlock()
		if ok && cur == r {
			if !caughtUp {
				c.log.Warn("peer shown up before its missed writes arrived", zap.String("node", node))
			}
			c.host.MarkNodeUp(node)
		}
	}
}

// revivingLocked reports whether node is heard again but still shown down.
func (c *Cluster) revivingLocked(node string) bool {
	_, ok := c.reviving[node]
	return ok
}
