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
type peerView struct {
	state    mlState
	inc      uint32
	life     uint32
	changeAt int64
	susp     *suspicion
}

var defaultView = peerView{state: stAlive, inc: 1, life: 1, changeAt: math.MinInt64 / 2}

func (v *peerView) isDefault() bool {
	return v.state == stAlive && v.inc == 1 && v.life == 1 && v.susp == nil
}

// suspicion is memberlist's suspicion timer with its confirmations. The
// timer fires at deadline. Its event is scheduled at the earliest time it
// can fire, the minimum timeout (confirmations never bring it sooner), and
// then again at the deadline if that is later; a confirmation schedules
// one only when it brings the deadline before the pending check. Most
// suspicions are refuted within the minimum, so they leave one stale event
// in the queue, not one at the maximum timeout (six times later) and
// another per confirmation.
type suspicion struct {
	id       uint64
	k, n     int
	min, max time.Duration
	start    int64
	deadline int64   // when the timer fires
	checkAt  int64   // when its pending event is
	conf     []int32 // the accusers: at most k+1, so a scan finds one
	// confBuf holds conf while it fits (k+1 is 3 at the default
	// suspicion multiplier): one allocation per suspicion, not two.
	confBuf [4]int32
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
	ref, msgLen := s.register(p)
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
	v.susp = nil
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
	if v.susp != nil {
		if s.confirm(n, p.node, v.susp, p.from) {
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
	k := s.cfg.SuspicionMult - 2
	est := s.estNumNodes(n)
	if est-2 < k {
		k = 0
	}
	lo := dissem.SuspicionTimeout(s.cfg.SuspicionMult, est, s.cfg.ProbeInterval)
	hi := time.Duration(s.cfg.SuspicionMaxTimeoutMult) * lo
	n.suspSeq++
	timeout := hi
	if k < 1 {
		timeout = lo
	}
	sp := &suspicion{id: n.suspSeq, k: k, min: lo, max: hi, start: s.now,
		deadline: s.now + int64(timeout), checkAt: s.now + int64(lo)}
	sp.confBuf[0] = p.from
	sp.conf = sp.confBuf[:1]
	v.susp = sp
	s.setView(n, p.node, v)
	s.after(n, lo, evSuspicion, p.node, sp.id)
}

// confirm is memberlist's suspicion.Confirm: a new accuser shortens the
// timeout towards min, logarithmically in the number of confirmations.
func (s *Sim) confirm(n *node, target int32, sp *suspicion, from int32) bool {
	if sp.n >= sp.k {
		return false
	}
	if slices.Contains(sp.conf, from) {
		return false
	}
	sp.conf = append(sp.conf, from)
	sp.n++
	remaining := remainingSuspicionTime(sp.n, sp.k, time.Duration(s.now-sp.start), sp.min, sp.max)
	sp.deadline = s.now + int64(max(remaining, 0))
	if sp.deadline < sp.checkAt {
		sp.checkAt = sp.deadline
		s.after(n, time.Duration(sp.deadline-s.now), evSuspicion, target, sp.id)
	}
	return true
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
	v := s.viewOf(n, target)
	sp := v.susp
	if sp == nil || sp.id != id || s.now != sp.checkAt || v.state != stSuspect || v.changeAt != sp.start {
		return
	}
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
	v.susp = nil
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
		p := s.registry[ref]
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
