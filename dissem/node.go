package dissem

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// Config is one Node's configuration. Durations are the protocol's; zero
// values are not filled in (the drivers' configs own the defaults).
type Config struct {
	// Name is this gateway's node name; Incarnation its Rollcall
	// incarnation (a boot timestamp), together its crdt origin.
	Name        string
	Incarnation uint64
	// ClientAddr is the client address this gateway advertises (alive
	// announcements carry it).
	ClientAddr string
	// BatchDelay is the owner's write window, Nagle-style: a write that
	// finds no flush within the last BatchDelay goes out at once, and the
	// writes that follow within BatchDelay of a flush wait for the window's
	// end and go out together (coalesced, sharing packets). Zero: every
	// write goes out at once.
	BatchDelay time.Duration
	// PacketBudget is the payload budget of one best-effort packet; a batch
	// that alone exceeds it goes over a stream.
	PacketBudget int
	// EagerThreshold is the member count (self included) up to which
	// writes go straight to every member (ModeEager); beyond it they are
	// relayed as Relay says (ModeTree or ModeEpidemic).
	EagerThreshold int
	// Relay is how writes travel beyond EagerThreshold. Default
	// RelayTree.
	Relay Relay
	// AliveInterval is how often this node announces itself.
	AliveInterval time.Duration
	// LeaseTimeout is how long a peer unheard stays shown up (eager mode).
	// A peer stalled for up to PauseTolerance is never shown down; a dead
	// one is shown down within CrashBound of its death (plan.go).
	LeaseTimeout time.Duration
	// ReconnectInterval is how often members memberlist holds dead are
	// joined again; ReconnectTimeout how long after their death they are
	// given up (Forget).
	ReconnectInterval time.Duration
	ReconnectTimeout  time.Duration
	// Rand is the node's only source of randomness (epidemic seed targets,
	// timer phases). Required.
	Rand *rand.Rand
	// Origins numbers the origins whose deltas the node receives; several
	// nodes driven from one goroutine may share one (the simulator's do,
	// so that each node's record of what it has seen is a small dense
	// table). Nil: the node numbers them itself.
	Origins *OriginTable
	// Trees shares relay trees between nodes with equal member lists;
	// nodes driven from one goroutine may share one (the simulator's do).
	// Nodes that share one share Origins too (nil Origins: the one the
	// first of them was given, or one of the table's own). Nil: the node
	// keeps its own.
	Trees *TreeTable
}

// originSeen is what a node keeps per origin: the newest version it
// received, (for its driver) where its replica keeps the origin, whether
// its node's lease was heard (begun: a relayed delta need not look the
// peer up again) and whether a tree gap is watched for it (treeGaps).
type originSeen struct {
	version uint64
	ref     crdt.OriginRef
	leased  bool
	watched bool
}

// OriginRef returns where the driver may keep its replica's state of the
// origin of m's delta i (crdt.Replica.ApplyVia), beside the node's own
// record of that origin: a driver that applies every delta at thousands
// of replicas (the simulator) saves a lookup, and a cache miss, per delta.
// m is a delta batch the node stepped.
func (n *Node) OriginRef(m *Message, i int) *crdt.OriginRef {
	w := m.originNumbers(n.origins)[i]
	if int(w) >= len(n.seen) {
		n.seen = append(n.seen, make([]originSeen, len(n.origins.num)-len(n.seen))...)
	}
	return &n.seen[w].ref
}

// OriginTable numbers origins densely, in order of first sight, and the
// node names and client addresses of the peers the nodes that share it hear
// of: a node keeps its peers' records by name number, in an array rather
// than a map keyed by name (a simulator's node hears of thousands of
// peers). It is not safe for concurrent use: nodes that share one are
// driven from one goroutine.
type OriginTable struct {
	num    map[crdt.Origin]int32
	nodeOf []int32 // by origin number: the number of its node's name
	names  stringTable
	addrs  stringTable
}

// NewOriginTable returns an empty table.
func NewOriginTable() *OriginTable {
	t := &OriginTable{num: make(map[crdt.Origin]int32)}
	t.addrs.number("") // 0: no address
	return t
}

func (t *OriginTable) number(o crdt.Origin) int32 {
	k, ok := t.num[o]
	if !ok {
		k = int32(len(t.num))
		t.num[o] = k
		t.nodeOf = append(t.nodeOf, t.names.number(o.Node))
	}
	return k
}

// stringTable numbers strings densely, in order of first sight.
type stringTable struct {
	num  map[string]int32
	list []string // by number
}

// number returns s's number, numbering it if it has none.
func (t *stringTable) number(s string) int32 {
	k, ok := t.num[s]
	if !ok {
		if t.num == nil {
			t.num = make(map[string]int32)
		}
		s = strings.Clone(s) // not the message it came in
		k = int32(len(t.list))
		t.num[s] = k
		t.list = append(t.list, s)
	}
	return k
}

// lookup returns s's number, if it has one.
func (t *stringTable) lookup(s string) (int32, bool) {
	k, ok := t.num[s]
	return k, ok
}

// DefaultConfig returns the protocol's defaults (Name, Incarnation,
// ClientAddr and Rand are the driver's).
func DefaultConfig() Config {
	return Config{
		BatchDelay:        500 * time.Microsecond,
		PacketBudget:      DefaultPacketBudget,
		EagerThreshold:    64,
		AliveInterval:     DefaultAliveInterval,
		LeaseTimeout:      DefaultLeaseTimeout,
		ReconnectInterval: 10 * time.Second,
		ReconnectTimeout:  24 * time.Hour,
	}
}

