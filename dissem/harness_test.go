package dissem

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// harness is a minimal driver of several cores, for the data-driven
// scripts and the properties: real crdt replicas, a network of messages
// in flight that the test delivers, drops or reorders, and a piggyback
// "queue" that a gossip round hands to every other member. Time moves only
// when the test says.
type harness struct {
	now    int64
	names  []string
	nodes  map[string]*hnode
	flight []flight // messages in flight, in send order
	out    strings.Builder
	// pageRecords bounds the records of an answer's page (0: none).
	pageRecords int
	// delivered counts the messages delivered, by type.
	delivered map[Type]int
	// cfg adjusts every node's Config, at the start and at a restart.
	cfg func(*Config)
}

type hnode struct {
	h       *harness
	name    string
	core    *Node
	r       *crdt.Replica
	dead    map[string]bool // memberlist's verdicts this node has had
	queue   []Broadcast     // piggyback queue: handed out by gossip
	members int             // memberlist's member count, self included (NumMembers)
}

// flight is one message on its way.
type flight struct {
	from, to string
	msg      *Message
	reliable bool
	// done is called once the message is delivered or dropped (a pull's
	// or an answer's end).
	done func()
}

const harnessEpoch = int64(1_700_000_000_000_000_000)

func newHarness(names []string, cfg func(*Config)) (*harness, error) {
	h := &harness{now: harnessEpoch, names: names, nodes: make(map[string]*hnode), cfg: cfg}
	for i, name := range names {
		hn, err := h.newNode(i, uint64(harnessEpoch)+uint64(i)+1)
		if err != nil {
			return nil, err
		}
		h.nodes[name] = hn
	}
	for _, name := range names {
		hn := h.nodes[name]
		for i, peer := range names {
			if peer != name {
				hn.core.MemberAlive(peer, Meta{Incarnation: uint64(harnessEpoch) + uint64(i) + 1}, h.now)
			}
		}
		hn.core.Start(h.now, false)
		h.drive(hn, "join")
	}
	return h, nil
}

// newNode makes the i-th node, with an empty replica, as incarnation inc.
func (h *harness) newNode(i int, inc uint64) (*hnode, error) {
	name := h.names[i]
	self := crdt.Origin{Node: name, Incarnation: inc}
	r, err := crdt.NewReplica(crdt.Config{Self: self})
	if err != nil {
		return nil, err
	}
	hn := &hnode{h: h, name: name, r: r, dead: make(map[string]bool), members: len(h.names)}
	c := Config{Name: name, Incarnation: self.Incarnation, ClientAddr: "10.0.0." + fmt.Sprint(i+1) + ":7400",
		BatchDelay: 2 * time.Millisecond, PacketBudget: DefaultPacketBudget, EagerThreshold: 64,
		AliveInterval: time.Second, LeaseTimeout: 3 * time.Second,
		ReconnectInterval: 10 * time.Second, ReconnectTimeout: time.Hour,
		Rand: rand.New(rand.NewPCG(uint64(i)+1, 7))}
	if h.cfg != nil {
		h.cfg(&c)
	}
	core, err := New(c, hn, hn)
	if err != nil {
		return nil, err
	}
	hn.core = core
	return hn, nil
}

// restart replaces a node by a new incarnation of it with an empty
// replica, as a restarted process: what was in flight to or from it is
// lost (printed), its memberlist reports every other member alive (it
// joined them all), and it starts its timers. The others' memberlist
// reports nothing: the script says what each learns (member-alive).
func (h *harness) restart(name string, inc uint64) error {
	i := slices.Index(h.names, name)
	if i < 0 {
		return fmt.Errorf("no node %q", name)
	}
	hn, err := h.newNode(i, inc)
	if err != nil {
		return err
	}
	kept := h.flight[:0]
	for _, f := range h.flight {
		if f.from != name && f.to != name {
			kept = append(kept, f)
			continue
		}
		fmt.Fprintf(&h.out, "dropped %s -> %s %s\n", f.from, f.to, Describe(f.msg))
		if f.done != nil {
			f.done()
		}
	}
	h.flight = kept
	h.nodes[name] = hn
	for _, peer := range h.names {
		if peer != name {
			hn.core.MemberAlive(peer, Meta{Incarnation: h.nodes[peer].core.cfg.Incarnation}, h.now)
		}
	}
	hn.core.Start(h.now, false)
	h.drive(hn, "restart")
	return nil
}

