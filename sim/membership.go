package sim

import (
	"math"
	"slices"
	"time"

	"github.com/rollcall/rollcall/dissem"
)

// This file models memberlist (v0.7.0): the state of each member as one
// node sees it, suspicion with Lifeguard confirmations, the alive, suspect
// and dead broadcasts, and random member selection. Names of functions
// follow memberlist's state.go and suspicion.go.

// mlState is a member's state in one node's view (memberlist's
// NodeStateType).
type mlState uint8

const (
	stAlive mlState = iota
	stSuspect
	stDead
	stLeft
)

func (s mlState) String() string {
	return [...]string{"alive", "suspect", "dead", "left"}[s]
}

// peerView is what one node believes of another. Views equal to the
// default (alive, memberlist incarnation 1, life 1) are not stored, so a
// healthy 10,000-node cluster holds no per-pair state.
//
// A view holds its suspicion by index, not by pointer: the views are then
// free of pointers, and the garbage collector does not scan them.
//
// Of its suspicion, the view holds what most suspect messages need: a
// suspicion spreads as copies of one message, from one accuser, so the
// copies after the first find their accuser there, or the confirmations
// complete, without a trip to the slab.
type peerView struct {
	state     mlState
	confirmed uint8 // the suspicion's confirmations (suspicion.n), up to 255
	inc       uint32
	life      uint32
	susp      suspRef
	accuser   int32 // the suspicion's first accuser
	changeAt  int64
}

var defaultView = peerView{state: stAlive, inc: 1, life: 1, changeAt: math.MinInt64 / 2}

func (v *peerView) isDefault() bool {
	return v.state == stAlive && v.inc == 1 && v.life == 1 && v.susp == 0
}

// suspicion is memberlist's suspicion timer with its confirmations. The
// timer fires at deadline. Its event is scheduled at the earliest time it
// can fire, the minimum timeout (confirmations never bring it sooner), and
// then again at the deadline if that is later; a confirmation schedules
// one only when it brings the deadline before the pending check. Most
// suspicions are refuted within the minimum: their first check is a timer
// of the event queue's FIFO (every suspicion's is the same delay ahead),
// dropped without being run once it is stale (Sim.staleTimer).
//
// Suspicions live in the Sim's slab (Sim.susps), reused once refuted or
// replaced: under loss a run raises millions of them, a few thousand at a
// time, and an allocation each was a tenth of what the run allocated.
type suspicion struct {
	id       uint64
	start    int64
	deadline int64 // when the timer fires
	checkAt  int64 // when its pending event is
	k, n     int32
	// conf are the accusers: at most k+1, so a scan finds one. Those past
	// the first len(conf) (k+1 is 3 at the default suspicion multiplier)
	// are in Sim.suspMore.
	nconf int32
	conf  [4]int32
}

// suspRef is 1 + a suspicion's index in Sim.susps; 0 for none.
type suspRef uint32

// suspOf returns the suspicion r refers to; r is not 0. The pointer is
// good until the next newSuspicion.
func (s *Sim) suspOf(r suspRef) *suspicion { return &s.susps[r-1] }

// newSuspicion returns a free slot of the slab, zeroed.
func (s *Sim) newSuspicion() suspRef {
	if k := len(s.suspFree); k > 0 {
		r := s.suspFree[k-1]
		s.suspFree = s.suspFree[:k-1]
		*s.suspOf(r) = suspicion{}
		return r
	}
	s.susps = append(s.susps, suspicion{})
	return suspRef(len(s.susps))
}

// freeSuspicion returns r's slot to the slab; r may be 0. A free slot's
// id is 0, which no suspicion has.
func (s *Sim) freeSuspicion(r suspRef) {
	if r == 0 {
		return
	}
	sp := s.suspOf(r)
	if int(sp.nconf) > len(sp.conf) {
		delete(s.suspMore, r)
	}
	sp.id = 0
	s.suspFree = append(s.suspFree, r)
}

// dropSuspicions frees the suspicions of a node that crashed: they do
// nothing more, and their timers are stale.
func (s *Sim) dropSuspicions(n *node) {
	for _, p := range n.view.sortedSlots() {
		if v, _ := n.view.get(p); v.susp != 0 {
			s.freeSuspicion(v.susp)
			v.susp, v.accuser, v.confirmed = 0, 0, 0
			n.view.set(p, v)
		}
	}
}

// accused reports whether from is among sp's accusers.
func (s *Sim) accused(r suspRef, sp *suspicion, from int32) bool {
	k := min(int(sp.nconf), len(sp.conf))
	return slices.Contains(sp.conf[:k], from) || int(sp.nconf) > len(sp.conf) && slices.Contains(s.suspMore[r], from)
}

