package gossip

// The driving loop: every input of the core (dissem.Node) is fed from run,
// and every Ready it returns is executed here.

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// run is the only goroutine that feeds the core received messages,
// memberlist's events and the passing of time: every liveness decision is
// made in one order, and the host's projection changes in that order.
func (c *Cluster) run() {
	defer c.wg.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-timer.C:
			c.readQueued()
			c.step(func(now int64) {
				c.view.countMembers()
				c.core.Tick(now)
				if now >= c.regions.Deadline() {
					c.regions.Tick(now)
				}
			})
		case b := <-c.inbound:
			c.handle(b)
			c.handleQueued()
		case b := <-c.wanIn:
			c.handleWAN(b)
		case <-c.flushCh:
			c.step(c.takePublishedLocked)
		case <-c.evSignal:
			c.evMu.Lock()
			q := c.evQueue
			c.evQueue = nil
			c.evMu.Unlock()
			for _, f := range q {
				f()
			}
		}
		c.mu.Lock()
		wait := time.Duration(min(c.core.Deadline(), c.regions.Deadline()) - c.leaseNow())
		c.mu.Unlock()
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(wait, 0))
	}
}

// step feeds the core one input at the lease clock's now, then executes
// what it asks for until it asks nothing more.
//
// Every step first reads the stall detector: the loop wakes at least once
// per lease tick (the core's lease check is always due within one), so a
// step much later than that reveals a stall of this process, which is
// taken off the lease clock before the input sees it.
//
// The lease clock is read before the detector's: a stop between the two
// readings then counts as a stall (its now falls back, and is held at the
// previous step's), instead of reaching the core unsubtracted and expiring
// every peer. Only the loop steps, so the detector needs no lock.
func (c *Cluster) step(input func(now int64)) {
	wall := c.cfg.Now().UnixNano()
	if s := c.stall.Observe(c.elapsed()); s > 0 {
		c.stalled.Add(int64(s))
		c.log.Warn("this gateway was stalled; peer leases extended by the stall", zap.Duration("stall", s))
	}
	c.mu.Lock()
	now := max(wall-c.stalled.Load(), c.lastStep)
	c.lastStep = now
	input(now)
	for c.core.HasReady() || c.regions.HasReady() {
		if c.core.HasReady() {
			// Executed unlocked, while Publish, Leave and AnnounceDrain may
			// use the core: a copy of its own.
			rd := c.core.Ready().Clone()
			c.mu.Unlock()
			c.execute(rd, false)
			c.mu.Lock()
			c.core.Advance(now)
			if c.wan != nil {
				// This region's writes, applied here: the active bridge
				// forwards them to the other regions.
				for _, a := range rd.Apply {
					if a.Kind == dissem.ApplyDeltas {
						c.regions.Forward(a.Deltas, now)
					}
				}
			}
		}
		c.drainRegions(now)
	}
	c.mu.Unlock()
}

// readQueued handles the messages already queued when a lease check is
// due, before it: a peer whose announcement waits in this node's own queue
// (this node is busy, not stalled: its stall detector sees nothing) is
// heard, not expired. This node's slowness delays what it shows of a
// failure; it never shows a live peer down (Lifeguard's local health
// awareness, https://arxiv.org/abs/1707.00788, does the same for
// memberlist's probes). Only what was queued is read, so a flood of
// messages cannot hold the check off.
func (c *Cluster) readQueued() {
	c.mu.Lock()
	due := c.core.LeaseCheckDue(c.leaseNow())
	c.mu.Unlock()
	if !due {
		return
	}
	for k := len(c.inbound); k > 0; k-- {
		select {
		case b := <-c.inbound:
			c.handle(b)
		default:
			return
		}
	}
}

// inboundBurst is how many queued messages handleQueued handles at most.
const inboundBurst = 64

