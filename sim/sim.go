package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// wallBase offsets virtual time so that timestamps and incarnations encode
// to the same sizes as real Unix nanoseconds do (November 2023).
const wallBase = int64(1_700_000_000_000_000_000)

// Sim is one run of a scenario. Create it with New and run it with Run; a Sim
// is single-use and not safe for concurrent use.
type Sim struct {
	// static after New
	cfg     Config
	sizes   mlSizes
	names   []string
	nameIdx map[string]int32

	// owned by the event loop
	now      int64
	rng      *rand.Rand
	q        eventQueue
	nodes    []*node
	group    []int32 // partition group per node; nil when whole
	registry []part
	regFree  []uint32 // free registry entries
	// mlReg holds memberlist's queued messages (refs with mlRef set),
	// mlFree its free entries: apart from Rollcall's, so that dropping one
	// from a queue, millions of times in a run under loss, is an append
	// to mlFree rather than a read of a cold registry entry to find its
	// message's pointer (it has none).
	mlReg    []mlPart
	mlFree   []uint32
	refBuf   []uint32  // getBroadcasts scratch
	qscratch qscratch  // getBroadcasts scratch
	qpool    qpool     // the nodes' queues' spare bucket buffers
	pkts     []*packet // every packet made, by id
	pktFree  []int32   // delivered or lost packets, for reuse
	strms    []*stream // streams in flight, by the id their event holds
	strmFree []int32   // free slots of strms
	stats    counters
	// lastStreamAt is when the last stream sent will arrive.
	lastStreamAt int64
	// cur is the message being delivered, while its node's core steps it;
	// wraps are the messages a Ready being executed made (rollcall.go).
	cur   *umsg
	wraps []*umsg
	// emptyEntry is the encoded size of a digest entry with nothing
	// written (digestMsg).
	emptyEntry int

	// deltaMsgList holds every delta message made, for a restart to clear
	// its node's applied bits; kept only when a node restarts (restarts),
	// else a message is garbage once delivered and dequeued.
	deltaMsgList []*umsg
	restarts     bool
	// origins numbers the origins for every node's core alike
	origins *dissem.OriginTable
	// trees shares relay trees between nodes with equal member lists
	trees *dissem.TreeTable

	clients  []*client
	online   []int32 // clients with a live session, for picking
	byUser   map[string]int32
	changes  []*change
	openByCl map[int32][]*change // unconverged changes by client
	track    *tracker
	// ages counts (change, node) arrivals by age bin; targetsTotal is the
	// number of (change, target) pairs.
	ages         [ageBinCount]uint64
	targetsTotal int
	events       uint64
	// susps is the slab of suspicions (peerView.susp), suspFree its free
	// slots, suspMore the accusers of suspicions with more than fit in one.
	// suspSeq numbers suspicions, across nodes.
	susps    []suspicion
	suspFree []suspRef
	suspMore map[suspRef][]int32
	suspSeq  uint64
}

// counters are cluster-wide traffic totals.
type counters struct {
	packets, streams, bytes, lost uint64
	deltaCopies                   uint64 // copies of changes (session deltas) in packets and streams, piggyback included
	directCopies                  uint64 // copies of changes sent point to point, not piggybacked (gossip's Stats.DeltaCopies, which counts last-seen deltas too)
	antiEntropyBytes              uint64
	syncRecords                   uint64
	gapPulls, pushPulls           uint64
	queuePruned                   uint64
	supersededWrites              uint64
	answersDropped                uint64
	suspicions, deaths, refutes   uint64
	// probes counts failure-detector probes; failedProbes those that ended
	// without an ack, indirect ack or TCP answer (each raises a suspicion).
	probes, failedProbes uint64
	// sent counts the Rollcall messages owners and relays send
	// themselves, by type and by packet (0) or stream (1), as gossip's
	// Stats.Sent does: messages and their encoded bytes
	sent [dissem.MaxType + 1][2]struct{ msgs, bytes uint64 }
}