// addAccuser adds from to sp's accusers.
func (s *Sim) addAccuser(r suspRef, sp *suspicion, from int32) {
	if int(sp.nconf) < len(sp.conf) {
		sp.conf[sp.nconf] = from
	} else {
		if s.suspMore == nil {
			s.suspMore = make(map[suspRef][]int32)
		}
		s.suspMore[r] = append(s.suspMore[r], from)
	}
	sp.nconf++
}

// staleTimer reports whether a suspicion timer of the event queue's FIFO,
// set for the suspicion in slot r, would do nothing when run: the
// suspicion was refuted, replaced or checked since, or its node crashed
// (its slot is then free, or holds another suspicion, or the check is
// no longer due at the timer's time). A suspicion is in the slab exactly
// while a view holds it, as a suspect's, since its start (see
// suspicionDue); so this is suspicionDue, without looking up the node or
// its view. A stale timer stays stale.
func (s *Sim) staleTimer(t *timer) bool {
	sp := s.suspOf(suspRef(t.c))
	return sp.id != uint64(t.b) || sp.checkAt != t.at
}

// suspicionDue reports whether n's check of its suspicion of target,
// numbered id, is due at time at: n suspects target still, with the
// suspicion of that number, whose pending check is at that time.
func (s *Sim) suspicionDue(n *node, target int32, id uint64, at int64) bool {
	v := s.viewOf(n, target)
	if v.susp == 0 {
		return false
	}
	sp := s.suspOf(v.susp)
	return sp.id == id && at == sp.checkAt && v.state == stSuspect && v.changeAt == sp.start
}

func (s *Sim) viewOf(n *node, p int32) peerView {
	if v, ok := n.view.get(p); ok {
		return v
	}
	return defaultView
}

// setView stores n's view of p, keeping the down count in step.
func (s *Sim) setView(n *node, p int32, v peerView) {
	old := s.viewOf(n, p)
	if old.state >= stDead {
		n.numDown--
	}
	if v.state >= stDead {
		n.numDown++
	}
	if v.isDefault() {
		n.view.del(p)
		return
	}
	n.view.set(p, v)
}

// numMembers is memberlist's NumMembers: members not dead or left, self
// included. It sizes the Rollcall queue's retransmit limit.
func (s *Sim) numMembers(n *node) int { return s.cfg.Nodes - n.numDown }

// estNumNodes is memberlist's estimate of the cluster size: every node in
// its list, dead ones included until reaped. The simulator counts every
// node slot.
func (s *Sim) estNumNodes(*node) int { return s.cfg.Nodes }

// kRandom is memberlist's kRandomNodes over the node list: up to k distinct
// members that exclude does not reject.
func (s *Sim) kRandom(k int, exclude func(p int32) bool) []int32 {
	n := s.cfg.Nodes
	out := make([]int32, 0, k)
	if n < k*3 {
		perm := s.rng.Perm(n)
		for _, i := range perm {
			if len(out) == k {
				break
			}
			if !exclude(int32(i)) {
				out = append(out, int32(i))
			}
		}
		return out
	}
outer:
	for i := 0; i < 3*n && len(out) < k; i++ {
		p := int32(s.rng.IntN(n))
		if exclude(p) {
			continue
		}
		for _, q := range out {
			if q == p {
				continue outer
			}
		}
		out = append(out, p)
	}
	return out
}

// broadcastML queues a memberlist alive, suspect or dead message in n's
// memberlist queue, replacing any older one about the same node.
func (s *Sim) broadcastML(n *node, p part) {
	switch p.kind {
	case pAlive:
		p.size = s.sizes.alive
	case pSuspect:
		p.size = s.sizes.suspect
	case pDead:
		p.size = s.sizes.dead
	}
	ref, msgLen := s.registerML(p)
	n.mlQueue.queue(ref, msgLen, p.node)
	s.releaseDropped()
}

// refute answers an accusation against n with a higher incarnation.
func (s *Sim) refute(n *node, accused uint32) {
	inc := n.mlInc + 1
	if accused >= inc {
		inc = accused + 1
	}
	n.mlInc = inc
	s.stats.refutes++
	s.broadcastML(n, part{kind: pAlive, node: n.id, inc: inc, life: n.life})
}