// handleQueued handles messages already queued, up to inboundBurst, before
// the loop looks at its other inputs and sets its timer again: under load
// most wakeups find several messages waiting, and a select and a timer
// reset for each cost several percent of the CPU of a hundred members in
// one process. A lease check that falls due meanwhile reads the rest of
// the queue first (readQueued), and a write waits at most one burst.
func (c *Cluster) handleQueued() {
	for range inboundBurst {
		select {
		case b := <-c.inbound:
			c.handle(b)
		default:
			return
		}
	}
}

// leaseNow is the lease clock: the configured clock less this process's own
// stalls. A gateway that was stopped (SIGSTOP, a paused VM) heard nothing
// while it was stopped, though its peers kept announcing themselves: the
// stall extends every lease by its length instead of expiring them all on
// resume.
func (c *Cluster) leaseNow() int64 { return c.cfg.Now().UnixNano() - c.stalled.Load() }

// elapsed is the real monotonic time since the cluster started, in
// nanoseconds: what stall detection reads.
func (c *Cluster) elapsed() int64 {
	if c.cfg.elapsed != nil {
		return int64(c.cfg.elapsed())
	}
	return int64(time.Since(c.started))
}

// enqueue hands a received message to run; when the queue is full the
// message is dropped and counted (anti-entropy repairs).
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

// queueEvent defers a memberlist event's handling to run. It never blocks:
// memberlist holds its node lock while it calls us.
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
	m, err := dissem.Decode(b)
	if err != nil {
		c.stats.BadMessages.Add(1)
		c.log.Debug("dropped bad gossip message", zap.Error(err))
		return
	}
	if m = c.screen(m); m == nil {
		return
	}
	switch m.Type {
	case dissem.TypeRoute:
		c.goRoute(m.Route)
		return
	case dissem.TypeKick:
		c.goKick(m.Kick)
		return
	case dissem.TypeRouteAck:
		c.routeAck(m.Ack)
		return
	case dissem.TypeRouteVia:
		c.goRouteVia(m.Via, false)
		return
	case dissem.TypeKickVia:
		c.goKickVia(m.KickVia, false)
		return
	case dissem.TypeRegionDeltas, dissem.TypeRegionAlive, dissem.TypeRegionSync, dissem.TypeBridgeWAN:
		c.step(func(now int64) { c.regions.Step(m, false, now) })
		return
	case dissem.TypeKey:
		ack := dissem.RouteAck{ID: m.Key.ID, Delivered: 1}
		if err := c.applyKeyOp(m.Key); err != nil {
			c.log.Warn("keyring operation from peer failed", zap.String("op", m.Key.Op), zap.Error(err))
			ack = dissem.RouteAck{ID: m.Key.ID, Err: err.Error()}
		}
		c.goReply(m.Key.FromNode, ack)
		return
	case dissem.TypePull, dissem.TypeState:
		c.checkCovered(m.Digest)
	}
	c.step(func(now int64) { c.core.Step(m, now) })
}

