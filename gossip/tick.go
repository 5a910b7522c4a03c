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
	leaseT := time.NewTicker(min(c.cfg.LeaseTimeout/20, 250*time.Millisecond))
	defer leaseT.Stop()
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
		case <-leaseT.C:
			if !LeasesEnforced(ChooseMode(c.ml.NumMembers(), c.cfg.EagerThreshold)) {
				continue
			}
			c.mu.Lock()
			expired := c.leases.Expire(c.cfg.Now().UnixNano())
			c.mu.Unlock()
			for _, n := range expired {
				c.log.Info("peer lease expired; its sessions are shown expired", zap.String("node", n))
				c.host.MarkNodeDown(n)
			}
		}
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
	if len(addrs) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if n, err := c.ml.Join(addrs); err == nil || n > 0 {
			c.log.Info("rejoined failed members", zap.Int("answered", n))
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
