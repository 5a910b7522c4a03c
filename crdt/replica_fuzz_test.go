package crdt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// FuzzReplicaOps drives three replicas through a sequence of operations
// read from the input: local writes (sessions and accounts, with hostile
// epochs), deltas and syncs forged with arbitrary origins, incarnations,
// versions, coverage and watermarks up to 2^64-1, deliveries of any delta
// to any replica, pulls between replicas, nodes marked down and up, GC,
// restarts under a new incarnation, and time passing. After every step
// every replica's indexes agree with its records (CheckInvariants) and
// nothing panics; a delta or sync is refused only by validation. At the
// end, observers fed the honest deltas (those the replicas wrote) in
// different orders, with duplicates, or joined by anti-entropy, hold and
// show the same thing, as the merge laws promise. Seed corpus:
// testdata/fuzz/FuzzReplicaOps.
func FuzzReplicaOps(f *testing.F) {
	for _, seed := range replicaOpsSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		w := newOpsWorld(t)
		in := &opsInput{b: data}
		for step := 0; step < 200 && in.more(); step++ {
			w.step(in)
			w.check(step)
		}
		w.converge()
	})
}

// opsInput reads the fuzz input as small choices; past its end every read
// is zero.
type opsInput struct{ b []byte }

func (in *opsInput) more() bool { return len(in.b) > 0 }

func (in *opsInput) byte() byte {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return c
}

func (in *opsInput) pick(n int) int { return int(in.byte()) % n }

// u64 reads a value biased towards the edges: small, around 2^53, 2^63
// and 2^64, or eight raw bytes.
func (in *opsInput) u64() uint64 {
	switch c := in.byte(); c % 8 {
	case 0, 1:
		return uint64(c / 8)
	case 2:
		return math.MaxUint64 - uint64(c/8)
	case 3:
		return 1<<53 + uint64(c/8) - 16
	case 4:
		return 1<<63 + uint64(c/8) - 16
	case 5:
		var b [8]byte
		for i := range b {
			b[i] = in.byte()
		}
		return binary.LittleEndian.Uint64(b[:])
	default:
		return uint64(c)
	}
}

var (
	opsNodes   = []string{"a", "b", "c", "x"} // x is a node no replica runs
	opsUsers   = []string{"u", "v", "w"}
	opsDevices = []string{"d1", "d2", "d3"}
	opsGroups  = []string{"g1", "g2", "g3"}
)

type opsWorld struct {
	t    *testing.T
	reps []*Replica
	now  int64
	// pool holds every delta made, honest or forged, for delivery.
	pool []Delta
	// honest are the deltas the replicas wrote themselves, in order.
	honest []Delta
	log    []string
}

func newOpsWorld(t *testing.T) *opsWorld {
	w := &opsWorld{t: t}
	for _, n := range opsNodes[:3] {
		w.reps = append(w.reps, newOpsReplica(t, n, 1))
	}
	return w
}

func newOpsReplica(t *testing.T, node string, inc uint64) *Replica {
	r, err := NewReplica(Config{Self: Origin{Node: node, Incarnation: inc},
		TombstoneHorizon: time.Minute, PurgeHorizon: 2 * time.Minute, MaxPendingRanges: 4, MaxTombstonesPerUser: 2})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (w *opsWorld) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf(format, args...))
}

func (w *opsWorld) fatalf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nsteps:\n  %s", fmt.Sprintf(format, args...), joinSteps(w.log))
}

func joinSteps(log []string) string {
	var b bytes.Buffer
	for i, s := range log {
		if i > 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(s)
	}
	return b.String()
}

func (w *opsWorld) groups(in *opsInput) []string {
	mask := in.byte()
	var gs []string
	for i, g := range opsGroups {
		if mask&(1<<i) != 0 {
			gs = append(gs, g)
		}
	}
	return gs
}

func (w *opsWorld) session(in *opsInput) Session {
	return Session{
		User:      opsUsers[in.pick(len(opsUsers))],
		Device:    opsDevices[in.pick(len(opsDevices))],
		ID:        fmt.Sprintf("s%d", in.pick(4)),
		Epoch:     in.u64(),
		State:     State(in.pick(int(maxStateEnum) + 2)), // one past the last: invalid
		Status:    Status(in.pick(int(StatusBusy) + 2)),
		Groups:    w.groups(in),
		ExpiresAt: int64(in.u64()),
	}
}