// Members and Replica, as each node sees them.
func (n *hnode) NumMembers() int                { return n.members }
func (n *hnode) NumPeers() int                  { return len(n.h.names) }
func (n *hnode) Peer(i int) string              { return n.h.names[i] }
func (n *hnode) Incarnation(string) uint64      { return 0 }
func (n *hnode) Watermark(o crdt.Origin) uint64 { return n.r.Watermark(o) }
func (n *hnode) SessionCount() int {
	c := 0
	for _, k := range n.r.NodeSessions(n.name) {
		if s, _ := n.r.Session(k); s.State == crdt.StateActive {
			c++
		}
	}
	return c
}

// drive executes a node's Ready until there is nothing more, printing it
// under label.
func (h *harness) drive(n *hnode, label string) {
	for n.core.HasReady() {
		rd := n.core.Ready()
		if !rd.Empty() {
			fmt.Fprintf(&h.out, "%s %s:\n", n.name, label)
			for _, l := range strings.Split(strings.TrimRight(rd.String(), "\n"), "\n") {
				fmt.Fprintf(&h.out, "  %s\n", l)
			}
		}
		h.execute(n, rd)
		n.core.Advance(h.now)
	}
}

func (h *harness) execute(n *hnode, rd *Ready) {
	for _, a := range rd.Apply {
		switch a.Kind {
		case ApplyDeltas:
			for _, d := range a.Deltas {
				if _, _, err := n.r.Apply(d, h.now); err != nil {
					panic(err)
				}
			}
		case ApplySync:
			if _, err := n.r.ApplySync(a.Sync, h.now); err != nil {
				panic(err)
			}
		case MarkDown:
			n.r.SetNodeDown(a.Node, h.now)
		case MarkUp:
			n.r.SetNodeUp(a.Node)
		case Retire:
			if _, err := n.r.ApplySync(crdt.Sync{{Origin: a.Origin}}, h.now); err != nil {
				panic(err)
			}
		}
	}
	for _, s := range rd.Sends {
		h.flight = append(h.flight, flight{from: n.name, to: s.To, msg: s.Msg, reliable: s.Reliable})
	}
	n.queue = append(n.queue, rd.Broadcasts...)
	for _, p := range rd.Pulls {
		m, err := NewDigest(TypePull, n.name, n.r.Digest())
		if err != nil {
			panic(err)
		}
		peer := p
		h.flight = append(h.flight, flight{from: n.name, to: p, msg: m, reliable: true,
			done: func() { n.core.PullDone(peer) }})
	}
	for _, p := range rd.PagePulls {
		m, err := NewPullPage(n.name, n.r.Digest(), p.Cursor)
		if err != nil {
			panic(err)
		}
		h.flight = append(h.flight, flight{from: n.name, to: p.To, msg: m, reliable: true})
	}
	for _, a := range rd.Answers {
		page, next, last := n.r.DiffPage(a.Digest, a.Cursor, h.pageRecords, 0)
		if len(page) == 0 && last && !a.Cursor.Started {
			n.core.AnswerDone()
			continue
		}
		m, err := NewSyncPage(SyncPage{From: n.name, At: a.Cursor, Next: next, Last: last}, page)
		if err != nil {
			panic(err)
		}
		h.flight = append(h.flight, flight{from: n.name, to: a.To, msg: m, reliable: true,
			done: n.core.AnswerDone})
	}
}

// deliver hands flight i to its receiver.
func (h *harness) deliver(i int) {
	f := h.flight[i]
	h.flight = slices.Delete(h.flight, i, i+1)
	if f.done != nil {
		f.done()
	}
	if h.delivered == nil {
		h.delivered = make(map[Type]int)
	}
	h.delivered[f.msg.Type]++
	to := h.nodes[f.to]
	// A message goes through the wire: what is stepped is what was encoded.
	m, err := Decode(f.msg.Bytes)
	if err != nil {
		panic(err)
	}
	to.core.Step(m, h.now)
	h.drive(to, "<- "+f.from)
}