// DefaultMaxQueue is the default bound of a node's piggyback queue (in
// messages) that both drivers prune to.
const DefaultMaxQueue = 4096

// Members is the driver's view of memberlist's member list, which the
// node reads to choose targets. The node keeps its own record of each
// peer it has heard of or had an event for; a listed peer it has no
// record of counts as alive.
type Members interface {
	// NumMembers is memberlist's member count: alive and suspect, self
	// included. It picks the mode.
	NumMembers() int
	// NumPeers and Peer list the other nodes memberlist has reported, in
	// any state, until the node forgets them; Peer(i) for i in
	// [0, NumPeers()) is a name.
	NumPeers() int
	Peer(i int) string
	// Incarnation is the Rollcall incarnation the membership this node
	// joined with gave a peer the node has no record of yet (0 if none):
	// an announcement of that incarnation is not a new incarnation.
	Incarnation(name string) uint64
}

// Lister is what a Members may also be: one that tells at once whether it
// lists a node. A node whose Members is a Lister leases strangers, the
// nodes whose records it holds that it does not list (see leaseOrigin);
// one whose Members is not (the simulator's: every node of a simulation
// is listed) has none.
type Lister interface {
	Listed(name string) bool
}

// Replica is what the node reads of the local replica.
type Replica interface {
	// Watermark is the replica's watermark for origin o, O(1).
	Watermark(o crdt.Origin) uint64
	// SessionCount is the number of active sessions this node owns.
	SessionCount() int
}

// MaxConcurrentAnswers bounds the anti-entropy answers in flight: each
// computes a Diff and opens a stream. A digest past it goes unanswered and
// the asker retries at its next pull or push/pull.
const MaxConcurrentAnswers = 4

// maxSeeds is how many random members an epidemic batch is sent to at
// once, before the next gossip round picks it up from the queue.
const maxSeeds = 3

// Node is one gateway's dissemination and anti-entropy: every decision
// of the protocol, as a deterministic state machine. It does no I/O,
// starts no goroutine, reads no clock (time is an argument: Unix
// nanoseconds on the driver's lease clock) and draws randomness only from
// Config.Rand. It is not safe for concurrent use.
type Node struct {
	// What every received message reads comes first, in two cache lines:
	// a driver of thousands of nodes (the simulator) finds the rest of a
	// node cold.
	members   Members
	replica   Replica
	name      string // cfg.Name
	threshold int    // cfg.EagerThreshold
	origins   *OriginTable
	seen      []originSeen // by origin number
	deadline  int64        // the earliest timer (Deadline)
	ready     bool         // rd holds something
	// set by inputs that may raise a watermark: Advance then checks the
	// revivals the applied changes may complete
	recheck bool
	heardUp []revival // peers heard again in a delta batch: revived in Advance
	rd      *Ready    // collects the outputs: one of bufs
	bufs    [2]Ready  // the Ready being collected, and the one handed out
	cur     int       // rd is &bufs[cur]

	cfg  Config
	self crdt.Origin
	rng  *rand.Rand

	pending []crdt.Delta
	flushAt int64 // 0: no flush armed
	// quietAt is the end of the write window opened by the last flush
	// (that flush plus BatchDelay): a write before it waits for it, a
	// write at or after it goes out at once.
	quietAt int64
	// lastSent is what the last flush sent best effort, as written
	// (uncoalesced): Leave sends it again over streams, so the writes made
	// within a window of leaving are never left to lost packets, whether
	// they went out at once or waited.
	lastSent []crdt.Delta
	// the periodic timers' next due times
	aliveAt, leaseAt, reconnectAt int64

	peers     peerStore
	pulling   map[string]bool
	transfers map[string]*transfer // paged answers coming in, by sender; nil while empty
	relayTree *relayTree           // ModeTree's member list; nil when members changed
	trees     *TreeTable           // cfg.Trees, or the node's own
	treeGaps  []treeGap            // ModeTree: versions seen, to be held by the next check
	reviving  map[string]revival   // nil while empty
	answering int
	leaving   bool
	dead      int      // peers in StateDead, not forgotten (reconnect rounds)
	notAlive  int      // peers not in StateAlive (the relay tree leaves them out)
	lastAlive *Message // the last announcement
	strangers int      // peers that are strangers (whose leases every mode enforces)
	lister    Lister   // members, if it is one
}

// MemberState is a member's state as memberlist's events told this node.
type MemberState uint8

const (
	// StateAlive: joined or updated (or listed, with no event yet).
	StateAlive MemberState = iota
	// StateDead: memberlist declared it dead.
	StateDead
	// StateLeft: it left gracefully.
	StateLeft
)

func (s MemberState) String() string { return [...]string{"alive", "dead", "left"}[s] }

// peer is what this node knows of another member. It holds no pointer:
// a node's thousands of records are no work for the garbage collector.
type peer struct {
	lease       lease // its lease: is it up, as this node shows it
	gap         gap   // the gap state of the origin it announces
	incarnation uint64
	sessions    int
	name        int32 // its name's number in the node's OriginTable
	clientAddr  int32 // its client address's number there; 0: none
	state       MemberState
	listed      bool  // memberlist reported it (a join or update)
	stranger    bool  // not listed by Members when first heard of, nor reported since (leaseOrigin)
	leaving     bool  // it announced a graceful leave
	remote      bool  // a gateway of another region (SetRemote): its liveness is the region's (Regions)
	forgotten   bool  // dead past ReconnectTimeout
	deadSince   int64 // when memberlist declared it dead
	rejoinAt    int64 // last rejoin asked because it was heard while dead (or restarted after it left)
	// leftInc is the incarnation it had when memberlist reported its
	// graceful leave: an announcement of a newer one is a restart that
	// memberlist's view here has missed.
	leftInc uint64
}

