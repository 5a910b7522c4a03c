package gossip

// Receiving: every inbound gossip message and memberlist event is handled
// on one goroutine, in arrival order.

import (
	"time"

	"github.com/rollcall/rollcall/crdt"
	"go.uber.org/zap"
)

// enqueue hands a received message to the handler goroutine; when the queue
// is full the message is dropped and counted (anti-entropy repairs).
func (c *Cluster) enqueue(b []byte) {
	c.stats.MessagesReceived.Add(1)
	c.stats.BytesReceived.Add(uint64(len(b)))
	c.stats.countReceived(b)
	select {
	case c.inbound <- b:
	default:
		c.stats.InboundDropped.Add(1)
	}
}

// handleLoop is the only goroutine that decides and applies peer liveness
// (leases, memberlist's verdicts, proof of life in messages): the lease
// table and the host's projection change together, in one order.
func (c *Cluster) handleLoop() {
	defer c.wg.Done()
	leaseT := time.NewTicker(leaseTick(c.cfg.LeaseTimeout))
	defer leaseT.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-leaseT.C:
			c.expireLeases()
		case b := <-c.inbound:
			c.handle(b)
		case <-c.evSignal:
			c.evMu.Lock()
			q := c.evQueue
			c.evQueue = nil
			c.evMu.Unlock()
			for _, f := range q {
				f()
			}
		}
	}
}

// queueEvent defers a memberlist event's handling to handleLoop. It never
// blocks: memberlist holds its node lock while it calls us.
func (c *Cluster) queueEvent(f func()) {
	c.evMu.Lock()
	c.evQueue = append(c.evQueue, f)
	c.evMu.Unlock()
	select {
	case c.evSignal <- struct{}{}:
	default:
	}
}

// handle processes one received message. Garbage is counted and dropped.
func (c *Cluster) handle(b []byte) {
	m, err := decodeMessage(b)
	if err != nil {
		c.stats.BadMessages.Add(1)
		c.log.Debug("dropped bad gossip message", zap.Error(err))
		return
	}
	switch m.typ {
	case msgDeltas:
		c.handleDeltas(m.deltas, b)
	case msgAlive:
		c.handleAlive(m.alive)
	case msgLeaving:
		if m.alive.Origin.Node != c.cfg.Name {
			c.mu.Lock()
			c.peerLocked(m.alive.Origin.Node).leaving = true
			c.mu.Unlock()
		}
	case msgPull, msgState:
		c.checkCovered(m.digest)
		c.goAnswer(m.digest)
	case msgSync:
		c.stats.SyncRecordsReceived.Add(uint64(m.sync.Len()))
		if err := c.host.ApplySync(m.sync); err != nil {
			c.stats.BadMessages.Add(1)
			c.log.Warn("rejected sync", zap.Error(err))
		} else {
			c.markSynced("a member's answer to this node's digest")
		}
		c.checkRevivals(c.leaseNow())
	case msgRoute:
		c.goRoute(m.route)
	case msgRouteAck:
		c.routeMu.Lock()
		ch := c.routes[m.ack.ID]
		delete(c.routes, m.ack.ID)
		c.routeMu.Unlock()
		if ch != nil {
			ch <- m.ack
		}
	case msgKey:
		ack := routeAck{ID: m.key.ID, Delivered: 1}
		if err := c.applyKeyOp(m.key); err != nil {
			c.log.Warn("keyring operation from peer failed", zap.String("op", m.key.Op), zap.Error(err))
			ack = routeAck{ID: m.key.ID, Err: err.Error()}
		}
		c.goReply(m.key.FromNode, ack)
	}
}

func (c *Cluster) handleDeltas(ds []crdt.Delta, raw []byte) {
	now := c.leaseNow()
	fresh := false
	var back map[string]crdt.Delta // peers heard again: their newest delta here
	// Never call memberlist with mu held: memberlist calls our event
	// delegate with its own lock held.
	epidemic := ChooseMode(c.ml.NumMembers(), c.cfg.EagerThreshold) == ModeEpidemic
	c.mu.Lock()
	for i := range ds {
		o := ds[i].Origin()
		if o.Node == c.cfg.Name {
			continue
		}
		if ds[i].Version() > c.seen[o] {
			fresh = true
			c.seen[o] = ds[i].Version()
		}
		// Eager deltas come straight from their owner: proof it is alive.
		// Relayed epidemic deltas prove nothing about the owner now.
		if !epidemic {
			if c.leases.Heard(o.Node, now) {
				if back == nil {
					back = make(map[string]crdt.Delta)
				}
				back[o.Node] = ds[i]
			} else if prev, ok := back[o.Node]; ok && prev.Origin() == o && ds[i].Version() > prev.Version() {
				back[o.Node] = ds[i]
			}
		}
	}
	c.mu.Unlock()
	err := c.host.ApplyDeltas(ds)
	for n, d := range back {
		c.revive(n, d.Origin(), d.Version(), now)
	}
	if len(back) == 0 {
		c.checkRevivals(now)
	}
	if err != nil {
		c.stats.BadMessages.Add(1)
		c.log.Warn("rejected deltas", zap.Error(err))
		return
	}
	c.stats.DeltasReceived.Add(uint64(len(ds)))
	if epidemic && fresh {
		// Epidemic relay: what was new to us goes on with a retransmit limit.
		c.enqueueBroadcast(append([]byte(nil), raw...), "")
	}
}

