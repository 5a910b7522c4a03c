package sim

import (
	"fmt"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/gossip"
)

// This file is the simulated counterpart of gossip.Cluster (cluster.go and
// delegate.go): the same steps in the same order, calling the same pure
// functions of gossip/plan.go (ChooseMode, PackDeltas, Leases, GapTracker,
// PushPullScale) and the same crdt.Replica methods, with the network and the
// clock replaced. Function names match cluster.go's.

// publish is Cluster.Publish: queue an owner's delta; flush after
// BatchDelay (plus a measured write's flush delay, Config.WriteDelays).
func (s *Sim) publish(n *node, d crdt.Delta) {
	n.pending = append(n.pending, d)
	n.ownVersion = d.Version()
	if !n.flushArmed {
		n.flushArmed = true
		delay := s.cfg.BatchDelay
		if wd := s.cfg.WriteDelays; len(wd) > 0 {
			i := s.rng.IntN(len(wd))
			n.writeDelay = int32(i) + 1
			delay += wd[i].Flush
		}
		s.after(n, delay, evFlush, 0, 0)
	}
}

// liveMembers is len(Cluster.otherMembers()): members whose last
// memberlist event was a join or update, i.e. alive or suspect (memberlist
// sends no event for a suspicion).
func (s *Sim) liveMembers(n *node) int { return s.cfg.Nodes - 1 - n.numDown }

// member reports whether Cluster.otherMembers includes p.
func (s *Sim) member(n *node, p int32) bool {
	if p == n.id {
		return false
	}
	switch s.viewOf(n, p).state {
	case stDead:
		// Cluster.liveLocked: held dead by memberlist, but heard since
		// the verdict (Leases.Fail overruled it), so still sent to.
		name := s.names[p]
		_, heard := n.leases.LastHeard(name)
		return heard && !n.leases.Down(name)
	case stLeft:
		return false
	}
	return true
}

// flush is Cluster.flush.
func (s *Sim) flush(n *node) {
	batch := n.pending
	n.pending = nil
	if len(batch) == 0 {
		return
	}
	batch = crdt.Coalesce(batch)
	packets, oversized := gossip.PackDeltas(batch, s.cfg.PacketBudget)
	big := make(map[int]bool, len(oversized))
	for _, i := range oversized {
		big[i] = true
	}
	members := s.liveMembers(n)
	mode := gossip.ChooseMode(members+1, s.cfg.EagerThreshold)
	var hops []time.Duration
	if n.writeDelay > 0 {
		hops = s.cfg.WriteDelays[n.writeDelay-1].Hops
		n.writeDelay = 0
	}
	for i, p := range packets {
		m := s.deltaMsg(p)
		switch {
		case big[i]:
			s.sendAll(n, m, true)
			s.stats.directCopies += uint64(len(p) * members)
		case mode == gossip.ModeEager && len(hops) > 0:
			s.sendAllMeasured(n, m, hops)
			s.stats.directCopies += uint64(len(p) * members)
		case mode == gossip.ModeEager:
			s.sendAll(n, m, false)
			s.stats.directCopies += uint64(len(p) * members)
		default:
			s.enqueueBroadcast(n, m, noName)
			seeds := s.kRandom(3, func(q int32) bool { return !s.member(n, q) })
			for _, t := range seeds {
				s.sendBestEffort(n, t, m)
			}
			s.stats.directCopies += uint64(len(p) * len(seeds))
		}
	}
}

// deltaMsg builds the gossip message for one packed batch, sized by crdt's
// real encoder.
func (s *Sim) deltaMsg(ds []crdt.Delta) *umsg {
	b, err := crdt.AppendDeltas(nil, ds)
	if err != nil {
		panic(fmt.Sprintf("sim: encode deltas: %v", err)) // our own records: a bug
	}
	m := &umsg{kind: uDeltas, deltas: ds, size: rollcallHeader + len(b),
		slots: make([]int32, len(ds)), writers: make([]int32, len(ds)), clients: make([]int32, len(ds)),
		applied: make([]uint64, (s.cfg.Nodes+63)/64)}
	s.deltaMsgList = append(s.deltaMsgList, m)
	for i := range ds {
		o := ds[i].Origin()
		m.slots[i] = s.index(o.Node)
		m.writers[i] = s.writer(originKey(m.slots[i], o))
		if cid, ok := s.byUser[ds[i].User()]; ok {
			m.clients[i] = cid
		} else {
			m.clients[i] = -1
		}
	}
	return m
}

// sendAll is Cluster.sendAll to every live member.
func (s *Sim) sendAll(n *node, m *umsg, reliable bool) {
	for p := range int32(s.cfg.Nodes) {
		if !s.member(n, p) {
			continue
		}
		if reliable {
			s.sendStream(&stream{from: n.id, to: p, msg: m}, m.size)
		} else {
			s.sendBestEffort(n, p, m)
		}
	}
}

