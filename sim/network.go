package sim

import (
	"github.com/rollcall/rollcall/dissem"
)

// partKind is the kind of one message inside a packet.
type partKind uint8

const (
	pPing     partKind = iota // memberlist ping
	pAck                      // memberlist ack
	pIndirect                 // memberlist indirect ping request
	pNack                     // memberlist nack
	pSuspect                  // memberlist suspect broadcast
	pAlive                    // memberlist alive broadcast
	pDead                     // memberlist dead broadcast
	pUser                     // a Rollcall gossip message
)

// part is one message of a packet: a memberlist message or a Rollcall one.
type part struct {
	kind partKind
	seq  uint32
	node int32 // the node the message is about (ping target, suspect...)
	from int32 // suspect/dead accuser, indirect requester, ping source
	inc  uint32
	life uint32 // alive: the Rollcall incarnation in the node's metadata
	msg  *umsg
	size int
}

// umsg is a Rollcall gossip message in flight: the core's message, and
// what the simulator keeps beside it. Messages are immutable once sent and
// shared by every copy in flight.
type umsg struct {
	msg  *dissem.Message
	typ  dissem.Type // msg.Type, read by every copy without a trip to msg
	size int         // encoded bytes on the wire (len(msg.Bytes), but see digestMsg)
	// applied has bit n set once node n (this life of it) applied the
	// message, a delta batch: it skips re-applying it (crdt's Apply is
	// idempotent, so the state is the same). By message, not by node: a
	// message spreading through the cluster keeps its bits in the cache,
	// where a node's would be cold. A restarted node, whose replica starts
	// empty, has its bit cleared everywhere (Sim.deltaMsgList) and applies
	// everything again.
	applied []uint64
	// clients are, per delta, the client of its user (-1 for none):
	// looked up once, not at every node.
	clients []int32
	// changes counts the session records among a batch's deltas: the
	// copies of changes it carries (the last-seen writes that ride
	// along with session ends are traffic, not changes).
	changes int
	// pull, state: the asker
	from int32
	// antiEntropy marks pull, state and sync traffic for the byte counters.
	antiEntropy bool
	// reg is 1 + the message's registry index while it is queued for
	// piggybacking; 0 otherwise. queued counts the queues holding it.
	reg    uint32
	queued int32
}

// packet is one UDP datagram. Packets are recycled (newPacket, freePacket)
// once delivered or lost: nothing keeps one, or its parts, past that.
// A packet is named by its index in Sim.pkts (id), which its event holds.
// Most packets carry one message (a Rollcall message sent best effort,
// hundreds of thousands at once in a burst at high loss), so a packet's
// parts start in the packet itself (one) and move out only for a
// compound message.
type packet struct {
	from, to int32
	id       int32
	parts    []part
	one      [1]part
}

func (s *Sim) newPacket(from, to int32) *packet {
	if k := len(s.pktFree); k > 0 {
		p := s.pkts[s.pktFree[k-1]]
		s.pktFree = s.pktFree[:k-1]
		p.from, p.to = from, to
		return p
	}
	p := &packet{from: from, to: to, id: int32(len(s.pkts))}
	p.parts = p.one[:0]
	s.pkts = append(s.pkts, p)
	return p
}

func (s *Sim) freePacket(p *packet) {
	clear(p.parts) // drop message references
	p.parts = p.parts[:0]
	p.one = [1]part{} // parts moved out of one keep none in it
	s.pktFree = append(s.pktFree, p.id)
}

// streamEvent queues the arrival of st at time at: the stream goes into
// Sim.strms, in a free slot, until delivered.
func (s *Sim) streamEvent(at int64, st *stream) {
	var id int32
	if k := len(s.strmFree); k > 0 {
		id = s.strmFree[k-1]
		s.strmFree = s.strmFree[:k-1]
		s.strms[id] = st
	} else {
		id = int32(len(s.strms))
		s.strms = append(s.strms, st)
	}
	s.q.push(event{at: at, kind: evStream, b: uint64(id)})
}

// takeStream returns the stream of slot id and frees the slot.
func (s *Sim) takeStream(id int32) *stream {
	st := s.strms[id]
	s.strms[id] = nil
	s.strmFree = append(s.strmFree, id)
	return st
}

// stream is one TCP exchange: a Rollcall message sent reliably, or
// memberlist's push/pull.
type stream struct {
	from, to int32
	msg      *umsg
	pushPull bool // a push/pull request (answered by the receiver) or reply
	reply    bool
	members  []memberState // push/pull: the sender's membership
}

// memberState is one member's entry in a push/pull (memberlist's
// pushNodeState).
type memberState struct {
	node  int32
	state mlState
	inc   uint32
	life  uint32
}

// register records a broadcast part and returns the index the queues hold
// it by, and the length of the message memberlist's queue would hold: its
// encoded size (the simulator once queued a byte slice of that size whose
// first four bytes named it, so never fewer than four). Indexes the queues
// dropped are reused (releaseDropped), so the registry holds what is
// queued, not every broadcast of the run.
func (s *Sim) register(p part) (ref uint32, msgLen int) {
	if k := len(s.regFree); k > 0 {
		ref = s.regFree[k-1]
		s.regFree = s.regFree[:k-1]
		s.registry[ref] = p
	} else {
		ref = uint32(len(s.registry))
		s.registry = append(s.registry, p)
	}
	return ref, regLen(p.size)
}