func (c *Cluster) handleAlive(a alive) {
	if a.Origin.Node == c.cfg.Name {
		return
	}
	now := c.leaseNow()
	// An announcement of watermark 0 (a node that has written nothing)
	// reveals no gap, whatever we hold: the replica need not be asked.
	var local uint64
	if a.Watermark > 0 {
		local = c.host.Watermark(a.Origin)
	}
	var rejoin string
	c.mu.Lock()
	wasDown := c.leases.Heard(a.Origin.Node, now)
	p := c.peerLocked(a.Origin.Node)
	newInc := a.Origin.Incarnation > p.incarnation
	p.incarnation = max(p.incarnation, a.Origin.Incarnation)
	p.sessions, p.clientAddr = a.Sessions, a.ClientAddr
	pull := c.gaps.Observe(a.Origin, a.Watermark, local) && !c.pulling[a.Origin.Node]
	if pull {
		c.pulling[a.Origin.Node] = true
	}
	// memberlist holds it dead, but it speaks to us: its verdict is stale
	// (a pause or partition that ended). Rejoin it now instead of at the
	// next reconnect round, so memberlist's view heals in one round trip.
	if p.state == "dead" && p.addr != "" && c.cfg.Now().Sub(p.rejoinAt) >= 2*c.cfg.AliveInterval {
		p.rejoinAt = c.cfg.Now()
		rejoin = p.addr
	}
	c.mu.Unlock()
	if newInc {
		c.retire(a.Origin)
	}
	if pull {
		c.stats.GapPulls.Add(1)
		c.goPull(a.Origin.Node)
	}
	if wasDown {
		c.revive(a.Origin.Node, a.Origin, a.Watermark, now)
	}
	if rejoin != "" {
		c.goRejoin([]string{rejoin})
	}
}

// retire tells the host about a new incarnation of a node, which drops the
// sessions of its older incarnations at once.
func (c *Cluster) retire(o crdt.Origin) {
	if err := c.host.ApplySync(crdt.Sync{{Origin: o}}); err != nil {
		c.log.Warn("retire old incarnation", zap.Stringer("origin", o), zap.Error(err))
	}
}

func (c *Cluster) peerLocked(name string) *peer {
	p := c.peers[name]
	if p == nil {
		p = &peer{name: name, state: "alive"}
		c.peers[name] = p
	}
	return p
}

// goPull asks a peer, over TCP, for what this node lacks.
func (c *Cluster) goPull(from string) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.pulling, from)
			c.mu.Unlock()
		}()
		msg, err := encodeDigestMsg(msgPull, digestMsg{From: c.cfg.Name, Digest: c.host.Digest()})
		if err == nil {
			c.stats.PullBytes.Add(uint64(len(msg)))
			err = c.sendReliableTo(from, msg)
		}
		if err != nil {
			c.log.Debug("pull failed", zap.String("from", from), zap.Error(err))
		}
	}()
}

// goAnswer answers a peer's digest with what it lacks.
func (c *Cluster) goAnswer(d digestMsg) {
	if d.From == c.cfg.Name {
		return
	}
	select {
	case c.answers <- struct{}{}:
	default:
		c.stats.AnswersDropped.Add(1) // the asker retries at its next pull or push/pull
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { <-c.answers }()
		s := c.host.Diff(d.Digest)
		if len(s) == 0 {
			return
		}
		msg, err := encodeSync(s)
		if err != nil {
			c.log.Error("encode sync", zap.Error(err))
			return
		}
		c.stats.SyncRecordsSent.Add(uint64(s.Len()))
		c.stats.SyncBytesSent.Add(uint64(len(msg)))
		if err := c.sendReliableTo(d.From, msg); err != nil {
			c.log.Debug("sync answer failed", zap.String("to", d.From), zap.Error(err))
		}
	}()
}