func (w *opsWorld) origin(in *opsInput) Origin {
	return Origin{Node: opsNodes[in.pick(len(opsNodes))], Incarnation: in.u64()}
}

func (w *opsWorld) step(in *opsInput) {
	switch op := in.pick(14); op {
	case 0, 1: // a local session write
		i := in.pick(len(w.reps))
		s := w.session(in)
		d, err := w.reps[i].PutLocal(s, w.now)
		w.logf("put %s %s/%s %s epoch %d state %d status %d %v: %v", w.reps[i].Self(), s.User, s.Device, s.ID, s.Epoch, s.State, s.Status, s.Groups, err)
		if err == nil {
			w.pool = append(w.pool, d)
			w.honest = append(w.honest, d)
		}
	case 2: // a local account write
		i := in.pick(len(w.reps))
		user := opsUsers[in.pick(len(opsUsers))]
		ov := Override(in.pick(int(maxOverrideEnum) + 1))
		dev := []string{"", "d1", "d2"}[in.pick(3)]
		d, err := w.reps[i].PutAccountLocal(user, ov, dev, w.now)
		w.logf("account %s %s %v %q: %v", w.reps[i].Self(), user, ov, dev, err)
		if err != nil {
			w.fatalf("PutAccountLocal: %v", err)
		}
		w.pool = append(w.pool, d)
		w.honest = append(w.honest, d)
	case 3: // a forged session delta
		s := w.session(in)
		s.Origin = w.origin(in)
		s.Gateway = s.Origin.Node
		if in.pick(8) == 0 {
			s.Gateway = "y" // a gateway other than the origin: invalid
		}
		s.Seq, s.Version, s.Updated = in.u64(), in.u64(), int64(in.u64())
		d := Delta{Since: in.u64(), Session: &s}
		if in.pick(2) == 0 && s.Version > 0 {
			d.Since = s.Version - 1
		}
		w.logf("forge session %s v%d since %d %s/%s epoch %d seq %d state %d", s.Origin, s.Version, d.Since, s.User, s.Device, s.Epoch, s.Seq, s.State)
		w.pool = append(w.pool, d)
	case 4: // a forged account delta
		a := Account{
			User: opsUsers[in.pick(len(opsUsers))], Override: Override(in.pick(int(maxOverrideEnum) + 2)),
			AuthoritativeDevice: []string{"", "d1", "d2"}[in.pick(3)],
			Stamp:               Timestamp{Wall: int64(in.u64()), Logical: uint32(in.u64())},
			Writer:              opsNodes[in.pick(len(opsNodes))],
			Origin:              w.origin(in), Version: in.u64(),
		}
		d := Delta{Since: in.u64(), Account: &a}
		if in.pick(2) == 0 && a.Version > 0 {
			d.Since = a.Version - 1
		}
		w.logf("forge account %s v%d since %d %s %v stamp %v", a.Origin, a.Version, d.Since, a.User, a.Override, a.Stamp)
		w.pool = append(w.pool, d)
	case 5, 6: // deliver a delta
		if len(w.pool) == 0 {
			return
		}
		i, k := in.pick(len(w.reps)), in.pick(len(w.pool))
		d := w.pool[k]
		_, _, err := w.reps[i].Apply(d, w.now)
		w.logf("apply #%d (%s v%d) to %s: %v", k, d.Origin(), d.Version(), w.reps[i].Self(), err)
		if err != nil && d.Validate() == nil {
			w.fatalf("a valid delta was refused: %v", err)
		}
	case 7: // a pull
		i, j := in.pick(len(w.reps)), in.pick(len(w.reps))
		if i == j {
			return
		}
		sy := w.reps[j].Diff(w.reps[i].Digest())
		_, err := w.reps[i].ApplySync(sy, w.now)
		w.logf("%s pulls from %s (%d records): %v", w.reps[i].Self(), w.reps[j].Self(), sy.Len(), err)
		if err != nil {
			w.fatalf("a replica's answer was refused: %v", err)
		}
	case 8: // a forged sync
		i := in.pick(len(w.reps))
		os := OriginSync{Origin: w.origin(in), Watermark: in.u64(), GCFloor: in.u64(), Full: in.pick(2) == 0}
		for range in.pick(3) {
			s := w.session(in)
			s.Origin, s.Gateway = os.Origin, os.Origin.Node
			s.Seq, s.Version = in.u64(), in.u64()
			os.Sessions = append(os.Sessions, s)
		}
		for range in.pick(2) {
			os.Accounts = append(os.Accounts, Account{User: opsUsers[in.pick(len(opsUsers))],
				Override: Override(in.pick(int(maxOverrideEnum) + 1)), Stamp: Timestamp{Wall: int64(in.u64())},
				Writer: os.Origin.Node, Origin: os.Origin, Version: in.u64()})
		}
		sy := Sync{os}
		_, err := w.reps[i].ApplySync(sy, w.now)
		w.logf("forged sync to %s: %s watermark %d floor %d full %v, %d sessions, %d accounts: %v",
			w.reps[i].Self(), os.Origin, os.Watermark, os.GCFloor, os.Full, len(os.Sessions), len(os.Accounts), err)
		if err != nil && sy.Validate() == nil {
			w.fatalf("a valid sync was refused: %v", err)
		}
	case 9: // a node down or up
		i := in.pick(len(w.reps))
		node := opsNodes[in.pick(len(opsNodes))]
		if in.pick(2) == 0 {
			w.reps[i].SetNodeDown(node, w.now)
			w.logf("%s marks %s down", w.reps[i].Self(), node)
		} else {
			w.reps[i].SetNodeUp(node)
			w.logf("%s marks %s up", w.reps[i].Self(), node)
		}
	case 10: // time passes, GC runs
		w.now += int64(in.pick(8)) * int64(30*time.Second)
		for _, r := range w.reps {
			r.GC(w.now)
		}
		w.logf("GC at %v", time.Duration(w.now))
	case 12: // a local last-seen write
		i := in.pick(len(w.reps))
		user := opsUsers[in.pick(len(opsUsers))]
		d, err := w.reps[i].PutLastSeen(user, w.now)
		w.logf("last seen %s %s at %d: %v", w.reps[i].Self(), user, w.now, err)
		if err != nil {
			if w.now > 0 {
				w.fatalf("PutLastSeen: %v", err)
			}
			return
		}
		w.pool = append(w.pool, d)
		w.honest = append(w.honest, d)
	case 13: // a forged last-seen delta, or sync
		ls := LastSeen{User: opsUsers[in.pick(len(opsUsers))], At: int64(in.u64()), Origin: w.origin(in), Version: in.u64()}
		if in.pick(2) == 0 {
			i := in.pick(len(w.reps))
			sy := Sync{{Origin: ls.Origin, Watermark: in.u64(), Full: in.pick(2) == 0, LastSeen: []LastSeen{ls}}}
			_, err := w.reps[i].ApplySync(sy, w.now)
			w.logf("forged sync to %s: last seen %s v%d %s at %d: %v", w.reps[i].Self(), ls.Origin, ls.Version, ls.User, ls.At, err)
			if err != nil && sy.Validate() == nil {
				w.fatalf("a valid sync was refused: %v", err)
			}
			return
		}
		d := Delta{Since: in.u64(), LastSeen: &ls}
		if in.pick(2) == 0 && ls.Version > 0 {
			d.Since = ls.Version - 1
		}
		w.logf("forge last seen %s v%d since %d %s at %d", ls.Origin, ls.Version, d.Since, ls.User, ls.At)
		w.pool = append(w.pool, d)
	case 11: // a restart under a new incarnation, which then pulls
		i := in.pick(len(w.reps))
		old := w.reps[i].Self()
		inc := old.Incarnation + 1 + uint64(in.pick(4))
		if inc <= old.Incarnation {
			return // the incarnation would wrap
		}
		w.reps[i] = newOpsReplica(w.t, old.Node, inc)
		j := (i + 1) % len(w.reps)
		sy := w.reps[j].Diff(w.reps[i].Digest())
		_, err := w.reps[i].ApplySync(sy, w.now)
		w.logf("restart %s as #%d, pulls from %s: %v", old, inc, w.reps[j].Self(), err)
		if err != nil {
			w.fatalf("a replica's answer was refused: %v", err)
		}
	}
}