// execute carries out a Ready. Reliable sends run concurrently; with wait
// they are waited for, and execute returns how many there were and how many
// failed.
func (c *Cluster) execute(rd dissem.Ready, wait bool) (reliable, failed int) {
	for _, a := range rd.Apply {
		c.apply(a)
	}
	for _, n := range rd.Notes {
		c.note(n)
	}
	var wg sync.WaitGroup
	var fails atomic.Int64
	// The destinations, looked up under one lock: a relay sends each
	// message it relays to several members.
	var buf [16]destination
	dests := c.view.destinations(&c.mu, rd.Sends, buf[:0])
	// A message sent to several members is framed once.
	var framed []byte
	var framedFor *dissem.Message
	for i, s := range rd.Sends {
		c.countDirect(s.Msg)
		to, addr := dests[i].node, dests[i].addr
		if to == nil {
			c.stats.SendErrors.Add(1)
			continue
		}
		if !s.Reliable {
			if s.Msg != framedFor {
				framed, framedFor = nil, s.Msg
			}
			framed = c.sendBestEffort(to, addr, s.Msg.Bytes, framed)
			continue
		}
		reliable++
		wg.Add(1)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer wg.Done()
			if !c.sendReliable(to, s.Msg.Bytes) {
				fails.Add(1)
			}
		}()
	}
	for _, b := range rd.Broadcasts {
		c.enqueueBroadcast(b.Msg.Bytes, b.Name)
	}
	for _, p := range rd.Pulls {
		c.stats.GapPulls.Add(1)
		c.goPull(p)
	}
	for _, p := range rd.PagePulls {
		c.goPullPage(p)
	}
	for _, a := range rd.Answers {
		c.goAnswer(a)
	}
	if len(rd.Rejoin) > 0 {
		var addrs []string
		c.mu.Lock()
		for _, name := range rd.Rejoin {
			if n := c.view.node(name); n != nil {
				addrs = append(addrs, n.Address())
			}
		}
		c.mu.Unlock()
		c.goRejoin(addrs)
	}
	if len(rd.Forget) > 0 {
		c.mu.Lock()
		for _, name := range rd.Forget {
			c.view.forget(name)
		}
		c.mu.Unlock()
	}
	if wait {
		wg.Wait()
	}
	return reliable, int(fails.Load())
}

// countDirect counts a message an owner sends straight to a member.
func (c *Cluster) countDirect(m *dissem.Message) {
	switch m.Type {
	case dissem.TypeDeltas:
		c.stats.DeltaCopies.Add(uint64(len(m.Deltas)))
		c.stats.DeltaBytes.Add(uint64(m.Size()))
	case dissem.TypeAlive, dissem.TypeListed:
		c.stats.AliveBytes.Add(uint64(m.Size()))
	}
}

// apply carries one change to the host.
func (c *Cluster) apply(a dissem.Apply) {
	switch a.Kind {
	case dissem.ApplyDeltas:
		if err := c.host.ApplyDeltas(a.Deltas); err != nil {
			c.stats.BadMessages.Add(1)
			c.log.Warn("rejected deltas", zap.Error(err))
			return
		}
		c.stats.DeltasReceived.Add(uint64(len(a.Deltas)))
	case dissem.ApplySync:
		c.stats.SyncRecordsReceived.Add(uint64(a.Sync.Len()))
		if a.Msg != nil && a.Msg.Type == dissem.TypeSyncPage {
			c.stats.SyncPagesReceived.Add(1)
		}
		if err := c.host.ApplySync(a.Sync); err != nil {
			c.stats.BadMessages.Add(1)
			c.log.Warn("rejected sync", zap.Error(err))
			return
		}
		if !a.Partial {
			c.markSynced("a member's answer to this node's digest")
		}
	case dissem.MarkDown:
		c.host.MarkNodeDown(a.Node)
	case dissem.MarkUp:
		c.host.MarkNodeUp(a.Node)
	case dissem.Retire:
		// A new incarnation of a node drops the sessions of its older
		// incarnations at once.
		if err := c.host.ApplySync(crdt.Sync{{Origin: a.Origin}}); err != nil {
			c.log.Warn("retire old incarnation", zap.Stringer("origin", a.Origin), zap.Error(err))
		}
	}
}