// sendAllMeasured is sendAll, best effort, with the packets' latencies
// taken from one measured write's hop delays (Config.WriteDelays): each in
// a random order, then drawn from them again if there are more members.
func (s *Sim) sendAllMeasured(n *node, m *umsg, hops []time.Duration) {
	order := s.rng.Perm(len(hops))
	k := 0
	for p := range int32(s.cfg.Nodes) {
		if !s.member(n, p) {
			continue
		}
		var lat time.Duration
		if k < len(order) {
			lat = hops[order[k]]
		} else {
			lat = hops[s.rng.IntN(len(hops))]
		}
		k++
		s.sendBestEffortAfter(n, p, m, int64(lat))
	}
}

// sendBestEffort is memberlist's SendBestEffort: one user message in its
// own packet, nothing piggybacked.
func (s *Sim) sendBestEffort(n *node, to int32, m *umsg) { s.sendBestEffortAfter(n, to, m, -1) }

// sendBestEffortAfter is sendBestEffort with the latency given (ns), or
// drawn from Config.Latency when lat is negative.
func (s *Sim) sendBestEffortAfter(n *node, to int32, m *umsg, lat int64) {
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
	n.queue.queue(m.reg-1, regLen(m.size), name)
	if n.queue.numQueued() > s.cfg.MaxQueue {
		n.queue.prune(s.cfg.MaxQueue)
		s.stats.queuePruned++
	}
}

// handleUser is Cluster.handle for one Rollcall message.
func (s *Sim) handleUser(n *node, m *umsg) {
	switch m.kind {
	case uDeltas:
		s.handleDeltas(n, m)
	case uAlive:
		s.handleAlive(n, m)
	case uPull, uState:
		s.goAnswer(n, m.from, m.digest)
	case uSync:
		s.applySync(n, m.sync)
	}
}

// handleDeltas is Cluster.handleDeltas. A message this node already
// applied is not applied again (crdt's Apply is idempotent: the state would
// not change) and cannot be fresh (its versions are all at most what was
// seen then), so only the lease refresh is done for it.
func (s *Sim) handleDeltas(n *node, m *umsg) {
	dup := bit(m.applied, n.id)
	// Cluster asks memberlist's NumMembers (alive and suspect, self
	// included).
	epidemic := gossip.ChooseMode(s.numMembers(n), s.cfg.EagerThreshold) == gossip.ModeEpidemic
	if dup && epidemic {
		return // nothing fresh, no lease refresh, nothing to apply or relay
	}
	fresh := false
	var up []int32
	last := int32(-1)
	for i := range m.deltas {
		d := &m.deltas[i]
		p := m.slots[i] // the origin's node
		if p == n.id {
			continue
		}
		if !dup {
			w := m.writers[i]
			if k := int(w) + 1 - len(n.seen); k > 0 {
				n.seen = append(n.seen, make([]writerSeen, k)...)
			}
			if v := d.Version(); v > n.seen[w].version {
				fresh = true
				n.seen[w].version = v
			}
		}
		// Eager deltas come straight from their owner and refresh its
		// lease; relayed epidemic ones do not. Heard twice at one instant
		// is heard once.
		if !epidemic && p != last {
			last = p
			if s.heard(n, p) {
				up = append(up, p)
			}
		}
	}
	for _, p := range up {
		s.markUp(n, p)
	}
	if !dup {
		setBit(m.applied, n.id)
		s.applyDeltas(n, m)
	}
	if epidemic && fresh {
		s.enqueueBroadcast(n, m, noName)
	}
}

// originKey packs an origin into a map key: its node's slot and the life
// its incarnation encodes.
func originKey(slot int32, o crdt.Origin) uint64 {
	return uint64(slot)<<32 | (o.Incarnation - uint64(wallBase))
}

// writer returns the dense number of an origin (by originKey), numbering
// it if new. deltaMsg numbers the origins of a message's deltas.
func (s *Sim) writer(k uint64) int32 {
	w, ok := s.writers[k]
	if !ok {
		if s.writers == nil {
			s.writers = make(map[uint64]int32)
		}
		w = int32(len(s.writers))
		s.writers[k] = w
	}
	return w
}