// New validates cfg and builds a simulation ready to run.
func New(cfg Config) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:      cfg,
		rng:      rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		byUser:   make(map[string]int32),
		openByCl: make(map[int32][]*change),
		origins:  dissem.NewOriginTable(),
		trees:    dissem.NewTreeTable(),
	}
	s.q.stale = s.staleTimer
	for _, c := range cfg.Crashes {
		s.restarts = s.restarts || c.Restart > 0
	}
	width := len(fmt.Sprint(cfg.Nodes - 1))
	s.names = make([]string, cfg.Nodes)
	s.nameIdx = make(map[string]int32, cfg.Nodes)
	for i := range s.names {
		s.names[i] = fmt.Sprintf("n%0*d", width, i)
		s.nameIdx[s.names[i]] = int32(i)
	}
	s.sizes = newMLSizes(len(s.names[0]), clientAddr(int32(cfg.Nodes-1)))
	s.emptyEntry = emptyDigestEntry(s.names[0])
	s.track = newTracker(cfg.Nodes)
	s.nodes = make([]*node, cfg.Nodes)
	for i := range s.nodes {
		n, err := s.newNode(int32(i), 1, 1)
		if err != nil {
			return nil, err
		}
		s.nodes[i] = n
	}
	// Every node has joined and its timers run from a random phase, as
	// memberlist's triggerFunc staggers them.
	for _, n := range s.nodes {
		s.startTimers(n, true)
	}
	s.scheduleWorkload()
	for i, p := range cfg.Partitions {
		s.q.push(event{at: int64(p.At), kind: evSplit, a: int32(i)})
		if p.Heal > 0 {
			s.q.push(event{at: int64(p.Heal), kind: evHeal, a: int32(i)})
		}
	}
	for _, c := range cfg.Crashes {
		s.q.push(event{at: int64(c.At), kind: evCrash, node: int32(c.Node)})
		if c.Restart > 0 {
			s.q.push(event{at: int64(c.Restart), kind: evRestart, node: int32(c.Node)})
		}
	}
	return s, nil
}

// Run simulates the scenario and returns its result. Cancelling ctx stops
// the run early with ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return s.Run(ctx)
}

// Run executes the simulation to the configured duration.
func (s *Sim) Run(ctx context.Context) (*Result, error) {
	end := int64(s.cfg.Duration)
	nextReport := int64(0)
	for s.q.len() > 0 && s.q.peekAt() <= end {
		e := s.q.pop()
		s.now = e.at
		s.events++
		if s.events&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if s.cfg.Progress != nil && s.now >= nextReport {
				s.cfg.Progress(float64(s.now) / float64(end))
				nextReport = s.now + end/100
			}
		}
		s.dispatch(&e)
		if s.cfg.Check {
			if err := s.check(); err != nil {
				return nil, fmt.Errorf("sim: after %v event at %v: %w", e.kind, time.Duration(s.now), err)
			}
		}
	}
	s.now = end
	if s.cfg.Progress != nil {
		s.cfg.Progress(1)
	}
	return s.result(), nil
}

func (s *Sim) dispatch(e *event) {
	switch e.kind {
	case evPacket:
		s.deliverPacket(s.pkts[e.b])
		return
	case evStream:
		s.deliverStream(s.takeStream(int32(e.b)))
		return
	case evChange:
		s.clientAction(int(e.a))
		return
	case evExpire:
		s.expire(e.a, e.b)
		return
	case evSplit:
		s.split(int(e.a))
		return
	case evHeal:
		s.heal(int(e.a))
		return
	case evCrash:
		s.crash(e.node)
		return
	case evRestart:
		s.restart(e.node)
		return
	}
	n := s.nodes[e.node]
	if !n.up || n.life != e.life {
		return // a timer of a crashed incarnation
	}
	switch e.kind {
	case evTick:
		s.tick(n, int64(e.b))
	case evGossip:
		s.gossipTick(n)
		s.after(n, s.cfg.GossipInterval, evGossip, 0, 0)
	case evProbe:
		s.probe(n)
		s.after(n, s.cfg.ProbeInterval, evProbe, 0, 0)
	case evProbeTimeout:
		s.probeTimeout(n, uint32(e.b))
	case evProbeDeadline:
		s.probeDeadline(n, uint32(e.b))
	case evHelperTimeout:
		s.helperTimeout(n, uint32(e.b))
	case evPushPull:
		s.pushPull(n)
		s.after(n, dissem.PushPullScale(s.cfg.PushPullInterval, s.estNumNodes(n)), evPushPull, 0, 0)
	case evSuspicion:
		s.suspicionFired(n, e.a, e.b)
	case evPullDone:
		n.core.PullDone(s.names[e.a])
		s.drive(n)
	case evAnswerDone:
		n.core.AnswerDone()
		s.drive(n)
	case evPublish:
		ds := n.delayed
		n.delayed = nil
		n.core.Publish(ds, s.wall())
		s.drive(n)
	}
}