// drop loses flight i.
func (h *harness) drop(i int) {
	f := h.flight[i]
	h.flight = slices.Delete(h.flight, i, i+1)
	if f.done != nil {
		f.done()
	}
}

// gossip hands every node's piggyback queue to every other member, once,
// and empties it (a round of memberlist's gossip, simplified).
func (h *harness) gossip() {
	for _, name := range h.names {
		n := h.nodes[name]
		q := n.queue
		n.queue = nil
		for _, b := range q {
			for _, peer := range h.names {
				if peer != name {
					h.flight = append(h.flight, flight{from: name, to: peer, msg: b.Msg})
				}
			}
		}
	}
}

// pushPull is a push/pull of memberlist's between a and b: each gets the
// other's digest (TypeState), as it is now, and answers it.
func (h *harness) pushPull(a, b string) {
	for _, p := range [][2]string{{a, b}, {b, a}} {
		m, err := NewDigest(TypeState, p[0], h.nodes[p[0]].r.Digest())
		if err != nil {
			panic(err)
		}
		h.flight = append(h.flight, flight{from: p[0], to: p[1], msg: m, reliable: true})
	}
}

// advance moves time by d and ticks every node.
func (h *harness) advance(d time.Duration) {
	h.now += int64(d)
	for _, name := range h.names {
		n := h.nodes[name]
		n.core.Tick(h.now)
		h.drive(n, "tick")
	}
}

// stabilize delivers everything in flight, and what that sends, until
// nothing is in flight.
func (h *harness) stabilize() {
	for len(h.flight) > 0 {
		h.deliver(0)
	}
}

// converged reports whether every replica holds what every other holds:
// no digest asks another replica for anything, and the records held are
// the same (a watermark may cover records its replica lacks, which no
// digest then shows).
func (h *harness) converged() error {
	for _, a := range h.names {
		for _, b := range h.names {
			if a == b {
				continue
			}
			if s := h.nodes[a].r.Diff(h.nodes[b].r.Digest()); s.Len() > 0 {
				return fmt.Errorf("%s holds %d records %s lacks", a, s.Len(), b)
			}
		}
	}
	first, _ := h.nodes[h.names[0]].r.Snapshot()
	for _, b := range h.names[1:] {
		ss, _ := h.nodes[b].r.Snapshot()
		if !slices.EqualFunc(first, ss, sameRecord) {
			return fmt.Errorf("%s and %s hold different records, and their digests show nothing:\n%s\n%s",
				h.names[0], b, recordList(first), recordList(ss))
		}
	}
	return nil
}

func sameRecord(a, b crdt.Session) bool {
	return a.Key() == b.Key() && a.Origin == b.Origin && a.Version == b.Version
}

func recordList(ss []crdt.Session) string {
	var b strings.Builder
	for i := range ss {
		fmt.Fprintf(&b, " %s@%s:%d", ss[i].Key(), ss[i].Origin.Node, ss[i].Version)
	}
	return b.String()
}

// write is an owner's write on node n: PutLocal, then Publish. A session
// that is not active there is connected as a new epoch; ending one that is
// not active does nothing.
func (h *harness) write(n *hnode, user, device string, status crdt.Status, state crdt.State) error {
	k := crdt.Key{User: user, Device: device}
	cur, ok := n.r.Session(k)
	active := ok && cur.State == crdt.StateActive && cur.Origin.Node == n.name
	if !active && state != crdt.StateActive {
		return nil
	}
	epoch := cur.Epoch
	if !active {
		var err error
		if epoch, err = crdt.NextEpoch(n.r.MaxEpoch(k), 0, h.now); err != nil {
			return err
		}
	}
	d, err := n.r.PutLocal(crdt.Session{User: user, Device: device, ID: fmt.Sprintf("%s-%s-%d", user, device, epoch),
		Epoch: epoch, State: state, Status: status}, h.now)
	if errors.Is(err, crdt.ErrSuperseded) {
		return nil // refused here, as a gateway refuses it
	}
	if err != nil {
		return err
	}
	n.core.Publish([]crdt.Delta{d}, h.now)
	return nil
}