// handleAlive is Cluster.handleAlive.
func (s *Sim) handleAlive(n *node, m *umsg) {
	o, p := m.origin, m.from
	if p == n.id {
		return
	}
	var local uint64
	if m.watermark > 0 {
		local = n.r.Watermark(o)
	}
	wasDown := s.heard(n, p)
	known := n.peerLife[p]
	if known == 0 {
		known = 1
	}
	newInc := o.Incarnation > incarnation(known)
	if newInc {
		n.peerLife[p] = uint32(o.Incarnation - uint64(wallBase))
	}
	pull := n.gaps.Observe(o, m.watermark, local) && !n.pulling[p]
	if pull {
		n.pulling[p] = true
	}
	if newInc {
		s.retire(n, p, o)
	}
	if wasDown {
		s.markUp(n, p)
	}
	if pull {
		s.stats.gapPulls++
		s.goPull(n, p)
	}
}

// digestMsg builds a pull or push/pull state message carrying n's digest.
// Its size counts, besides the digest the replica returns, one entry per
// member the replica has no records of: a real node holds an (empty) origin
// for every member it learned of through memberlist, which the simulator
// does not materialise (it would cost nodes² memory).
func (s *Sim) digestMsg(n *node, kind umsgKind) *umsg {
	d := n.r.Digest()
	b, err := crdt.AppendDigest(nil, d)
	if err != nil {
		panic(fmt.Sprintf("sim: encode digest: %v", err))
	}
	size := rollcallHeader + 1 + mpStr(len(n.name)) + len(b)
	if extra := s.cfg.Nodes - len(d); extra > 0 {
		size += extra * digestEntrySize(len(n.name), incarnation(1), 0)
	}
	return &umsg{kind: kind, from: n.id, digest: d, size: size, antiEntropy: true}
}

// goPull is Cluster.goPull: ask the origin, over TCP, for what n lacks.
func (s *Sim) goPull(n *node, from int32) {
	m := s.digestMsg(n, uPull)
	at := s.sendStreamAt(&stream{from: n.id, to: from, msg: m}, m.size)
	s.q.push(event{at: at, kind: evPullDone, node: n.id, life: n.life, a: from})
}

// sendStreamAt sends a stream and returns when the send completes (or now,
// when it fails at once).
func (s *Sim) sendStreamAt(st *stream, size int) int64 {
	if !s.sendStream(st, size) {
		return s.now
	}
	return s.lastStreamAt
}

// maxConcurrentAnswers mirrors gossip's bound on anti-entropy answers
// computed at once; past it a digest goes unanswered (the asker retries at
// its next pull or push/pull).
const maxConcurrentAnswers = 4

// goAnswer is Cluster.goAnswer: answer a digest with what the asker lacks.
func (s *Sim) goAnswer(n *node, asker int32, d crdt.Digest) {
	if asker == n.id {
		return
	}
	if n.answering >= maxConcurrentAnswers {
		s.stats.answersDropped++
		return
	}
	sync := n.r.Diff(d)
	if len(sync) == 0 {
		return
	}
	b, err := crdt.AppendSync(nil, sync)
	if err != nil {
		panic(fmt.Sprintf("sim: encode sync: %v", err))
	}
	s.stats.syncRecords += uint64(sync.Len())
	m := &umsg{kind: uSync, sync: sync, size: rollcallHeader + len(b), antiEntropy: true}
	n.answering++
	at := s.sendStreamAt(&stream{from: n.id, to: asker, msg: m}, m.size)
	s.q.push(event{at: at, kind: evAnswerDone, node: n.id, life: n.life})
}

// reconnect is Cluster.reconnect: try to rejoin (a join push/pull) every
// member memberlist declared dead within ReconnectTimeout, so a healed
// partition re-merges.
func (s *Sim) reconnect(n *node) {
	for _, p := range sortedKeys(n.view) {
		v := n.view[p]
		if v.state != stDead || time.Duration(s.now-v.changeAt) > s.cfg.ReconnectTimeout {
			continue
		}
		s.startPushPull(n, p)
	}
}

// announce is Cluster.announce.
func (s *Sim) announce(n *node) {
	m := &umsg{kind: uAlive, origin: n.self, from: n.id, watermark: n.ownVersion, sessions: n.sessions}
	m.size = aliveMsgSize(len(n.name), n.self.Incarnation, n.ownVersion, n.sessions)
	if gossip.ChooseMode(s.liveMembers(n)+1, s.cfg.EagerThreshold) == gossip.ModeEager {
		for p := range int32(s.cfg.Nodes) {
			if s.member(n, p) {
				s.sendBestEffort(n, p, m)
			}
		}
		return
	}
	s.enqueueBroadcast(n, m, n.id)
}

// heard is Leases.Heard for peer p at now, kept in step with the FIFO that
// lets leaseTick skip lease scans that cannot expire anything.
func (s *Sim) heard(n *node, p int32) (wasDown bool) {
	w := s.wall()
	wasDown = n.leases.Heard(s.names[p], w)
	rec := leaseRec{peer: p, at: w}
	if k := len(n.leaseFIFO); k == 0 || n.leaseFIFO[k-1] != rec {
		n.leaseFIFO = append(n.leaseFIFO, rec)
	}
	return wasDown
}