// check runs the invariants and every query on every replica.
func (w *opsWorld) check(step int) {
	w.t.Helper()
	for _, r := range w.reps {
		if err := r.CheckInvariants(); err != nil {
			w.fatalf("step %d: %s: %v\n%s", step, r.Self(), err, dumpReplica(r))
		}
		for _, u := range opsUsers {
			r.Presence(u, w.now)
			r.UserSessions(u)
			for _, d := range opsDevices {
				r.MaxEpoch(Key{u, d})
			}
		}
		for _, g := range opsGroups {
			r.GroupOnlineUsers(g)
		}
		for _, n := range opsNodes {
			r.NodeSessions(n)
		}
		r.Stats()
	}
}

// opsProjection is what a replica holds and shows.
func opsProjection(r *Replica) string {
	var b bytes.Buffer
	b.Write(canonicalSnapshot(r))
	for _, u := range opsUsers {
		fmt.Fprintf(&b, "|%+v", r.Presence(u, 0)) // one instant for every replica compared
	}
	for _, g := range opsGroups {
		fmt.Fprintf(&b, "|%s=%v", g, r.GroupOnlineUsers(g))
	}
	return b.String()
}

// converge feeds the honest deltas to observers in different orders and
// checks they agree.
func (w *opsWorld) converge() {
	w.t.Helper()
	if len(w.honest) == 0 {
		return
	}
	feed := func(name string, order []int) *Replica {
		r := newOpsObserver(w.t, name)
		for _, i := range order {
			if _, _, err := r.Apply(w.honest[i], 0); err != nil {
				w.fatalf("observer %s: honest delta %d: %v", name, i, err)
			}
			if err := r.CheckInvariants(); err != nil {
				w.fatalf("observer %s after honest delta %d: %v", name, i, err)
			}
		}
		return r
	}
	fwd := make([]int, len(w.honest))
	for i := range fwd {
		fwd[i] = i
	}
	rev := slices.Clone(fwd)
	slices.Reverse(rev)
	// Odd positions first, then even ones, then all again (duplicates).
	var mixed []int
	for i := 1; i < len(fwd); i += 2 {
		mixed = append(mixed, i)
	}
	for i := 0; i < len(fwd); i += 2 {
		mixed = append(mixed, i)
	}
	mixed = append(mixed, rev...)
	a, b, c := feed("o1", fwd), feed("o2", rev), feed("o3", mixed)
	want := opsProjection(a)
	if got := opsProjection(b); got != want {
		w.fatalf("observers fed the honest deltas forwards and backwards differ:\n%s\n%s", want, got)
	}
	if got := opsProjection(c); got != want {
		w.fatalf("observers fed the honest deltas forwards and mixed differ:\n%s\n%s", want, got)
	}
	// Halves joined by anti-entropy, both ways.
	h1, h2 := feed("o4", fwd[:len(fwd)/2]), feed("o5", rev[:len(rev)-len(fwd)/2])
	for _, pair := range [][2]*Replica{{h1, h2}, {h2, h1}} {
		sy := pair[1].Diff(pair[0].Digest())
		if _, err := pair[0].ApplySync(sy, 0); err != nil {
			w.fatalf("join: %v", err)
		}
		if err := pair[0].CheckInvariants(); err != nil {
			w.fatalf("after a join: %v", err)
		}
	}
	for _, r := range []*Replica{h1, h2} {
		if got := opsProjection(r); got != want {
			w.fatalf("observer %s joined by anti-entropy differs:\n%s\n%s", r.Self(), want, got)
		}
	}
}

