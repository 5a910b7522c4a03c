package gossip

// Periodic work: alive announcements, lease expiry and reconnecting to
// members declared dead.

import (
	"time"

	"go.uber.org/zap"
)

func (c *Cluster) tickLoop() {
	defer c.wg.Done()
	aliveT := time.NewTicker(c.cfg.AliveInterval)
	defer aliveT.Stop()
	reconnectT := time.NewTicker(c.cfg.ReconnectInterval)
	defer reconnectT.Stop()
	c.announce()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-aliveT.C:
			c.announce()
		case <-reconnectT.C:
			c.reconnect()
		}
	}
}

// leaseTick is how often leases are checked: a twentieth of the lease, at
// most 250ms.
func leaseTick(ttl time.Duration) time.Duration { return min(ttl/20, 250*time.Millisecond) }

// leaseNow is the lease clock: the configured clock less this process's own
// stalls. A gateway that was stopped (SIGSTOP, a paused VM) heard nothing
// while it was stopped, though its peers kept announcing themselves: the
// stall extends every lease by its length instead of expiring them all on
// resume. Called on handleLoop only.
func (c *Cluster) leaseNow() int64 { return c.cfg.Now().UnixNano() - c.stalled }

// elapsed is the real monotonic time since the cluster started, in
// nanoseconds: what stall detection reads.
func (c *Cluster) elapsed() int64 {
	if c.cfg.elapsed != nil {
		return int64(c.cfg.elapsed())
	}
	return int64(time.Since(c.started))
}

// expireLeases is the lease tick, run on handleLoop with every other
// liveness input: it first takes note of a stall of this process (the
// tick's real lateness), then marks down the peers whose lease passed.
func (c *Cluster) expireLeases() {
	if s := c.stall.Observe(c.elapsed()); s > 0 {
		c.stalled += int64(s)
		c.log.Warn("this gateway was stalled; peer leases extended by the stall", zap.Duration("stall", s))
	}
	if !LeasesEnforced(ChooseMode(c.ml.NumMembers(), c.cfg.EagerThreshold)) {
		return
	}
	now := c.leaseNow()
	c.mu.Lock()
	expired := c.leases.Expire(now)
	for _, n := range expired {
		delete(c.reviving, n)
	}
	c.mu.Unlock()
	c.stats.LeasesExpired.Add(uint64(len(expired)))
	c.checkRevivals(now)
	for _, n := range expired {
		c.log.Info("peer lease expired; its sessions are shown expired", zap.String("node", n))
		c.host.MarkNodeDown(n)
	}
}

// reconnect tries to rejoin members memberlist declared dead, as serf does:
// a healed partition would otherwise stay split, each side holding the
// other dead.
func (c *Cluster) reconnect() {
	now := c.cfg.Now()
	var addrs []string
	c.mu.Lock()
	for name, p := range c.peers {
		if p.state != "dead" || p.addr == "" {
			continue
		}
		if now.Sub(p.deadSince) > c.cfg.ReconnectTimeout {
			delete(c.peers, name)
			continue
		}
		addrs = append(addrs, p.addr)
	}
	c.mu.Unlock()
	c.goRejoin(addrs)
}

// goRejoin asks memberlist to join addrs again, in the background.
func (c *Cluster) goRejoin(addrs []string) {
	if len(addrs) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if n, err := c.ml.Join(addrs); err == nil || n > 0 {
			c.log.Info("rejoined failed members", zap.Strings("addrs", addrs), zap.Int("answered", n))
		}
	}()
}

// announce sends this node's alive message: to every member while eager,
// through the piggyback queue when epidemic.
func (c *Cluster) announce() {
	msg, err := encodeAlive(alive{Origin: c.self, Watermark: c.host.Watermark(c.self),
		Sessions: c.host.SessionCount(), ClientAddr: c.cfg.ClientAddr})
	if err != nil {
		c.log.Error("encode alive", zap.Error(err))
		return
	}
	members := c.otherMembers()
	if ChooseMode(len(members)+1, c.cfg.EagerThreshold) == ModeEager {
		c.sendAll(members, msg, false)
		c.stats.AliveBytes.Add(uint64(len(msg) * len(members)))
		return
	}
	c.enqueueBroadcast(msg, "alive/"+c.cfg.Name)
}