// beginLease is Leases.Begin for peer p (memberlist reported it as a member
// of a node that has not heard it yet), kept in step with the lease FIFO.
func (s *Sim) beginLease(n *node, p int32) {
	name := s.names[p]
	if _, heard := n.leases.LastHeard(name); heard || n.leases.Down(name) {
		return
	}
	w := s.wall()
	n.leases.Begin(name, w)
	n.leaseFIFO = append(n.leaseFIFO, leaseRec{peer: p, at: w})
}

// leaseTick is the lease half of Cluster.tickLoop. Leases.Expire scans
// every peer; it is called only when some peer's lease may have passed
// (Config.Check verifies that the skipped calls would expire nothing).
func (s *Sim) leaseTick(n *node) {
	if !gossip.LeasesEnforced(gossip.ChooseMode(s.numMembers(n), s.cfg.EagerThreshold)) {
		return
	}
	w := s.wall()
	ttl := int64(s.cfg.LeaseTimeout)
	due := false
	i := 0
	for ; i < len(n.leaseFIFO); i++ {
		r := n.leaseFIFO[i]
		if w-r.at <= ttl {
			break
		}
		if at, _ := n.leases.LastHeard(s.names[r.peer]); at == r.at && !n.leases.Down(s.names[r.peer]) {
			due = true
		}
	}
	if i > 0 {
		n.leaseFIFO = append(n.leaseFIFO[:0], n.leaseFIFO[i:]...)
	}
	if !due {
		if s.cfg.Check {
			if got := n.leases.Expire(w); len(got) > 0 {
				panic(fmt.Sprintf("sim: lease index missed expiries %v at %s", got, n.name))
			}
		}
		return
	}
	for _, name := range sortedStrings(n.leases.Expire(w)) {
		s.markDown(n, s.index(name))
	}
}

// onLeave is events.NotifyLeave (Cluster.memberFailed): memberlist
// declared p dead or left.
func (s *Sim) onLeave(n *node, p int32, left bool) {
	var overrule time.Duration
	if !left {
		overrule = gossip.VerdictOverrule(gossip.ChooseMode(s.numMembers(n), s.cfg.EagerThreshold), s.cfg.AliveInterval)
	}
	if n.leases.Fail(s.names[p], s.wall(), overrule) {
		s.markDown(n, p)
	}
}

// observeMember is Cluster.observeMember: a member's metadata carries its
// Rollcall incarnation; a new one retires the old one's sessions.
func (s *Sim) observeMember(n *node, p int32, life uint32) {
	known := n.peerLife[p]
	if known == 0 {
		known = 1
	}
	if life > known {
		n.peerLife[p] = life
		s.retire(n, p, crdt.Origin{Node: s.names[p], Incarnation: incarnation(life)})
	}
}

// Host operations: the real ReplicaHost calls, plus the simulator's
// bookkeeping of what each node shows.

func (s *Sim) applyDeltas(n *node, m *umsg) {
	w := s.wall()
	ds := m.deltas
	for i := range ds {
		var ref *crdt.OriginRef
		if wr := m.writers[i]; int(wr) < len(n.seen) {
			ref = &n.seen[wr].ref
		}
		changed, dropped, err := n.r.ApplyVia(ref, ds[i], w)
		if err != nil {
			panic(fmt.Sprintf("sim: %s rejected a delta: %v", n.name, err))
		}
		if changed {
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
	m := s.digestMsg(n, uState)
	st := &stream{from: n.id, to: to, msg: m, pushPull: true, members: s.membershipOf(n)}
	s.sendStream(st, s.pushPullSize(m))
}

func (s *Sim) pushPullSize(m *umsg) int {
	return s.sizes.pushHeader + s.cfg.Nodes*s.sizes.pushNode + m.size
}

// membershipOf snapshots the non-default part of n's view, plus n itself,
// as push/pull carries it.
func (s *Sim) membershipOf(n *node) []memberState {
	out := make([]memberState, 0, len(n.view)+1)
	out = append(out, memberState{node: n.id, state: stAlive, inc: n.mlInc, life: n.life})
	for _, p := range sortedKeys(n.view) {
		v := n.view[p]
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
		m := s.digestMsg(n, uState)
		s.sendStream(&stream{from: n.id, to: st.from, msg: m, pushPull: true, reply: true, members: s.membershipOf(n)},
			s.pushPullSize(m))
	}
	s.mergeState(n, st.members)
	s.goAnswer(n, st.msg.from, st.msg.digest)
}