// setState changes a peer's state, keeping the node's count of dead
// peers (those reconnect rounds rejoin) in step.
func (p *peer) setState(n *Node, state MemberState, forgotten bool) {
	if p.state == StateDead && !p.forgotten {
		n.dead--
	}
	if p.state != state {
		n.dropTree() // the tree is over the members alive
		if p.state == StateAlive {
			n.notAlive++
		} else if state == StateAlive {
			n.notAlive--
		}
	}
	p.state, p.forgotten = state, forgotten
	if p.state == StateDead && !p.forgotten {
		n.dead++
	}
}

// known clears the peer's stranger mark: memberlist reported it.
func (p *peer) known(n *Node) {
	if p.stranger {
		p.stranger = false
		n.strangers--
	}
}

// revival is a peer heard again after it was marked down, whose writes up
// to target this replica does not all hold yet.
type revival struct {
	node   string
	origin crdt.Origin
	target uint64 // the origin's version the replica must hold
	since  int64  // when it was heard again
}

// New returns a node with nothing pending. Call Start before the first
// Tick.
func New(cfg Config, members Members, replica Replica) (*Node, error) {
	n := new(Node)
	if err := n.Init(cfg, members, replica); err != nil {
		return nil, err
	}
	return n, nil
}

// Init makes n a node with nothing pending, as New does, for a driver that
// holds its Node in a struct of its own (the simulator keeps the core
// beside its own per-node state, in the same cache lines). A Node must not
// be copied once initialised.
func (n *Node) Init(cfg Config, members Members, replica Replica) error {
	switch {
	case cfg.Name == "":
		return errors.New("dissem: a node needs a name")
	case cfg.Rand == nil:
		return errors.New("dissem: a node needs a random source (Config.Rand)")
	case cfg.AliveInterval <= 0 || cfg.LeaseTimeout <= 0 || cfg.ReconnectInterval <= 0 || cfg.BatchDelay < 0:
		return fmt.Errorf("dissem: bad intervals: alive %v, lease %v, reconnect %v, batch %v",
			cfg.AliveInterval, cfg.LeaseTimeout, cfg.ReconnectInterval, cfg.BatchDelay)
	case cfg.PacketBudget <= 0:
		return fmt.Errorf("dissem: packet budget %d", cfg.PacketBudget)
	case cfg.Trees != nil && cfg.Origins != nil && cfg.Trees.origins != nil && cfg.Trees.origins != cfg.Origins:
		return errors.New("dissem: nodes that share a TreeTable share one OriginTable too")
	}
	origins := cfg.Origins
	if cfg.Trees != nil {
		// The trees hold name numbers: the nodes that share them number
		// names alike.
		if cfg.Trees.origins == nil {
			cfg.Trees.origins = origins
			if origins == nil {
				cfg.Trees.origins = NewOriginTable()
			}
		}
		origins = cfg.Trees.origins
	}
	if origins == nil {
		origins = NewOriginTable()
	}
	*n = Node{
		cfg: cfg, self: crdt.Origin{Node: cfg.Name, Incarnation: cfg.Incarnation},
		members: members, replica: replica, rng: cfg.Rand, name: cfg.Name, threshold: cfg.EagerThreshold,
		pulling: make(map[string]bool),
		origins: origins,
		trees:   cfg.Trees,
		quietAt: math.MinInt64, // no window open: the first write goes at once
	}
	if n.trees == nil {
		n.trees = &TreeTable{private: true}
	}
	n.rd = &n.bufs[0]
	n.lister, _ = members.(Lister)
	return nil
}

// Start sets the periodic timers from now. A node starting with the
// cluster announces itself at once and checks leases and reconnects after
// one period; with stagger each timer instead starts at a random phase
// within its period (a node of a cluster in steady state, as the simulator
// takes them).
func (n *Node) Start(now int64, stagger bool) {
	if !stagger {
		n.aliveAt = now
		n.leaseAt = now + int64(LeaseTick(n.cfg.LeaseTimeout))
		n.reconnectAt = now + int64(n.cfg.ReconnectInterval)
		n.setDeadline()
		return
	}
	n.aliveAt = now + n.rng.Int64N(int64(n.cfg.AliveInterval))
	n.leaseAt = now + n.rng.Int64N(int64(LeaseTick(n.cfg.LeaseTimeout)))
	n.reconnectAt = now + n.rng.Int64N(int64(n.cfg.ReconnectInterval))
	n.setDeadline()
}

// LeaseCheckDue reports whether Tick at now checks the leases: a driver
// that reads its own queue of received messages first never expires a
// peer whose announcement waits in it.
func (n *Node) LeaseCheckDue(now int64) bool { return now >= n.leaseAt }

// Mode is the dissemination mode now.
func (n *Node) Mode() Mode {
	m := ChooseMode(n.members.NumMembers(), n.threshold)
	if m == ModeEpidemic && n.cfg.Relay == RelayTree {
		return ModeTree
	}
	return m
}

// out marks that the node has something for its driver, and returns the
// Ready it collects in.
func (n *Node) out() *Ready {
	n.ready = true
	return n.rd
}