// mlRef marks a queue's ref to a memberlist message, in Sim.mlReg.
const mlRef = 1 << 31

// mlPart is a queued memberlist alive, suspect or dead message.
type mlPart struct {
	kind      partKind
	node      int32
	from      int32
	inc, life uint32
}

// registerML records a memberlist broadcast (its size set) as register
// does.
func (s *Sim) registerML(p part) (ref uint32, msgLen int) {
	m := mlPart{kind: p.kind, node: p.node, from: p.from, inc: p.inc, life: p.life}
	if k := len(s.mlFree); k > 0 {
		ref = s.mlFree[k-1]
		s.mlFree = s.mlFree[:k-1]
		s.mlReg[ref] = m
	} else {
		ref = uint32(len(s.mlReg))
		s.mlReg = append(s.mlReg, m)
	}
	if ref >= mlRef {
		panic("sim: too many memberlist messages queued")
	}
	return ref | mlRef, regLen(p.size)
}

// partOf returns the message a queue's ref stands for.
func (s *Sim) partOf(ref uint32) part {
	if ref&mlRef == 0 {
		return s.registry[ref]
	}
	m := &s.mlReg[ref&^mlRef]
	p := part{kind: m.kind, node: m.node, from: m.from, inc: m.inc, life: m.life}
	switch m.kind {
	case pAlive:
		p.size = s.sizes.alive
	case pSuspect:
		p.size = s.sizes.suspect
	case pDead:
		p.size = s.sizes.dead
	}
	return p
}

// releaseDropped frees the registry entries of the items the queues
// dropped: a memberlist message is in one queue, a Rollcall message in as
// many as queued it (umsg.queued), and its entry is freed when the last
// one drops it.
func (s *Sim) releaseDropped() {
	for _, ref := range s.qpool.dropped {
		if ref&mlRef != 0 {
			s.mlFree = append(s.mlFree, ref&^mlRef)
			continue
		}
		p := &s.registry[ref]
		if m := p.msg; m != nil {
			if m.queued--; m.queued > 0 {
				continue
			}
			m.reg = 0
		}
		*p = part{}
		s.regFree = append(s.regFree, ref)
	}
	s.qpool.dropped = s.qpool.dropped[:0]
}

func regLen(size int) int { return max(size, 4) }

// blocked reports whether a partition separates two nodes.
func (s *Sim) blocked(a, b int32) bool {
	return s.group != nil && s.group[a] != s.group[b]
}

// sendPacket sends a UDP datagram: counted at the sender, lost with
// probability Loss or across a partition, delivered after one latency.
func (s *Sim) sendPacket(p *packet) { s.sendPacketAfter(p, -1) }

// sendPacketAfter is sendPacket with the latency given (ns), or drawn from
// Config.Latency when lat is negative.
func (s *Sim) sendPacketAfter(p *packet, lat int64) {
	size := crcOverhead
	if len(p.parts) > 1 {
		size += compoundHeader + compoundPerPart*len(p.parts)
	}
	for i := range p.parts {
		size += p.parts[i].size
		if p.parts[i].kind == pUser {
			size += userMsgFrame
			if m := p.parts[i].msg; m.typ == dissem.TypeDeltas {
				s.stats.deltaCopies += uint64(m.changes)
			}
		}
	}
	st := &s.stats
	st.packets++
	st.bytes += uint64(size)
	if s.blocked(p.from, p.to) || (s.cfg.Loss > 0 && s.rng.Float64() < s.cfg.Loss) {
		st.lost++
		s.freePacket(p)
		return
	}
	if lat < 0 {
		lat = s.cfg.Latency.sample(s.rng)
	}
	s.q.push(event{at: s.now + lat, kind: evPacket, b: uint64(p.id)})
}

// tcpDelay is the time a stream message takes: handshake and data (three
// one-way delays), plus a retransmission timeout for each lost segment (1s
// for a SYN, 200ms, Linux's minimum RTO, for data).
func (s *Sim) tcpDelay(size int) int64 {
	d := int64(0)
	for range 3 {
		d += s.cfg.Latency.sample(s.rng)
	}
	if s.cfg.Loss > 0 {
		for s.rng.Float64() < s.cfg.Loss {
			d += 1e9
		}
		for range 1 + size/1448 {
			if s.rng.Float64() < s.cfg.Loss {
				d += 200e6
			}
		}
	}
	return d
}

// sendStream sends a message over TCP. It fails at once, as a dial does,
// when the peer is down or across a partition.
func (s *Sim) sendStream(st *stream, size int) bool {
	s.stats.streams++
	s.stats.bytes += uint64(size + streamOverhead)
	switch {
	case st.pushPull:
		s.stats.antiEntropyBytes += uint64(st.msg.size)
	case st.msg != nil && st.msg.antiEntropy:
		s.stats.antiEntropyBytes += uint64(size + streamOverhead)
	}
	if st.msg != nil && !st.pushPull {
		c := &s.stats.sent[st.msg.typ][1]
		c.msgs++
		c.bytes += uint64(st.msg.size)
	}
	if st.msg != nil && st.msg.typ == dissem.TypeDeltas {
		s.stats.deltaCopies += uint64(st.msg.changes)
	}
	if s.blocked(st.from, st.to) || !s.nodes[st.to].up {
		return false
	}
	s.lastStreamAt = s.now + s.tcpDelay(size)
	s.streamEvent(s.lastStreamAt, st)
	return true
}