// aliveNode handles an alive message about p (memberlist's aliveNode).
func (s *Sim) aliveNode(n *node, a part) {
	if a.node == n.id {
		return // about ourselves: only a stale message of an earlier life
	}
	v := s.viewOf(n, a.node)
	if a.inc <= v.inc {
		return
	}
	old := v
	s.freeSuspicion(v.susp)
	v.susp, v.accuser, v.confirmed = 0, 0, 0
	s.broadcastML(n, part{kind: pAlive, node: a.node, inc: a.inc, life: a.life})
	v.inc, v.life = a.inc, a.life
	if v.state != stAlive {
		v.state = stAlive
		v.changeAt = s.now
	}
	s.setView(n, a.node, v)
	if old.state >= stDead || old.life != a.life {
		// NotifyJoin, or NotifyUpdate for new metadata (a new incarnation).
		s.observeMember(n, a.node, a.life)
	}
}

// suspectNode handles a suspicion of p raised by from (memberlist's
// suspectNode).
func (s *Sim) suspectNode(n *node, p part) {
	if p.node == n.id {
		if p.inc < n.mlInc {
			return
		}
		s.refute(n, p.inc)
		return
	}
	v := s.viewOf(n, p.node)
	if p.inc < v.inc {
		return
	}
	if v.susp != 0 {
		if s.confirm(n, p.node, &v, p.from) {
			s.broadcastML(n, part{kind: pSuspect, node: p.node, inc: p.inc, from: p.from})
		}
		return
	}
	if v.state != stAlive {
		return
	}
	s.broadcastML(n, part{kind: pSuspect, node: p.node, inc: p.inc, from: p.from})
	s.stats.suspicions++
	v.inc = p.inc
	v.state = stSuspect
	v.changeAt = s.now
	k := s.suspicionK()
	lo, hi := s.suspicionTimeouts(n)
	s.suspSeq++
	timeout := hi
	if k < 1 {
		timeout = lo
	}
	r := s.newSuspicion()
	sp := s.suspOf(r)
	*sp = suspicion{id: s.suspSeq, k: int32(k), start: s.now,
		deadline: s.now + int64(timeout), checkAt: s.now + int64(lo)}
	s.addAccuser(r, sp, p.from)
	v.susp, v.accuser, v.confirmed = r, p.from, 0
	s.setView(n, p.node, v)
	// Every suspicion's first check is lo ahead: a timer of the FIFO.
	s.q.pushTimer(event{at: s.now + int64(lo), kind: evSuspicion, node: n.id, life: n.life, a: p.node, b: sp.id}, uint32(r))
}

// confirm is memberlist's suspicion.Confirm: a new accuser shortens the
// timeout towards min, logarithmically in the number of confirmations.
//
// v is n's view of target, holding the suspicion; confirm stores it back
// when it changes.
func (s *Sim) confirm(n *node, target int32, v *peerView, from int32) bool {
	if k := s.suspicionK(); int(v.confirmed) >= k && v.confirmed < math.MaxUint8 || from == v.accuser {
		return false // what the slab would say
	}
	r := v.susp
	sp := s.suspOf(r)
	if sp.n >= sp.k {
		return false
	}
	if s.accused(r, sp, from) {
		return false
	}
	s.addAccuser(r, sp, from)
	sp.n++
	v.confirmed = uint8(min(sp.n, math.MaxUint8))
	n.view.set(target, *v)
	lo, hi := s.suspicionTimeouts(n)
	remaining := remainingSuspicionTime(int(sp.n), int(sp.k), time.Duration(s.now-sp.start), lo, hi)
	sp.deadline = s.now + int64(max(remaining, 0))
	if sp.deadline < sp.checkAt {
		sp.checkAt = sp.deadline
		s.after(n, time.Duration(sp.deadline-s.now), evSuspicion, target, sp.id)
	}
	return true
}

// suspicionK is the number of confirmations that bring a suspicion's
// timeout down to the minimum: memberlist's SuspicionMult-2, or 0 in a
// cluster too small for that many.
func (s *Sim) suspicionK() int {
	k := s.cfg.SuspicionMult - 2
	if s.estNumNodes(nil)-2 < k {
		k = 0
	}
	return k
}

// suspicionTimeouts returns the minimum and maximum suspicion timeouts
// at n, which follow from the estimated cluster size.
func (s *Sim) suspicionTimeouts(n *node) (lo, hi time.Duration) {
	lo = dissem.SuspicionTimeout(s.cfg.SuspicionMult, s.estNumNodes(n), s.cfg.ProbeInterval)
	return lo, time.Duration(s.cfg.SuspicionMaxTimeoutMult) * lo
}