// Pending reports how many owner deltas wait for the next flush.
func (n *Node) Pending() int { return len(n.pending) }

// Deadline is when Tick next has something to do.
func (n *Node) Deadline() int64 { return n.deadline }

// setDeadline recomputes Deadline after a timer changed.
func (n *Node) setDeadline() {
	d := min(n.aliveAt, n.leaseAt, n.reconnectAt)
	if n.flushAt != 0 {
		d = min(d, n.flushAt)
	}
	n.deadline = d
}

// HasReady reports whether Ready has anything to do.
func (n *Node) HasReady() bool { return n.ready || n.recheck || len(n.heardUp) > 0 }

// Ready returns what the inputs since the last call ask the driver to do.
// It is the node's own buffer, valid until the next call of Ready: a
// driver that executes a Ready while the node goes on (or keeps an
// element) takes a Clone. The messages its lists point to are immutable
// and can be kept.
func (n *Node) Ready() *Ready {
	out := n.rd
	n.cur ^= 1
	n.rd = &n.bufs[n.cur]
	n.rd.truncate()
	n.ready = false
	return out
}

// Advance tells the node its last Ready was executed (in particular, its
// Apply list reached the replica): the node then shows up each peer whose
// missed writes the replica now holds. It may leave a new Ready.
func (n *Node) Advance(now int64) { n.advance(now) }

func (n *Node) advance(now int64) {
	heard := n.heardUp
	n.heardUp = nil
	for _, r := range heard {
		n.revive(r.node, r.origin, r.target, now)
	}
	if n.recheck {
		n.recheck = false
		n.checkRevivals(now)
	}
}

// Publish hands the node deltas of records this node wrote. Outside a
// write window they go out at once (in this call's Ready); within one
// (less than BatchDelay after the last flush) they wait for its end, with
// every other write made meanwhile, and go out together at that Tick.
func (n *Node) Publish(deltas []crdt.Delta, now int64) {
	if len(deltas) == 0 {
		return
	}
	n.pending = append(n.pending, deltas...)
	switch {
	case n.flushAt != 0: // a window is open: the writes wait for its end
	case now >= n.quietAt:
		n.flushWindow(now)
	default:
		n.flushAt = n.quietAt
		n.setDeadline()
	}
}

// flushWindow sends everything pending and opens a write window at now.
func (n *Node) flushWindow(now int64) {
	n.flush(false)
	n.quietAt = now + int64(n.cfg.BatchDelay)
}

// Tick runs what is due at now: the flush of pending writes, the lease
// check, the alive announcement and the reconnect round.
func (n *Node) Tick(now int64) {
	if n.flushAt != 0 && now >= n.flushAt {
		n.flushWindow(now)
	}
	if now >= n.leaseAt {
		n.leaseAt = now + int64(LeaseTick(n.cfg.LeaseTimeout))
		n.expireLeases(now)
	}
	if now >= n.aliveAt {
		n.aliveAt = now + int64(n.cfg.AliveInterval)
		n.announce()
		n.checkTransfers(now)
		n.checkTreeGaps(now)
	}
	if now >= n.reconnectAt {
		n.reconnectAt = now + int64(n.cfg.ReconnectInterval)
		n.reconnect(now)
	}
	n.setDeadline()
}

// Leave flushes pending writes, and those of the last flush again, over
// streams to every live member, and tells each, over a stream, that this
// node is leaving.
func (n *Node) Leave() {
	n.leaving = true
	n.flush(true)
	m, err := NewAlive(TypeLeaving, n.alive())
	if err != nil {
		panic(fmt.Sprintf("dissem: encode leaving: %v", err)) // our own fields: a bug
	}
	n.sendLive(m, true)
}

// AnnounceDrain tells every live member, best effort, that this node is
// draining: it is no longer a gateway to send clients to.
func (n *Node) AnnounceDrain() {
	m, err := NewAlive(TypeLeaving, n.alive())
	if err != nil {
		panic(fmt.Sprintf("dissem: encode leaving: %v", err))
	}
	n.sendLive(m, false)
}

func (n *Node) alive() Alive {
	return Alive{Origin: n.self, Watermark: n.replica.Watermark(n.self),
		Sessions: n.replica.SessionCount(), ClientAddr: n.cfg.ClientAddr}
}

// PullDone tells the node a pull from peer is over (sent, or failed).
func (n *Node) PullDone(peer string) { delete(n.pulling, peer) }

// AnswerDone tells the node an answer it asked for is over.
func (n *Node) AnswerDone() {
	if n.answering > 0 {
		n.answering--
	}
}

// Step handles one received message.
func (n *Node) Step(m *Message, now int64) {
	switch m.Type {
	case TypeDeltas:
		n.stepDeltas(m, now)
	case TypeAlive, TypeListed:
		n.stepAlive(m, now)
	case TypeLeaving:
		if name := m.Alive.Origin.Node; name != n.name {
			n.peer(name).leaving = true
		}
	case TypePull, TypeState, TypePullPage:
		n.answer(m.Digest)
	case TypeSync:
		n.leaseOrigins(m.Sync, now)
		n.out().Apply = append(n.rd.Apply, Apply{Kind: ApplySync, Sync: m.Sync, Msg: m})
		n.recheck = true
	case TypeSyncPage:
		n.leaseOrigins(m.Sync, now)
		n.out().Apply = append(n.rd.Apply, Apply{Kind: ApplySync, Sync: m.Sync, Msg: m, Partial: !m.Page.Last})
		n.recheck = true
		n.stepPage(m.Page, m.Sync.Len(), now)
	}
}

