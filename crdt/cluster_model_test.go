package crdt

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"pgregory.net/rapid"
)

// A model cluster for the property tests: writer replicas (gateways) make
// random local writes; every replica, writers and observers, gets every
// delta in an inbox and receives it in a random order, with duplicates and
// drops; anti-entropy runs between random pairs; failure detectors mark
// gateways down and up; gateways restart as new incarnations; time jumps past
// the tombstone horizon and GC runs. After every step every replica must pass
// CheckInvariants and never move a key's record backwards. At the end,
// after anti-entropy everywhere, every replica must hold the same records,
// and those must be what a dumb reference computes from every record that
// reached a live replica.

const propHorizon = 10 * time.Minute

var (
	propUsers   = []string{"u", "v"}
	propDevices = []string{"d1", "d2"}
	propGroups  = []string{"g1", "g2", "g3"}
)

// writeID identifies one write.
type writeID struct {
	o Origin
	v uint64
}

type modelNode struct {
	r      *Replica
	writer bool
	inbox  []int // indexes into world.produced; a multiset
	// held is the record of each key at the last check, for the
	// monotonicity rule; ever is the greatest record ever held per key.
	held map[Key]Session
	ever map[Key]Session
	// lagged: the node was once cut off past a GC, breaking the tombstone
	// horizon's contract for itself.
	lagged bool
	// noGroupQuery: nobody has asked the node a group query yet, so its
	// group index is not built (the replica builds it on the first one,
	// from the records merged so far, and maintains it from then on).
	noGroupQuery bool
}

type world struct {
	t        *rapid.T
	now      int64
	nodes    []*modelNode // writers first
	produced []Delta
	byID     map[writeID]int
	reached  []map[int]bool // produced index -> nodes whose state it entered
	epochs   map[Key]uint64 // highest epoch any client used per key
	nextID   int
	gcRan    bool // a GC pass ran (tombstones may differ between replicas)
	// options
	codec     bool // send deltas, digests and syncs through the codec
	maxGroups int
	// allowLag lets a GC leave an observer cut off (lagging past the
	// horizon); then no gateway restarts. Together they can break
	// convergence: a cut-off replica may hold the only copy of a write of a
	// since-retired incarnation that the others have given up for lost
	// (see the report; the digest would need to carry GC floors).
	allowLag bool
	noGC     bool     // no time jumps and no GC: the merge laws hold exactly
	trace    []string // what happened, for failure messages
}

func (w *world) logf(format string, args ...any) {
	w.trace = append(w.trace, fmt.Sprintf(format, args...))
}

// fatalf fails the case with the trace of what led there.
func (w *world) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\ntrace:\n  %s", fmt.Sprintf(format, args...), strings.Join(w.trace, "\n  "))
}

func newWorld(t *rapid.T, writers, observers int) *world {
	w := &world{t: t, now: int64(time.Hour), byID: map[writeID]int{}, epochs: map[Key]uint64{}, maxGroups: 2}
	for i := range writers + observers {
		name := fmt.Sprintf("g%d", i+1)
		if i >= writers {
			name = fmt.Sprintf("o%d", i-writers+1)
		}
		w.nodes = append(w.nodes, &modelNode{r: w.replica(name, 1), writer: i < writers,
			held: map[Key]Session{}, ever: map[Key]Session{},
			noGroupQuery: rapid.Bool().Draw(t, "no group query yet")})
	}
	return w
}

func (w *world) replica(name string, inc uint64) *Replica {
	r, err := NewReplica(Config{Self: Origin{Node: name, Incarnation: inc},
		TombstoneHorizon: propHorizon, PurgeHorizon: 1000 * time.Hour})
	if err != nil {
		w.fatalf("%v", err)
	}
	return r
}

func (w *world) writers() int {
	n := 0
	for _, m := range w.nodes {
		if m.writer {
			n++
		}
	}
	return n
}

func (w *world) drawKey(label string) Key {
	return Key{
		User:   rapid.SampledFrom(propUsers).Draw(w.t, label+"-user"),
		Device: rapid.SampledFrom(propDevices).Draw(w.t, label+"-device"),
	}
}