// remainingSuspicionTime is memberlist's formula.
func remainingSuspicionTime(n, k int, elapsed, lo, hi time.Duration) time.Duration {
	frac := math.Log(float64(n)+1.0) / math.Log(float64(k)+1.0)
	raw := hi.Seconds() - frac*(hi.Seconds()-lo.Seconds())
	timeout := time.Duration(math.Floor(1000.0*raw)) * time.Millisecond
	if timeout < lo {
		timeout = lo
	}
	return timeout - elapsed
}

// suspicionFired declares target dead if n still suspects it and the
// timer's deadline has come, or else checks again at the deadline.
func (s *Sim) suspicionFired(n *node, target int32, id uint64) {
	if !s.suspicionDue(n, target, id, s.now) {
		return
	}
	v := s.viewOf(n, target)
	sp := s.suspOf(v.susp)
	if s.now < sp.deadline {
		sp.checkAt = sp.deadline
		s.after(n, time.Duration(sp.deadline-s.now), evSuspicion, target, sp.id)
		return
	}
	s.deadNode(n, part{kind: pDead, node: target, inc: v.inc, from: n.id})
}

// deadNode handles a dead message (memberlist's deadNode).
func (s *Sim) deadNode(n *node, d part) {
	if d.node == n.id {
		if d.inc < n.mlInc {
			return
		}
		s.refute(n, d.inc)
		return
	}
	v := s.viewOf(n, d.node)
	if d.inc < v.inc {
		return
	}
	s.freeSuspicion(v.susp)
	v.susp, v.accuser, v.confirmed = 0, 0, 0
	if v.state >= stDead {
		s.setView(n, d.node, v)
		return
	}
	s.broadcastML(n, part{kind: pDead, node: d.node, inc: d.inc, from: d.from})
	s.stats.deaths++
	v.inc = d.inc
	v.state = stDead
	if d.from == d.node {
		v.state = stLeft
	}
	v.changeAt = s.now
	s.setView(n, d.node, v)
	s.onLeave(n, d.node, v.state == stLeft)
}

// getBroadcasts is memberlist's getBroadcasts: memberlist's own messages
// first, then Rollcall's, within limit bytes.
func (s *Sim) getBroadcasts(n *node, overhead, limit int, out []part) []part {
	used := 0
	s.refBuf = n.mlQueue.getBroadcasts(overhead, limit, s.estNumNodes(n), s.refBuf[:0], &s.qscratch)
	for _, ref := range s.refBuf {
		p := s.partOf(ref)
		out = append(out, p)
		used += regLen(p.size) + overhead
	}
	if avail := limit - used; avail > overhead+userMsgFrame {
		s.refBuf = n.queue.getBroadcasts(overhead+userMsgFrame, avail, s.numMembers(n), s.refBuf[:0], &s.qscratch)
		for _, ref := range s.refBuf {
			out = append(out, s.registry[ref])
		}
	}
	s.releaseDropped()
	return out
}

// sendMsg is memberlist's sendMsg: one message plus whatever broadcasts
// fit in the rest of the packet.
func (s *Sim) sendMsg(n *node, to int32, p part) {
	avail := s.cfg.UDPBufferSize - p.size - compoundHeader
	pkt := s.newPacket(n.id, to)
	pkt.parts = s.getBroadcasts(n, compoundPerPart, avail, append(pkt.parts, p))
	s.sendPacket(pkt)
}

// gossipTick is memberlist's gossip: broadcasts to GossipNodes random
// members (alive, suspect, or recently dead).
func (s *Sim) gossipTick(n *node) {
	targets := s.kRandom(s.cfg.GossipNodes, func(p int32) bool { return s.gossipExclude(n, p) })
	limit := s.cfg.UDPBufferSize - compoundHeader
	for _, t := range targets {
		pkt := s.newPacket(n.id, t)
		pkt.parts = s.getBroadcasts(n, compoundPerPart, limit, pkt.parts)
		if len(pkt.parts) == 0 {
			s.freePacket(pkt)
			return
		}
		s.sendPacket(pkt)
	}
}

func (s *Sim) gossipExclude(n *node, p int32) bool {
	if p == n.id {
		return true
	}
	v := s.viewOf(n, p)
	switch v.state {
	case stAlive, stSuspect:
		return false
	case stDead:
		return time.Duration(s.now-v.changeAt) > s.cfg.GossipToTheDeadTime
	}
	return true
}

// aliveMember reports whether n sees p as alive (memberlist StateAlive).
func (s *Sim) aliveMember(n *node, p int32) bool {
	return p != n.id && s.viewOf(n, p).state == stAlive
}