// flush sends everything pending. reliable sends over streams to every
// member (on leave, when packets must not be lost), together with what the
// last flush sent best effort.
func (n *Node) flush(reliable bool) {
	batch := n.pending
	n.pending, n.flushAt = nil, 0
	n.setDeadline()
	if reliable {
		batch = append(slices.Clip(n.lastSent), batch...)
		n.lastSent = nil
	} else if len(batch) > 0 {
		n.lastSent = batch
	}
	if len(batch) == 0 {
		return
	}
	batch = crdt.Coalesce(batch)
	packets, oversized := PackDeltas(batch, n.cfg.PacketBudget)
	mode := n.Mode()
	for i, p := range packets {
		m, err := NewDeltas(p)
		if err != nil {
			panic(fmt.Sprintf("dissem: encode deltas: %v", err)) // our own records: a bug
		}
		switch {
		case reliable || slices.Contains(oversized, i):
			n.sendLive(m, true)
		case mode == ModeEager:
			n.sendLive(m, false)
		case mode == ModeTree:
			n.sendTree(m, n.name)
		default:
			n.out().Broadcasts = append(n.rd.Broadcasts, Broadcast{Msg: m})
			// Seed the epidemic at once rather than at the next gossip round.
			for _, to := range n.randomLive(maxSeeds) {
				n.out().Sends = append(n.rd.Sends, Send{To: to, Msg: m})
			}
		}
	}
}

// announce sends this node's alive message: to every member while eager,
// through the piggyback queue beyond the eager threshold (an
// announcement straight to every member each AliveInterval would cost the
// cluster N² packets an interval).
func (n *Node) announce() {
	// An announcement equal to the last is the last one again: messages
	// are immutable, and most announcements repeat the one before.
	a := n.alive()
	m := n.lastAlive
	if m == nil || m.Alive != a {
		var err error
		if m, err = NewAlive(TypeAlive, a); err != nil {
			panic(fmt.Sprintf("dissem: encode alive: %v", err))
		}
		n.lastAlive = m
	}
	if n.Mode() == ModeEager {
		n.sendLive(m, false)
		return
	}
	n.out().Broadcasts = append(n.rd.Broadcasts, Broadcast{Msg: m, Name: "alive/" + n.name})
}

// Live reports whether a listed peer is one to send to: alive to
// memberlist, or held dead by memberlist but not by this node's leases
// (it was heard since the verdict: cutting it off would leave it without
// our deltas and announcements until memberlist's view heals).
func (n *Node) Live(name string) bool { return live(n.lookup(name)) }

// live is Live of a peer's record (nil: none).
func live(p *peer) bool {
	if p == nil {
		return true
	}
	switch p.state {
	case StateAlive:
		return true
	case StateDead:
		return !p.forgotten && !p.lease.down
	}
	return false
}

// sendLive sends m to every live member.
func (n *Node) sendLive(m *Message, reliable bool) {
	for i, k := 0, n.members.NumPeers(); i < k; i++ {
		if name := n.members.Peer(i); name != n.name && n.Live(name) {
			n.out().Sends = append(n.rd.Sends, Send{To: name, Msg: m, Reliable: reliable})
		}
	}
}

// randomLive picks up to k distinct live members at random, the way
// memberlist's kRandomNodes does: a shuffle of a short list, random
// probes of a long one.
func (n *Node) randomLive(k int) []string {
	total := n.members.NumPeers()
	ok := func(name string) bool { return name != n.name && n.Live(name) }
	out := make([]string, 0, k)
	if total < 3*k {
		for _, i := range n.rng.Perm(total) {
			if len(out) == k {
				break
			}
			if name := n.members.Peer(i); ok(name) {
				out = append(out, name)
			}
		}
		return out
	}
	for tries := 0; tries < 3*total && len(out) < k; tries++ {
		name := n.members.Peer(n.rng.IntN(total))
		if ok(name) && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// peer returns the record of a peer, making one if needed.
func (n *Node) peer(name string) *peer { return n.peerNum(n.origins.names.number(name)) }

// peerNum returns the record of the peer whose name has number k, making
// one if needed.
func (n *Node) peerNum(k int32) *peer {
	p, made := n.peers.get(k, len(n.origins.names.list))
	if made {
		name := n.origins.names.list[k]
		p.incarnation = n.members.Incarnation(name)
		if n.lister != nil && !n.lister.Listed(name) {
			p.stranger = true
			n.strangers++
		}
	}
	return p
}

// lookup returns the record of a peer, or nil.
func (n *Node) lookup(name string) *peer {
	k, ok := n.origins.names.lookup(name)
	if !ok {
		return nil
	}
	return n.peers.at(k)
}

// peerName returns a peer's name.
func (n *Node) peerName(p *peer) string { return n.origins.names.list[p.name] }

func (n *Node) stepDeltas(m *Message, now int64) {
	ds := m.Deltas
	if err := m.check(); err != nil {
		var from string
		if len(ds) > 0 {
			from = ds[0].Origin().Node
		}
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteBadDeltas, Node: from, Err: err})
		return
	}
	mode := n.Mode()
	// Relayed deltas prove nothing about their owner now.
	relayed := mode != ModeEager
	fresh := false
	mark := len(n.heardUp)
	nums := m.originNumbers(n.origins)
	for i := range ds {
		o := ds[i].Origin()
		if o.Node == n.name {
			continue
		}
		w := nums[i]
		if int(w) >= len(n.seen) {
			n.seen = append(n.seen, make([]originSeen, len(n.origins.num)-len(n.seen))...)
		}
		if v := ds[i].Version(); v > n.seen[w].version {
			fresh = true
			n.seen[w].version = v
		}
		// Eager deltas come straight from their owner: proof it is alive.
		if relayed {
			// A lease once heard stays heard: begin does nothing more.
			if !n.seen[w].leased {
				p := n.peerNum(n.origins.nodeOf[w])
				if !p.remote {
					p.lease.begin(now)
				}
				n.seen[w].leased = p.lease.heard
			}
			continue
		}
		if n.peerNum(n.origins.nodeOf[w]).lease.heardAt(now) {
			n.heardUp = append(n.heardUp, revival{node: o.Node, origin: o, target: ds[i].Version(), since: now})
			continue
		}
		// The newest delta of a peer heard again in this batch is what
		// its revival waits for.
		for j := mark; j < len(n.heardUp); j++ {
			if r := &n.heardUp[j]; r.node == o.Node && r.origin == o && ds[i].Version() > r.target {
				r.target = ds[i].Version()
			}
		}
	}
	n.out().Apply = append(n.rd.Apply, Apply{Kind: ApplyDeltas, Deltas: ds, Msg: m})
	n.recheck = true
	switch {
	case !fresh:
	case mode == ModeEpidemic:
		// Epidemic relay: what was new to us goes on with a retransmit limit.
		n.out().Broadcasts = append(n.rd.Broadcasts, Broadcast{Msg: m})
	case mode == ModeTree && len(ds) > 0:
		// Tree relay: on to this node's children in the owner's tree, once
		// (a repeat is not fresh).
		n.sendTree(m, ds[0].Origin().Node)
		n.watchTreeGaps(ds, nums, now)
	}
}

