package sim

// Failure detection, as memberlist's probe and probeNode do it: every
// ProbeInterval a node pings the next member of its (shuffled) list; without
// an ack within ProbeTimeout it asks IndirectChecks members to ping it and
// tries a TCP ping; without any answer by the end of the probe interval it
// suspects the member. Lifeguard's awareness (health-scaled timeouts) is not
// modelled.

// probeState is a node's probe in flight.
type probeState struct {
	seq    uint32
	target int32
	sent   int64
	acked  bool
	tcpAt  int64 // when a TCP fallback ping got through; 0 if not
}

// helpState is an indirect ping a node makes on another's behalf.
type helpState struct {
	requester int32
	reqSeq    uint32
}

// probeTarget returns the i-th member of n's probe order for the current
// pass: a pseudo-random permutation, new each pass (memberlist reshuffles
// its node list at the end of every pass).
func (s *Sim) probeTarget(n *node, i int) int32 {
	N := uint64(s.cfg.Nodes)
	a, b := n.probeA, n.probeB
	return int32((a*uint64(i) + b) % N)
}

func (s *Sim) newProbePass(n *node) {
	N := uint64(s.cfg.Nodes)
	for {
		a := 1 + s.rng.Uint64N(N)
		if gcd(a, N) == 1 {
			n.probeA = a
			break
		}
	}
	n.probeB = s.rng.Uint64N(N)
	n.probeIdx = 0
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// probe is memberlist's probe: the next probeable member, round robin.
func (s *Sim) probe(n *node) {
	for range s.cfg.Nodes + 1 {
		if n.probeIdx >= s.cfg.Nodes || n.probeA == 0 {
			s.newProbePass(n)
		}
		p := s.probeTarget(n, n.probeIdx)
		n.probeIdx++
		if p == n.id || s.viewOf(n, p).state >= stDead {
			continue
		}
		s.probeNode(n, p)
		return
	}
}

func (s *Sim) probeNode(n *node, target int32) {
	s.stats.probes++
	n.probeSeq++
	ps := &probeState{seq: n.probeSeq, target: target, sent: s.now}
	n.probe = ps
	ping := part{kind: pPing, seq: ps.seq, node: target, from: n.id, size: s.sizes.ping}
	if v := s.viewOf(n, target); v.state == stAlive {
		s.sendMsg(n, target, ping)
	} else {
		// A suspect member gets the suspicion with the ping, so it can
		// refute it (no piggybacking on this packet).
		sus := part{kind: pSuspect, node: target, inc: v.inc, from: n.id, size: s.sizes.suspect}
		pkt := s.newPacket(n.id, target)
		pkt.parts = append(pkt.parts, ping, sus)
		s.sendPacket(pkt)
	}
	s.after(n, s.cfg.ProbeTimeout, evProbeTimeout, target, uint64(ps.seq))
	s.after(n, s.cfg.ProbeInterval, evProbeDeadline, target, uint64(ps.seq))
}

// handleAck records an ack: for our probe, or for an indirect ping we made
// on another's behalf, which we forward.
func (s *Sim) handleAck(n *node, seq uint32) {
	if ps := n.probe; ps != nil && ps.seq == seq {
		ps.acked = true
		return
	}
	if h := n.helping[seq]; h != nil {
		delete(n.helping, seq)
		s.sendMsg(n, h.requester, part{kind: pAck, seq: h.reqSeq, size: s.sizes.ack})
	}
}

// probeTimeout starts the indirect phase when the direct ping went
// unanswered.
func (s *Sim) probeTimeout(n *node, seq uint32) {
	ps := n.probe
	if ps == nil || ps.seq != seq || ps.acked {
		return
	}
	helpers := s.kRandom(s.cfg.IndirectChecks, func(p int32) bool {
		return p == n.id || p == ps.target || s.viewOf(n, p).state != stAlive
	})
	for _, h := range helpers {
		s.sendMsg(n, h, part{kind: pIndirect, seq: seq, node: ps.target, from: n.id, size: s.sizes.indirect})
	}
	if !s.cfg.DisableTCPPings {
		s.stats.streams++
		s.stats.bytes += uint64(s.sizes.ping + s.sizes.ack + 2*streamOverhead)
		if t := s.nodes[ps.target]; t.up && !s.blocked(n.id, ps.target) {
			ps.tcpAt = s.now + s.tcpDelay(s.sizes.ping) + s.cfg.Latency.sample(s.rng)
		}
	}
}

// handleIndirect pings target on behalf of the requester.
func (s *Sim) handleIndirect(n *node, p part) {
	n.probeSeq++
	local := n.probeSeq
	n.helping[local] = &helpState{requester: p.from, reqSeq: p.seq}
	s.sendMsg(n, p.node, part{kind: pPing, seq: local, node: p.node, from: n.id, size: s.sizes.ping})
	s.after(n, s.cfg.ProbeTimeout, evHelperTimeout, p.node, uint64(local))
}

// helperTimeout nacks an indirect ping that got no answer.
func (s *Sim) helperTimeout(n *node, local uint32) {
	h := n.helping[local]
	if h == nil {
		return
	}
	delete(n.helping, local)
	s.sendMsg(n, h.requester, part{kind: pNack, seq: h.reqSeq, size: s.sizes.nack})
}

// probeDeadline ends a probe: without an ack or a TCP answer within the
// probe interval the target becomes suspect.
func (s *Sim) probeDeadline(n *node, seq uint32) {
	ps := n.probe
	if ps == nil || ps.seq != seq {
		return
	}
	n.probe = nil
	if ps.acked {
		return
	}
	if ps.tcpAt != 0 && ps.tcpAt <= ps.sent+int64(s.cfg.ProbeInterval) {
		return
	}
	s.stats.failedProbes++
	v := s.viewOf(n, ps.target)
	s.suspectNode(n, part{kind: pSuspect, node: ps.target, inc: v.inc, from: n.id})
}
