package sim

import (
	"fmt"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// This file drives each simulated gateway's dissem.Node, the protocol core
// gossip.Cluster drives too: it feeds the core the same inputs (owner
// writes, received messages, memberlist's events, the passing of time) and
// carries out its Ready over the simulated network, queues and replica.
// Every decision (batching, packing, mode, targets, relays, leases, gaps,
// pulls, answers, revivals, rejoins) is the core's; every message is the
// core's own encoding, so every size is the real one.

// coreView is what a node's core reads of the simulation: memberlist's
// member list as the node sees it (dissem.Members) and its replica
// (dissem.Replica).
type coreView struct {
	s *Sim
	n *node
}

var (
	_ dissem.Members = (*coreView)(nil)
	_ dissem.Replica = (*coreView)(nil)
)

func (v *coreView) NumMembers() int   { return v.s.numMembers(v.n) }
func (v *coreView) NumPeers() int     { return v.s.cfg.Nodes }
func (v *coreView) Peer(i int) string { return v.s.names[i] }

// Incarnation is the Rollcall incarnation of a peer in the node's
// memberlist view: the simulator starts with every node joined, without
// the join events a real node would have had for each member.
func (v *coreView) Incarnation(name string) uint64 {
	return incarnation(v.s.viewOf(v.n, v.s.index(name)).life)
}

func (v *coreView) Watermark(o crdt.Origin) uint64 {
	if o == v.n.self { // each announcement asks
		return v.n.r.WatermarkVia(&v.n.selfRef, o)
	}
	return v.n.r.Watermark(o)
}
func (v *coreView) SessionCount() int { return v.n.sessions }

// initCore makes the core of a node's life.
func (s *Sim) initCore(n *node) {
	n.cv = coreView{s, n}
	err := n.core.Init(dissem.Config{
		Name: n.name, Incarnation: n.self.Incarnation, ClientAddr: clientAddr(n.id),
		BatchDelay: s.cfg.BatchDelay, PacketBudget: s.cfg.PacketBudget, EagerThreshold: s.cfg.EagerThreshold,
		Relay:         s.cfg.Relay,
		AliveInterval: s.cfg.AliveInterval, LeaseTimeout: s.cfg.LeaseTimeout,
		ReconnectInterval: s.cfg.ReconnectInterval, ReconnectTimeout: s.cfg.ReconnectTimeout,
		Rand: s.rng, Origins: s.origins, Trees: s.trees,
	}, &n.cv, &n.cv)
	if err != nil {
		panic(fmt.Sprintf("sim: %v", err)) // Config.Validate checked every field
	}
}

// clientAddr is the client address a simulated gateway advertises, sized
// like a real one.
func clientAddr(id int32) string { return fmt.Sprintf("10.1.%d.%d:7400", id/256, id%256) }

// publish is Cluster.Publish of an owner's deltas, written together. With Config.WriteDelays
// the first write of a batch draws a measured write, whose hops time the
// batch's fan-out, and reaches the core its flush delay later (evPublish);
// the writes made meanwhile go with it.
func (s *Sim) publish(n *node, ds ...crdt.Delta) {
	if len(n.delayed) > 0 {
		n.delayed = append(n.delayed, ds...)
		return
	}
	if wd := s.cfg.WriteDelays; len(wd) > 0 && n.core.Pending() == 0 {
		i := s.rng.IntN(len(wd))
		n.writeDelay = int32(i) + 1
		if f := wd[i].Flush; f > 0 {
			n.delayed = append(n.delayed, ds...)
			s.after(n, f, evPublish, 0, 0)
			return
		}
	}
	n.core.Publish(ds, s.wall())
	s.drive(n)
}

// tick is the core's timer.
func (s *Sim) tick(n *node, deadline int64) {
	if n.tickAt != deadline {
		return // superseded by an earlier deadline, which rescheduled
	}
	n.tickAt = 0
	n.core.Tick(s.wall())
	s.drive(n)
}

// drive executes the core's Ready until it has nothing more, then arms the
// timer for its next deadline.
func (s *Sim) drive(n *node) {
	for n.core.HasReady() {
		s.execute(n, n.core.Ready())
		n.core.Advance(s.wall())
	}
	d := n.core.Deadline()
	if n.tickAt != 0 && n.tickAt <= d {
		return
	}
	n.tickAt = d
	s.q.push(event{at: max(d-wallBase, s.now), kind: evTick, node: n.id, life: n.life, b: uint64(d)})
}

// execute carries out one Ready of n's core.
func (s *Sim) execute(n *node, rd *dissem.Ready) {
	for i := range rd.Apply {
		s.apply(n, &rd.Apply[i])
	}
	var hops []time.Duration
	if n.writeDelay > 0 {
		hops = s.cfg.WriteDelays[n.writeDelay-1].Hops
	}
	var order []int
	var orderOf *dissem.Message
	k := 0
	for i := range rd.Sends {
		snd := &rd.Sends[i]
		m := s.wrap(snd.Msg)
		to := s.index(snd.To)
		if m.typ == dissem.TypeDeltas {
			s.stats.directCopies += uint64(m.changes)
			n.writeDelay = 0
		}
		switch {
		case snd.Reliable:
			s.sendStream(&stream{from: n.id, to: to, msg: m}, m.size)
		case len(hops) > 0 && m.typ == dissem.TypeDeltas && n.core.Mode() == dissem.ModeEager:
			// The packets' latencies come from one measured write's hop
			// delays: each in a random order, then drawn from them again
			// if there are more members.
			if orderOf != snd.Msg {
				order, orderOf, k = s.rng.Perm(len(hops)), snd.Msg, 0
			}
			var lat time.Duration
			if k < len(order) {
				lat = hops[order[k]]
			} else {
				lat = hops[s.rng.IntN(len(hops))]
			}
			k++
			s.sendBestEffortAfter(n, to, m, int64(lat))
		default:
			s.sendBestEffortAfter(n, to, m, -1)
		}
	}
	for i := range rd.Broadcasts {
		b := &rd.Broadcasts[i]
		name := noName
		if b.Name != "" {
			name = n.id // "alive/NODE": this node's announcement
		}
		s.enqueueBroadcast(n, s.wrap(b.Msg), name)
	}
	for _, p := range rd.Pulls {
		s.stats.gapPulls++
		s.goPull(n, p)
	}
	for i := range rd.Answers {
		s.goAnswer(n, &rd.Answers[i])
	}
	for _, name := range rd.Rejoin {
		s.startPushPull(n, s.index(name))
	}
	for _, note := range rd.Notes {
		if note.Kind == dissem.NoteAnswerDropped {
			s.stats.answersDropped++
		}
	}
	s.wraps = s.wraps[:0]
}

// wrap returns the simulator's wrapper of a core message: the one being
// delivered (a relay), or one made for it once per Ready.
func (s *Sim) wrap(m *dissem.Message) *umsg {
	if s.cur != nil && s.cur.msg == m {
		return s.cur
	}
	for _, w := range s.wraps {
		if w.msg == m {
			return w
		}
	}
	w := s.newUmsg(m)
	s.wraps = append(s.wraps, w)
	return w
}

// newUmsg wraps a message the core made. A delta batch has its per-delta
// lookups done once, not at every node.
func (s *Sim) newUmsg(m *dissem.Message) *umsg {
	u := &umsg{msg: m, typ: m.Type, size: m.Size()}
	if m.Type != dissem.TypeDeltas {
		return u
	}
	ds := m.Deltas
	u.clients = make([]int32, len(ds))
	u.applied = make([]uint64, (s.cfg.Nodes+63)/64)
	if s.restarts {
		s.deltaMsgList = append(s.deltaMsgList, u)
	}
	for i := range ds {
		if ds[i].Session != nil {
			u.changes++
		}
		if cid, ok := s.byUser[ds[i].User()]; ok {
			u.clients[i] = cid
		} else {
			u.clients[i] = -1
		}
	}
	return u
}

// apply is one change the core asks of the replica.
func (s *Sim) apply(n *node, a *dissem.Apply) {
	switch a.Kind {
	case dissem.ApplyDeltas:
		u := s.cur
		if u == nil || u.msg != a.Msg {
			u = s.wrap(a.Msg)
		}
		// A batch this life of the node applied already changes nothing
		// (crdt's Apply is idempotent).
		if !bit(u.applied, n.id) {
			setBit(u.applied, n.id)
			s.applyDeltas(n, u)
		}
	case dissem.ApplySync:
		s.applySync(n, a.Sync)
	case dissem.MarkDown:
		s.markDown(n, s.index(a.Node))
	case dissem.MarkUp:
		s.markUp(n, s.index(a.Node))
	case dissem.Retire:
		s.retire(n, s.index(a.Origin.Node), a.Origin)
	}
}

// sendBestEffortAfter is memberlist's SendBestEffort, one user message in
// its own packet, with the latency given (ns), or drawn from
// Config.Latency when lat is negative.
func (s *Sim) sendBestEffortAfter(n *node, to int32, m *umsg, lat int64) {
	c := &s.stats.sent[m.typ][0]
	c.msgs++
	c.bytes += uint64(m.size)
	pkt := s.newPacket(n.id, to)
	pkt.parts = append(pkt.parts, part{kind: pUser, msg: m, size: m.size})
	s.sendPacketAfter(pkt, lat)
}

// enqueueBroadcast is Cluster.enqueueBroadcast. A message is registered
// once and shared by every queue that holds it, as the bytes of a relayed
// message are equal. name is noName for a delta batch (gossip leaves it
// unnamed; the queue takes it as a UniqueBroadcast, see bqueue) or the slot
// of the node whose alive announcement it is (gossip names it
// "alive/NODE", and a newer one replaces it).
func (s *Sim) enqueueBroadcast(n *node, m *umsg, name int32) {
	if m.reg == 0 {
		ref, _ := s.register(part{kind: pUser, msg: m, size: m.size})
		m.reg = ref + 1
	}
	m.queued++
	n.queue.queue(m.reg-1, regLen(m.size), name)
	if n.queue.numQueued() > s.cfg.MaxQueue {
		n.queue.prune(s.cfg.MaxQueue)
		s.stats.queuePruned++
	}
	s.releaseDropped()
}

// handleUser is Cluster.handle for one Rollcall message. A delta batch
// this life of the node stepped before is not stepped again in epidemic
// mode: the core's answer to a repeat there is nothing (its versions are
// all seen, so nothing is fresh to relay; relayed deltas refresh no lease;
// the apply changes nothing).
func (s *Sim) handleUser(n *node, m *umsg) {
	if m.typ == dissem.TypeDeltas && bit(m.applied, n.id) &&
		dissem.ChooseMode(s.numMembers(n), s.cfg.EagerThreshold) == dissem.ModeEpidemic { // the core's Mode, inlined
		return
	}
	s.cur = m
	n.core.Step(m.msg, s.wall())
	s.drive(n)
	s.cur = nil
}

// digestMsg builds a pull or push/pull state message carrying n's digest,
// and the size it has on the wire. The size counts, besides the digest the
// replica returns, one entry per member the replica has no records of: a
// real node holds an (empty) origin for every member it learned of through
// memberlist, which the simulator does not materialise (it would cost
// nodes² memory).
func (s *Sim) digestMsg(n *node, t dissem.Type) *umsg {
	d := n.r.Digest()
	// Its size, not its bytes: no node here decodes them, and encoding
	// the digest of every push/pull and gap pull (a thousand origins each
	// at 1,000 nodes) costs about a twentieth of a run under loss.
	m := &dissem.Message{Type: t, Digest: dissem.DigestMsg{From: n.name, Digest: d}}
	size := dissem.DigestSize(m.Digest)
	if extra := s.cfg.Nodes - len(d); extra > 0 {
		size += extra * s.emptyEntry
	}
	return &umsg{msg: m, typ: m.Type, size: size, from: n.id, antiEntropy: true}
}

// emptyDigestEntry is the encoded size of a digest entry of an origin
// named like the simulator's nodes, with nothing written.
func emptyDigestEntry(name string) int {
	one, err := crdt.AppendDigest(nil, crdt.Digest{{Origin: crdt.Origin{Node: name, Incarnation: incarnation(1)}}})
	if err != nil {
		panic(err)
	}
	none, err := crdt.AppendDigest(nil, crdt.Digest{})
	if err != nil {
		panic(err)
	}
	return len(one) - len(none)
}

// goPull is Cluster.goPull: ask a peer, over TCP, for what n lacks; the
// core hears the pull is over when the stream arrives (or fails).
func (s *Sim) goPull(n *node, from string) {
	p := s.index(from)
	m := s.digestMsg(n, dissem.TypePull)
	at := s.sendStreamAt(&stream{from: n.id, to: p, msg: m}, m.size)
	s.q.push(event{at: at, kind: evPullDone, node: n.id, life: n.life, a: p})
}

// sendStreamAt sends a stream and returns when the send completes (or now,
// when it fails at once).
func (s *Sim) sendStreamAt(st *stream, size int) int64 {
	if !s.sendStream(st, size) {
		return s.now
	}
	return s.lastStreamAt
}

// goAnswer is Cluster.goAnswer: answer a digest with what the asker lacks.
func (s *Sim) goAnswer(n *node, a *dissem.Answer) {
	sync := n.r.Diff(a.Digest)
	if len(sync) == 0 {
		n.core.AnswerDone()
		return
	}
	m, err := dissem.NewSync(sync)
	if err != nil {
		panic(fmt.Sprintf("sim: encode sync: %v", err))
	}
	s.stats.syncRecords += uint64(sync.Len())
	u := &umsg{msg: m, typ: m.Type, size: m.Size(), antiEntropy: true}
	at := s.sendStreamAt(&stream{from: n.id, to: s.index(a.To), msg: u}, u.size)
	s.q.push(event{at: at, kind: evAnswerDone, node: n.id, life: n.life})
}

// onLeave is events.NotifyLeave (Cluster.memberFailed): memberlist
// declared p dead or left.
func (s *Sim) onLeave(n *node, p int32, left bool) {
	n.core.MemberFailed(s.names[p], left, s.wall())
	s.drive(n)
}

// observeMember is Cluster.observeMember: memberlist's join or update of
// p, whose metadata carries its Rollcall incarnation.
func (s *Sim) observeMember(n *node, p int32, life uint32) {
	n.core.MemberAlive(s.names[p], dissem.Meta{Incarnation: incarnation(life), ClientAddr: clientAddr(p)}, s.wall())
	s.drive(n)
}

// Host operations: the real ReplicaHost calls, plus the simulator's
// bookkeeping of what each node shows.

func (s *Sim) applyDeltas(n *node, m *umsg) {
	w := s.wall()
	ds := m.msg.Deltas
	for i := range ds {
		changed, dropped, err := n.r.ApplyVia(n.core.OriginRef(m.msg, i), ds[i], w)
		if err != nil {
			panic(fmt.Sprintf("sim: %s rejected a delta: %v", n.name, err))
		}
		if changed && ds[i].Session != nil { // a last-seen write changes no session
			if cid := m.clients[i]; cid >= 0 {
				s.observeClient(n, cid)
			}
		}
		for _, u := range dropped {
			s.observeUser(n, u)
		}
	}
}

func (s *Sim) applySync(n *node, sync crdt.Sync) {
	users, err := n.r.ApplySync(sync, s.wall())
	if err != nil {
		panic(fmt.Sprintf("sim: %s rejected a sync: %v", n.name, err))
	}
	for _, u := range users {
		s.observeUser(n, u)
	}
}

func (s *Sim) markDown(n *node, p int32) {
	for _, u := range n.r.SetNodeDown(s.names[p], s.wall()) {
		s.observeUser(n, u)
	}
	s.track.nodeShownDown(s, n, p)
}

func (s *Sim) markUp(n *node, p int32) {
	for _, u := range n.r.SetNodeUp(s.names[p]) {
		s.observeUser(n, u)
	}
}

func (s *Sim) retire(n *node, p int32, o crdt.Origin) {
	s.applySync(n, crdt.Sync{{Origin: o}})
	s.track.nodeShownDown(s, n, p)
}

// index returns the slot of a node name.
func (s *Sim) index(name string) int32 {
	i, ok := s.nameIdx[name]
	if !ok {
		panic("sim: unknown node " + name)
	}
	return i
}

// pushPull is memberlist's pushPull: exchange membership and Rollcall
// digests with one random live member over TCP.
func (s *Sim) pushPull(n *node) {
	peers := s.kRandom(1, func(p int32) bool { return !s.aliveMember(n, p) })
	if len(peers) == 0 {
		return
	}
	s.startPushPull(n, peers[0])
}

func (s *Sim) startPushPull(n *node, to int32) {
	s.stats.pushPulls++
	m := s.digestMsg(n, dissem.TypeState)
	st := &stream{from: n.id, to: to, msg: m, pushPull: true, members: s.membershipOf(n)}
	s.sendStream(st, s.pushPullSize(m))
}

func (s *Sim) pushPullSize(m *umsg) int {
	return s.sizes.pushHeader + s.cfg.Nodes*s.sizes.pushNode + m.size
}

// membershipOf snapshots the non-default part of n's view, plus n itself,
// as push/pull carries it.
func (s *Sim) membershipOf(n *node) []memberState {
	out := make([]memberState, 0, n.view.len()+1)
	out = append(out, memberState{node: n.id, state: stAlive, inc: n.mlInc, life: n.life})
	for _, p := range n.view.sortedSlots() {
		v, _ := n.view.get(p)
		out = append(out, memberState{node: p, state: v.state, inc: v.inc, life: v.life})
	}
	return out
}

// mergeState is memberlist's mergeState of a peer's membership.
func (s *Sim) mergeState(n *node, remote []memberState) {
	for _, r := range remote {
		switch r.state {
		case stAlive:
			s.aliveNode(n, part{kind: pAlive, node: r.node, inc: r.inc, life: r.life})
		case stLeft:
			s.deadNode(n, part{kind: pDead, node: r.node, inc: r.inc, from: r.node})
		default:
			s.suspectNode(n, part{kind: pSuspect, node: r.node, inc: r.inc, from: n.id})
		}
	}
}

// deliverPacket hands each message of a datagram to its handler.
func (s *Sim) deliverPacket(p *packet) {
	defer s.freePacket(p)
	n := s.nodes[p.to]
	if !n.up {
		return
	}
	for i := range p.parts {
		pt := &p.parts[i]
		switch pt.kind {
		case pPing:
			s.sendMsg(n, p.from, part{kind: pAck, seq: pt.seq, size: s.sizes.ack})
		case pAck:
			s.handleAck(n, pt.seq)
		case pIndirect:
			s.handleIndirect(n, *pt)
		case pNack:
		case pSuspect:
			s.suspectNode(n, *pt)
		case pAlive:
			s.aliveNode(n, *pt)
		case pDead:
			s.deadNode(n, *pt)
		case pUser:
			s.handleUser(n, pt.msg)
		}
	}
}

// deliverStream completes a TCP exchange.
func (s *Sim) deliverStream(st *stream) {
	n := s.nodes[st.to]
	if !n.up {
		return
	}
	if !st.pushPull {
		s.handleUser(n, st.msg)
		return
	}
	// The receiving side of a push/pull replies with its own state before
	// merging the remote one; then both merge and answer the digest.
	if !st.reply {
		m := s.digestMsg(n, dissem.TypeState)
		s.sendStream(&stream{from: n.id, to: st.from, msg: m, pushPull: true, reply: true, members: s.membershipOf(n)},
			s.pushPullSize(m))
	}
	s.mergeState(n, st.members)
	s.handleUser(n, st.msg)
}