func (n *Node) stepAlive(m *Message, now int64) {
	a := &m.Alive
	name := a.Origin.Node
	if name == n.name {
		return
	}
	// An announcement of watermark 0 (a node that has written nothing)
	// reveals no gap, whatever we hold: the replica need not be asked.
	var local uint64
	if a.Watermark > 0 {
		local = n.replica.Watermark(a.Origin)
	}
	num, addr := m.aliveNumbers(n.origins)
	p := n.peerNum(num)
	wasDown := p.lease.heardAt(now)
	newInc := a.Origin.Incarnation > p.incarnation
	p.incarnation = max(p.incarnation, a.Origin.Incarnation)
	p.sessions, p.clientAddr = a.Sessions, addr
	// While a paged answer comes in, it brings what the gap is: a pull
	// now would start a second answer of the same records.
	//
	// A listed announcement that shows a gap is pulled on at once: the
	// owner just listed this node, and its writes up to its watermark were
	// made before that, so no delta will bring them; waiting for a second
	// announcement would show those sessions offline meanwhile. Any other
	// gap may be a delta still on its way, and is pulled on only if it
	// persists to the next announcement.
	listed := m.Type == TypeListed
	gapped := p.gap.observe(a.Origin, a.Watermark, local) || (listed && local < a.Watermark)
	pull := gapped && !n.pulling[name] && len(n.transfers) == 0
	if pull {
		n.pulling[name] = true
	}
	if newInc {
		n.out().Apply = append(n.rd.Apply, Apply{Kind: Retire, Origin: a.Origin})
	}
	if pull {
		n.out().Pulls = append(n.rd.Pulls, name)
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteGapPull, Node: name, Version: a.Watermark})
	}
	if wasDown {
		n.revive(name, a.Origin, a.Watermark, now)
	}
	// memberlist holds it dead, but it speaks to us: its verdict is stale
	// (a pause or partition that ended). Rejoin it now instead of at the
	// next reconnect round, so memberlist's view heals in one round trip.
	//
	// Likewise for a member that left gracefully and now announces a newer
	// incarnation: it restarted, and memberlist here missed its rejoin (the
	// alive that refutes its old leave is gossiped to only a few members,
	// RetransmitMult × log(N+1) times, and a member it misses learns it
	// only at a push/pull, PushPullInterval apart). Until then this node
	// does not count it live and sends it nothing, not even announcements,
	// so its lease on this node would expire and it would show this node's
	// sessions offline. No reconnect round rejoins a member that left.
	stale := (p.state == StateDead && !p.forgotten) || (p.state == StateLeft && a.Origin.Incarnation > p.leftInc)
	if stale && now-p.rejoinAt >= int64(2*n.cfg.AliveInterval) {
		p.rejoinAt = now
		n.out().Rejoin = append(n.rd.Rejoin, name)
	}
}

// answer answers a peer's digest with what it lacks, within the bound on
// answers in flight.
func (n *Node) answer(d DigestMsg) {
	if d.From == n.name {
		return
	}
	if n.answering >= MaxConcurrentAnswers {
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteAnswerDropped, Node: d.From})
		return
	}
	n.answering++
	n.out().Answers = append(n.rd.Answers, Answer{To: d.From, Digest: d.Digest, Cursor: d.Cursor})
}

// reviveTimeout bounds how long a peer heard again stays shown down while
// its missed writes are pulled: if the pull fails, the peer is shown up
// anyway (anti-entropy goes on) rather than hidden while it is alive.
func (n *Node) reviveTimeout() int64 { return int64(n.cfg.LeaseTimeout / 2) }