// after schedules a timer of node n's current life.
func (s *Sim) after(n *node, d time.Duration, k evKind, a int32, b uint64) {
	s.q.push(event{at: s.now + int64(d), kind: k, node: n.id, life: n.life, a: a, b: b})
}

// startTimers starts a node's periodic timers. stagger picks a random
// phase within each period (memberlist's triggerFunc does): at the start
// of a run the cluster is taken to be in steady state, all joined, timers
// at random phases. A restarted node starts its timers the same way, with
// its push/pull within the base interval as memberlist's does.
func (s *Sim) startTimers(n *node, stagger bool) {
	phase := func(d time.Duration) time.Duration {
		if !stagger {
			return d
		}
		return time.Duration(s.rng.Int64N(int64(d)))
	}
	s.after(n, phase(s.cfg.GossipInterval), evGossip, 0, 0)
	s.after(n, phase(s.cfg.ProbeInterval), evProbe, 0, 0)
	// memberlist staggers its first push/pull within the base interval
	// after a start; a cluster in steady state has its push/pulls spread
	// over the scaled interval.
	pp := s.cfg.PushPullInterval
	if n.life == 1 {
		pp = dissem.PushPullScale(pp, s.estNumNodes(n))
	}
	s.after(n, phase(pp), evPushPull, 0, 0)
	// The core's timers: its announcements, lease checks and reconnect
	// rounds.
	n.core.Start(s.wall(), stagger)
	s.drive(n)
}

// wall converts virtual time to the Unix nanoseconds crdt sees.
func (s *Sim) wall() int64 { return wallBase + s.now }

// incarnation is the crdt incarnation of a node's life: a boot timestamp,
// as a real node uses.
func incarnation(life uint32) uint64 { return uint64(wallBase) + uint64(life) }

// node is one simulated gateway: its replica, the state gossip.Cluster
// keeps, and its memberlist view.
type node struct {
	// What every delivered packet reads comes first, so it shares one or two
	// cache lines: with ten thousand nodes taking turns, each line of a
	// node is a miss.
	up      bool
	id      int32
	numDown int      // memberlist: peers dead or left in view
	cv      coreView // what the core reads, beside what it reads of the node
	tickAt  int64    // the deadline the pending evTick is for (wall ns); 0 for none
	// core is the protocol core (gossip.Cluster drives the same one),
	// held here so that the part of it every message reads shares this
	// node's cache lines
	core  dissem.Node
	r     *crdt.Replica
	born  int64  // virtual time this life started
	queue bqueue // memberlist's TransmitLimitedQueue for Rollcall messages

	name string
	life uint32 // 1 + restarts

	// Rollcall
	self       crdt.Origin
	selfRef    crdt.OriginRef // where the replica keeps self
	writeDelay int32          // 1 + the Config.WriteDelays index of the pending flush; 0 for none
	// delayed are writes waiting out a measured flush delay (evPublish)
	delayed  []crdt.Delta
	sessions int // active sessions owned (alive announcements carry it)

	// memberlist
	mlInc    uint32
	mlQueue  bqueue            // memberlist's own broadcast queue
	view     slotMap[peerView] // peers whose state differs from "alive, incarnation 1, life 1"
	probeSeq uint32
	probeIdx int
	probeA   uint64 // probe order of this pass: i -> (probeA*i + probeB) mod Nodes
	probeB   uint64
	probe    *probeState
	helping  map[uint32]*helpState
}

func (s *Sim) newNode(id int32, life, mlInc uint32) (*node, error) {
	self := crdt.Origin{Node: s.names[id], Incarnation: incarnation(life)}
	r, err := crdt.NewReplica(crdt.Config{Self: self})
	if err != nil {
		return nil, err
	}
	n := &node{
		id: id, name: s.names[id], up: true, life: life, born: s.now,
		self: self, r: r,
		mlInc:   mlInc,
		view:    newSlotMap[peerView](s.cfg.Nodes),
		helping: make(map[uint32]*helpState),
	}
	s.initCore(n)
	n.queue = newBQueue(s.cfg.RetransmitMult, s.cfg.Nodes, &s.qpool)
	n.mlQueue = newBQueue(s.cfg.RetransmitMult, s.cfg.Nodes, &s.qpool)
	return n, nil
}