// step runs one random action.
func (w *world) step() {
	t := w.t
	switch op := rapid.IntRange(0, 99).Draw(t, "op"); {
	case op < 30:
		w.write(rapid.IntRange(0, w.writers()-1).Draw(t, "writer"))
	case op < 70:
		w.deliverOne()
	case op < 82:
		a := rapid.IntRange(0, len(w.nodes)-1).Draw(t, "puller")
		b := rapid.IntRange(0, len(w.nodes)-1).Draw(t, "peer")
		if a != b {
			w.pull(a, b)
		}
	case op < 90:
		n := w.nodes[rapid.IntRange(0, len(w.nodes)-1).Draw(t, "detector")]
		node := fmt.Sprintf("g%d", rapid.IntRange(1, w.writers()).Draw(t, "suspect"))
		if rapid.Bool().Draw(t, "down") {
			w.logf("%s: %s down", n.r.Self(), node)
			n.r.SetNodeDown(node, w.now)
		} else {
			w.logf("%s: %s up", n.r.Self(), node)
			n.r.SetNodeUp(node)
		}
	case op < 94:
		if !w.allowLag {
			w.restart(rapid.IntRange(0, w.writers()-1).Draw(t, "restart"))
		}
	case op < 97:
		if !w.noGC {
			w.gcJump()
		}
	default:
		// The first group query of a node that had none.
		for _, m := range w.nodes {
			if m.noGroupQuery {
				w.logf("%s: first group query", m.r.Self())
				m.noGroupQuery = false
				break
			}
		}
	}
	w.now += int64(time.Millisecond)
	w.check()
}

// write makes writer i do one local write: a connect, a status or group
// change or the end of one of its own sessions, or an account write.
//
// A connect allocates its epoch as node/ does: 1 + max(the replica's
// MaxEpoch, the client's last_epoch). The client usually remembers its last
// epoch; two hellos of one device may race on two gateways (a tie in epoch,
// broken by gateway); before any GC the client may also have forgotten it, so
// that a gateway that has not heard of the latest epoch issues a stale one.
// After GC a forgetful client breaks convergence (see
// testdata/epoch_reuse_after_gc.txt): not modelled.
func (w *world) write(i int) {
	t, n := w.t, w.nodes[i]
	k := w.drawKey("key")
	var d Delta
	var err error
	switch kind := rapid.IntRange(0, 5).Draw(t, "write"); kind {
	case 0:
		last := w.epochs[k]
		if !w.gcRan && rapid.IntRange(0, 3).Draw(t, "forgetful") == 0 {
			last = 0
		}
		w.connect(i, k, last)
		if rapid.IntRange(0, 4).Draw(t, "race") == 0 {
			if j := rapid.IntRange(0, w.writers()-1).Draw(t, "racer"); j != i {
				w.connect(j, k, last)
			}
		}
		return
	case 1, 2, 3, 4:
		cur, ok := n.r.Session(k)
		if !ok || cur.Origin != n.r.Self() || cur.State != StateActive {
			return // not this gateway's live session
		}
		switch kind {
		case 1:
			cur.Status = Status(rapid.IntRange(0, int(StatusBusy)).Draw(t, "status"))
		case 2:
			cur.Groups = rapid.SliceOfN(rapid.SampledFrom(propGroups), 0, w.maxGroups).Draw(t, "groups")
		case 3:
			cur.State = StateDisconnected
		case 4:
			cur.State = StateExpired
		}
		cur.ExpiresAt = w.now + int64(30*time.Second)
		if d, err = n.r.PutLocal(cur, w.now); err != nil {
			w.fatalf("%s: a change of its own live session %s failed: %v", n.r.Self(), k, err)
		}
		if cur.State.Terminal() {
			// As a gateway does: the end of a session it owns is
			// written to the user's last-seen register too.
			w.produce(i, d)
			d, err = n.r.PutLastSeen(k.User, w.now)
		}
	case 5:
		ov := Override(rapid.IntRange(0, int(maxOverrideEnum)).Draw(t, "override"))
		auth := rapid.SampledFrom(append([]string{""}, propDevices...)).Draw(t, "auth")
		d, err = n.r.PutAccountLocal(k.User, ov, auth, w.now)
	}
	if err != nil {
		w.fatalf("%s: write: %v", n.r.Self(), err)
	}
	w.produce(i, d)
}