// note logs and counts what the core reports.
func (c *Cluster) note(n dissem.Note) {
	node := zap.String("node", n.Node)
	switch n.Kind {
	case dissem.NoteLeaseExpired:
		c.stats.LeasesExpired.Add(1)
		c.log.Info("peer lease expired; its sessions are shown expired", node)
	case dissem.NoteMemberFailed:
		c.stats.MembersFailed.Add(1)
		c.log.Info("member failed; its sessions are shown expired", node)
	case dissem.NoteMemberLeft:
		c.stats.MembersLeft.Add(1)
		c.log.Info("member left; its sessions are shown expired", node)
	case dissem.NoteVerdictOverruled:
		c.log.Info("member declared dead but heard from since; its sessions stay shown", node)
	case dissem.NoteReviving:
		c.log.Info("peer heard again; its sessions stay shown expired until its missed writes arrive",
			node, zap.Uint64("watermark", n.Version))
	case dissem.NoteRevivedEarly:
		c.log.Warn("peer shown up before its missed writes arrived", node)
	case dissem.NoteAnswerDropped:
		c.stats.AnswersDropped.Add(1) // the asker retries at its next pull or push/pull
	case dissem.NoteTransferStarted:
		c.stats.TransfersStarted.Add(1)
		c.log.Info("state transfer from a member started: receiving what this node lacks in pages", node)
	case dissem.NoteTransferDone:
		c.stats.TransfersDone.Add(1)
		c.log.Info("state transfer from a member done", node, zap.Int("pages", n.Pages), zap.Int("records", n.Records))
	case dissem.NoteTransferStalled:
		c.log.Info("state transfer from a member stalled; asking for the page again", node,
			zap.Int("pages", n.Pages), zap.Int("records", n.Records))
	case dissem.NoteTransferAbandoned:
		c.stats.TransfersAbandoned.Add(1)
		c.log.Warn("state transfer from a member abandoned after repeated stalls; anti-entropy fetches the rest", node,
			zap.Int("pages", n.Pages), zap.Int("records", n.Records))
	case dissem.NoteBadDeltas:
		c.stats.BadMessages.Add(1)
		c.log.Warn("rejected deltas", node, zap.Error(n.Err))
	}
}

// goPull asks a peer, over TCP, for what this node lacks.
func (c *Cluster) goPull(from string) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			c.core.PullDone(from)
			c.mu.Unlock()
		}()
		m, err := dissem.NewDigest(dissem.TypePull, c.cfg.Name, c.host.Digest())
		if err == nil {
			c.stats.PullBytes.Add(uint64(m.Size()))
			err = c.sendReliableTo(from, m.Bytes)
		}
		if err != nil {
			c.log.Debug("pull failed", zap.String("from", from), zap.Error(err))
		}
	}()
}

// goAnswer answers a peer's digest with what it lacks: the page of the
// answer at a.Cursor, which the peer asks for once it applied the page
// before. The first page of an answer with nothing in it is not sent.
func (c *Cluster) goAnswer(a dissem.Answer) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			c.core.AnswerDone()
			c.mu.Unlock()
		}()
		page, next, last := c.host.DiffPage(a.Digest, a.Cursor, 0, c.cfg.SyncPageBytes)
		if len(page) == 0 && last && !a.Cursor.Started {
			return
		}
		page = c.forPeer(a.To, page)
		m, err := dissem.NewSyncPage(dissem.SyncPage{From: c.cfg.Name, At: a.Cursor, Next: next, Last: last}, page)
		if err != nil {
			c.log.Error("encode sync page", zap.Error(err))
			return
		}
		c.stats.SyncRecordsSent.Add(uint64(page.Len()))
		c.stats.SyncBytesSent.Add(uint64(m.Size()))
		c.stats.SyncPagesSent.Add(1)
		if !a.Cursor.Started && !last {
			c.log.Info("state transfer to a member: sending what it lacks in pages",
				zap.String("to", a.To), zap.Int("page_bytes", c.cfg.SyncPageBytes))
		}
		if err := c.sendReliableTo(a.To, m.Bytes); err != nil {
			c.log.Debug("sync answer failed", zap.String("to", a.To), zap.Error(err))
		}
	}()
}

// goPullPage asks a peer for the page of its answer at cursor, with this
// replica's digest as it is now.
func (c *Cluster) goPullPage(p dissem.PagePull) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		m, err := dissem.NewPullPage(c.cfg.Name, c.host.Digest(), p.Cursor)
		if err == nil {
			c.stats.PullBytes.Add(uint64(m.Size()))
			err = c.sendReliableTo(p.To, m.Bytes)
		}
		if err != nil {
			c.log.Debug("page pull failed", zap.String("from", p.To), zap.Error(err))
		}
	}()
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