// revive handles a peer heard again after it was marked down, in a message
// from origin o whose writes go up to target. While the peer was down here
// it may have ended sessions in writes this node missed (a partition, lost
// packets): showing it up at once would show those sessions online again
// until anti-entropy repaired them. So it is shown up at once only if the
// replica holds o's writes up to target; otherwise it stays shown down
// while they are pulled (checkRevivals).
func (n *Node) revive(name string, o crdt.Origin, target uint64, now int64) {
	if target == 0 || n.replica.Watermark(o) >= target {
		n.out().Apply = append(n.rd.Apply, Apply{Kind: MarkUp, Node: name})
		return
	}
	if n.reviving == nil {
		n.reviving = make(map[string]revival)
	}
	n.reviving[name] = revival{node: name, origin: o, target: target, since: now}
	n.out().Notes = append(n.rd.Notes, Note{Kind: NoteReviving, Node: name, Version: target})
	if !n.pulling[name] {
		n.pulling[name] = true
		n.out().Pulls = append(n.rd.Pulls, name)
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteGapPull, Node: name, Version: target})
	}
}

// checkRevivals shows up each reviving peer this replica has caught up
// with, or that has waited past reviveTimeout, in name order.
func (n *Node) checkRevivals(now int64) {
	if len(n.reviving) == 0 {
		return
	}
	names := make([]string, 0, len(n.reviving))
	for name := range n.reviving {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		r := n.reviving[name]
		caughtUp := n.replica.Watermark(r.origin) >= r.target
		if !caughtUp && now-r.since <= n.reviveTimeout() {
			continue
		}
		delete(n.reviving, name)
		if !caughtUp {
			n.out().Notes = append(n.rd.Notes, Note{Kind: NoteRevivedEarly, Node: name})
		}
		n.out().Apply = append(n.rd.Apply, Apply{Kind: MarkUp, Node: name})
	}
}

// leaseOrigin starts the lease of the node of an origin whose records
// arrived, if it has none. Every node whose records this replica holds is
// leased: a member from memberlist's report of it (MemberAlive), and a
// stranger (a node Members did not list when this node first heard of it,
// and memberlist has not reported since: a member not reported yet, one
// gone before this node joined, or a name a sender made up) from the
// first of its records heard of. A stranger's lease is enforced in every
// mode (expireLeases): nothing else would ever show its sessions expired,
// as its failure is nobody's to report; the driver's GC purges them once
// shown expired past its purge horizon.
func (n *Node) leaseOrigin(name string, now int64) {
	if name == n.name {
		return
	}
	n.leaseOriginNum(n.origins.names.number(name), now)
}

// leaseOriginNum is leaseOrigin of the node whose name has number k (not
// this node's), for a caller that has it: a relay leases the origin of
// every delta it receives.
func (n *Node) leaseOriginNum(k int32, now int64) {
	if p := n.peerNum(k); !p.remote {
		p.lease.begin(now)
	}
}

// SetRemote tells the node that name is a gateway of another region: its
// records reach this region through the bridges (Regions), which show them
// expired when that region goes silent. The node stops leasing it, and it
// is no stranger. What its lease showed stays as it is until the region's
// verdict (Regions' MarkDown and MarkUp) replaces it. A member memberlist
// reported is of this region and is never made remote.
func (n *Node) SetRemote(name string) {
	if name == n.name {
		return
	}
	p := n.peer(name)
	if p.listed || p.remote {
		return
	}
	p.known(n)
	p.remote = true
	delete(n.reviving, name)
}

// Remote reports whether SetRemote made name a gateway of another region.
func (n *Node) Remote(name string) bool {
	p := n.lookup(name)
	return p != nil && p.remote
}

// leaseOrigins starts the leases of a sync's origins (leaseOrigin).
func (n *Node) leaseOrigins(s crdt.Sync, now int64) {
	for i := range s {
		n.leaseOrigin(s[i].Origin.Node, now)
	}
}

// expireLeases marks down the peers whose lease passed, in name order: in
// eager mode (LeasesEnforced) every peer's, in the others only strangers'
// (leaseOrigin).
func (n *Node) expireLeases(now int64) {
	enforced := LeasesEnforced(n.Mode())
	if !enforced && n.strangers == 0 {
		return
	}
	var expired []string
	for i := range n.peers.n {
		if p := n.peers.rec(i); (enforced || p.stranger) && !p.remote && p.lease.expire(now, n.cfg.LeaseTimeout) {
			expired = append(expired, n.peerName(p))
		}
	}
	slices.Sort(expired)
	for _, name := range expired {
		delete(n.reviving, name)
	}
	n.checkRevivals(now)
	for _, name := range expired {
		n.out().Apply = append(n.rd.Apply, Apply{Kind: MarkDown, Node: name})
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteLeaseExpired, Node: name})
	}
}