func (w *world) connect(i int, k Key, lastEpoch uint64) {
	t, n := w.t, w.nodes[i]
	w.nextID++
	s := Session{User: k.User, Device: k.Device, ID: fmt.Sprintf("s%d", w.nextID),
		Epoch:     1 + max(n.r.MaxEpoch(k), lastEpoch),
		State:     StateActive,
		Status:    Status(rapid.IntRange(0, int(StatusBusy)).Draw(t, "status")),
		Groups:    rapid.SliceOfN(rapid.SampledFrom(propGroups), 0, w.maxGroups).Draw(t, "groups"),
		ExpiresAt: w.now + int64(30*time.Second)}
	d, err := n.r.PutLocal(s, w.now)
	if err != nil {
		w.fatalf("%s: connect %s epoch %d: %v", n.r.Self(), k, s.Epoch, err)
	}
	w.epochs[k] = max(w.epochs[k], s.Epoch)
	w.produce(i, d)
}

func (w *world) produce(from int, d Delta) {
	idx := len(w.produced)
	w.logf("#%d %s", idx, formatDelta(&d))
	w.produced = append(w.produced, d)
	w.byID[writeID{d.Origin(), d.Version()}] = idx
	w.reached = append(w.reached, map[int]bool{from: true})
	for j, m := range w.nodes {
		if j != from {
			m.inbox = append(m.inbox, idx)
		}
	}
}

// deliverOne takes one delta from a random inbox and delivers it, delivers
// it and keeps a duplicate for later, or drops it.
func (w *world) deliverOne() {
	t := w.t
	j := rapid.IntRange(0, len(w.nodes)-1).Draw(t, "to")
	m := w.nodes[j]
	if len(m.inbox) == 0 {
		return
	}
	pos := rapid.IntRange(0, len(m.inbox)-1).Draw(t, "which")
	mode := rapid.IntRange(0, 9).Draw(t, "fate") // 0: drop, 1: duplicate, else deliver
	idx := m.inbox[pos]
	w.logf("%s <- #%d %s", m.r.Self(), idx, []string{"dropped", "duplicated", "delivered"}[min(mode, 2)])
	if mode != 1 {
		m.inbox = slices.Delete(m.inbox, pos, pos+1)
	}
	if mode != 0 {
		w.apply(j, idx)
	}
}

func (w *world) apply(j, idx int) {
	d := w.produced[idx]
	if w.codec {
		d = w.roundTripDelta(d)
	}
	if changed, dropped, err := w.nodes[j].r.Apply(d, w.now); err != nil {
		w.fatalf("apply %s v%d to %s: %v", d.Origin(), d.Version(), w.nodes[j].r.Self(), err)
	} else if changed || len(dropped) > 0 {
		w.logf("  changed=%v retired=%v", changed, dropped)
	}
	w.reached[idx][j] = true
}

func (w *world) roundTripDelta(d Delta) Delta {
	b, err := AppendDeltas(nil, []Delta{d})
	if err != nil {
		w.fatalf("%v", err)
	}
	ds, err := DecodeDeltas(b)
	if err != nil {
		w.fatalf("decode of an encoded delta: %v", err)
	}
	if len(ds) != 1 || !deltaEqual(&ds[0], &d) {
		w.fatalf("delta changed through the codec:\n%+v\n%+v", d, ds[0])
	}
	return ds[0]
}