func newOpsObserver(t *testing.T, name string) *Replica {
	r, err := NewReplica(Config{Self: Origin{Node: name, Incarnation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// replicaOpsSeeds are a few hand-made operation sequences: writes and
// deliveries, forged extremes, pulls, restarts and GC.
func replicaOpsSeeds() [][]byte {
	return [][]byte{
		// a writes u/d1 epoch 1, b writes u/d1 epoch 2, deliveries both ways
		{0, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 1, 0, 0, 0, 16, 0, 0, 0, 0, 5, 1, 0, 5, 0, 1, 7, 2, 0},
		// a forged alive of a at 2^64-1 with version 2^64-1, delivered to b and c
		{3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 2, 2, 2, 0, 5, 1, 0, 5, 2, 0, 7, 0, 1},
		// an account write, a forged account at epoch edges, a pull, a restart
		{2, 0, 0, 1, 1, 4, 1, 0, 3, 2, 4, 2, 2, 5, 0, 1, 7, 1, 0, 11, 0, 0, 10, 7},
		// a forged full sync with huge watermark and floor, then GC
		{0, 1, 1, 1, 0, 8, 0, 0, 0, 0, 8, 0, 0, 2, 2, 2, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 2, 1, 1, 10, 7, 9, 0, 1},
	}
}