// reconnect asks to rejoin members memberlist declared dead, as serf does:
// a healed partition would otherwise stay split, each side holding the
// other dead. Members dead past ReconnectTimeout are forgotten.
func (n *Node) reconnect(now int64) {
	if n.dead == 0 {
		return
	}
	var names []string
	for i := range n.peers.n {
		p := n.peers.rec(i)
		if p.state != StateDead || p.forgotten {
			continue
		}
		name := n.peerName(p)
		if now-p.deadSince > int64(n.cfg.ReconnectTimeout) {
			p.setState(n, p.state, true)
			n.out().Forget = append(n.rd.Forget, name)
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	slices.Sort(n.rd.Forget)
	n.out().Rejoin = append(n.rd.Rejoin, names...)
}

// MemberAlive is memberlist's join or update of a member, with the
// metadata it carries: a new incarnation retires the sessions of the old
// one at once.
func (n *Node) MemberAlive(name string, meta Meta, now int64) {
	if name == n.name {
		return
	}
	p := n.peer(name)
	newInc := meta.Incarnation > p.incarnation
	p.incarnation = max(p.incarnation, meta.Incarnation)
	if meta.ClientAddr != "" {
		p.clientAddr = n.origins.addrs.number(meta.ClientAddr)
	}
	wasAlive := p.state == StateAlive && p.listed
	if !wasAlive {
		// A member new to the list changes the tree even when its record,
		// made just now, is already alive.
		n.dropTree()
	}
	p.setState(n, StateAlive, false)
	p.listed, p.leaving, p.remote = true, false, false
	p.known(n)
	p.lease.begin(now)
	if a := n.alive(); !wasAlive && !n.leaving && a.Watermark > 0 {
		// Tell it at once how far this node's writes go: it learns of
		// any it lacks (those made before this node listed it) from this,
		// not an interval later.
		m, err := NewAlive(TypeListed, a)
		if err != nil {
			panic(fmt.Sprintf("dissem: encode listed announcement: %v", err))
		}
		n.out().Sends = append(n.rd.Sends, Send{To: name, Msg: m})
	}
	if newInc {
		n.out().Apply = append(n.rd.Apply, Apply{Kind: Retire, Origin: crdt.Origin{Node: name, Incarnation: meta.Incarnation}})
	}
}

// MemberFailed is memberlist's verdict that a member is dead, or that it
// left (left, or the member announced its leave first).
func (n *Node) MemberFailed(name string, left bool, now int64) {
	if name == n.name {
		return
	}
	p := n.peer(name)
	if p.leaving {
		left = true
	}
	p.deadSince, p.listed = now, true
	p.known(n)
	if left {
		p.setState(n, StateLeft, false)
		p.leftInc = p.incarnation
	} else {
		p.setState(n, StateDead, false)
	}
	// A graceful leave is the peer's own word: it always counts. A dead
	// verdict is overruled by proof of life heard since (VerdictOverrule).
	var overrule time.Duration
	if !left {
		overrule = VerdictOverrule(n.Mode(), n.cfg.AliveInterval)
	}
	wasUp := p.lease.fail(now, overrule)
	down := p.lease.down
	if down {
		delete(n.reviving, name)
		delete(n.transfers, name)
	}
	switch {
	case wasUp:
		kind := NoteMemberFailed
		if left {
			kind = NoteMemberLeft
		}
		n.out().Apply = append(n.rd.Apply, Apply{Kind: MarkDown, Node: name})
		n.out().Notes = append(n.rd.Notes, Note{Kind: kind, Node: name})
	case !down:
		n.out().Notes = append(n.rd.Notes, Note{Kind: NoteVerdictOverruled, Node: name})
	}
}

// Unlist tells the node that a peer its Members lists is not one memberlist
// reported: a joiner learns only the members alive at its join, not those
// its seed holds dead. It is not sent to until memberlist reports it alive.
func (n *Node) Unlist(name string) {
	if name == n.name {
		return
	}
	p := n.peer(name)
	p.setState(n, StateDead, true)
	p.listed = false
}

// PeerInfo is what a node knows of a peer, for status pages and clients.
type PeerInfo struct {
	Name        string
	State       MemberState
	Incarnation uint64
	ClientAddr  string
	Sessions    int  // active sessions it owns, as last announced
	Listed      bool // memberlist reported it
	Leaving     bool // it announced a leave or drain
	// ShownDown is true while this node shows the peer's sessions
	// expired: its lease passed, memberlist declared it failed, or it was
	// heard again and its missed writes are still being pulled.
	ShownDown bool
}

// Peers returns every peer the node has a record of, by name.
func (n *Node) Peers() []PeerInfo {
	out := make([]PeerInfo, 0, n.peers.n)
	for i := range n.peers.n {
		out = append(out, n.peerInfo(n.peers.rec(i)))
	}
	slices.SortFunc(out, func(a, b PeerInfo) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out
}

// Peer returns what the node knows of one peer.
func (n *Node) Peer(name string) (PeerInfo, bool) {
	p := n.lookup(name)
	if p == nil {
		return PeerInfo{}, false
	}
	return n.peerInfo(p), true
}

func (n *Node) peerInfo(p *peer) PeerInfo {
	name := n.peerName(p)
	_, reviving := n.reviving[name]
	return PeerInfo{Name: name, State: p.state, Incarnation: p.incarnation, ClientAddr: n.origins.addrs.list[p.clientAddr],
		Sessions: p.sessions, Listed: p.listed, Leaving: p.leaving, ShownDown: p.lease.down || reviving}
}

// Staying counts the live listed members that have not announced a leave.
func (n *Node) Staying() int {
	c := 0
	for i, k := 0, n.members.NumPeers(); i < k; i++ {
		name := n.members.Peer(i)
		if name == n.name || !n.Live(name) {
			continue
		}
		if p := n.lookup(name); p == nil || !p.leaving {
			c++
		}
	}
	return c
}

// LastHeard returns when a peer was last heard from (or its lease began),
// and whether it ever was.
func (n *Node) LastHeard(name string) (int64, bool) {
	if p := n.lookup(name); p != nil {
		return p.lease.last, p.lease.heard
	}
	return 0, false
}