// pull makes node a apply node b's answer to a's digest. It reports whether
// a's records or digest changed.
func (w *world) pull(a, b int) bool {
	ra, rb := w.nodes[a].r, w.nodes[b].r
	dg := ra.Digest()
	if w.codec {
		enc, err := AppendDigest(nil, dg)
		if err != nil {
			w.fatalf("%v", err)
		}
		if dg, err = DecodeDigest(enc); err != nil {
			w.fatalf("%v", err)
		}
	}
	sy := rb.Diff(dg)
	if w.codec {
		enc, err := AppendSync(nil, sy)
		if err != nil {
			w.fatalf("%v", err)
		}
		if sy, err = DecodeSync(enc); err != nil {
			w.fatalf("decode of an encoded sync: %v", err)
		}
	}
	for _, os := range sy {
		for i := range os.Sessions {
			w.reach(os.Sessions[i].Origin, os.Sessions[i].Version, a)
		}
		for i := range os.Accounts {
			w.reach(os.Accounts[i].Origin, os.Accounts[i].Version, a)
		}
		for i := range os.LastSeen {
			w.reach(os.LastSeen[i].Origin, os.LastSeen[i].Version, a)
		}
	}
	before := snapshotState(ra)
	var parts []string
	for _, os := range sy {
		p := fmt.Sprintf("%s w=%d gc=%d", os.Origin, os.Watermark, os.GCFloor)
		if os.Full {
			p += " full"
		}
		for _, x := range os.Sessions {
			p += fmt.Sprintf(" %s@%d", x.Key(), x.Version)
		}
		parts = append(parts, p)
	}
	w.logf("%s pulls from %s: %s", ra.Self(), rb.Self(), strings.Join(parts, "; "))
	if _, err := ra.ApplySync(sy, w.now); err != nil {
		w.fatalf("%s applies sync from %s: %v", ra.Self(), rb.Self(), err)
	}
	return snapshotState(ra) != before
}

func snapshotState(r *Replica) string {
	return fmt.Sprint(r.Digest()) + string(canonicalSnapshot(r))
}

func (w *world) reach(o Origin, v uint64, j int) {
	idx, ok := w.byID[writeID{o, v}]
	if !ok {
		w.fatalf("a sync carries %s v%d, which no writer wrote", o, v)
	}
	w.reached[idx][j] = true
}

// restart replaces writer i by a new, empty incarnation. What only the old
// one held is lost; deltas it sent may still be in flight.
func (w *world) restart(i int) {
	n := w.nodes[i]
	self := n.r.Self()
	n.r = w.replica(self.Node, self.Incarnation+1)
	w.logf("restart %s as %s", self, n.r.Self())
	n.inbox = nil
	n.held, n.ever = map[Key]Session{}, map[Key]Session{}
	for _, r := range w.reached {
		delete(r, i)
	}
}

// stabilize runs anti-entropy between every pair of the given nodes until
// nothing changes.
func (w *world) stabilize(nodes []int) {
	for round := 0; ; round++ {
		if round > 8 {
			w.fatalf("anti-entropy reached no fixed point in %d rounds", round)
		}
		changed := false
		for _, a := range nodes {
			for _, b := range nodes {
				if a != b && w.pull(a, b) {
					changed = true
				}
			}
		}
		if !changed {
			return
		}
	}
}

// gcJump brings every node but possibly one lagging observer up to date,
// moves time past the tombstone horizon and runs GC on some nodes. The
// tombstone horizon's contract (no write arrives later than the horizon
// unless anti-entropy has already covered it) holds because of the
// stabilization; the lagging node, left out and cut off, is repaired later
// by anti-entropy, with a full snapshot if it fell below a GC floor.
func (w *world) gcJump() {
	t := w.t
	lagging := -1
	if obs := len(w.nodes) - w.writers(); w.allowLag && obs > 0 && rapid.Bool().Draw(t, "lag") {
		lagging = w.writers() + rapid.IntRange(0, obs-1).Draw(t, "lagging")
	}
	var all []int
	for j := range w.nodes {
		if j != lagging {
			all = append(all, j)
		}
	}
	// Everything in flight now is older than the horizon once time jumps. A
	// write of a live incarnation is covered by the stabilization, so a late
	// copy only tests idempotence; a write of a retired incarnation may sit
	// in a gap nobody can fill any more, so it must be lost by now (a write
	// delayed past the horizon breaks the contract). The lagging node was
	// cut off: everything in flight to it is lost.
	if lagging >= 0 {
		w.nodes[lagging].lagged = true
	}
	for j, m := range w.nodes {
		m.inbox = slices.DeleteFunc(m.inbox, func(idx int) bool {
			return j == lagging || w.retiredOrigin(w.produced[idx].Origin())
		})
	}
	w.logf("stabilize all but %d", lagging)
	w.stabilize(all)
	w.now += int64(propHorizon) + int64(time.Second)
	for _, m := range w.nodes {
		if rapid.Bool().Draw(t, "gc") {
			st := m.r.GC(w.now)
			w.logf("%s GC: %+v", m.r.Self(), st)
			w.gcRan = true
		}
	}
}
