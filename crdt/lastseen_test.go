package crdt

import (
	"runtime"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func mustReplica(t *rapid.T, node string, inc uint64) *Replica {
	r, err := NewReplica(Config{Self: Origin{Node: node, Incarnation: inc}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func genLastSeen() *rapid.Generator[*LastSeen] {
	return rapid.Custom(func(t *rapid.T) *LastSeen {
		return &LastSeen{
			User:    "u",
			At:      rapid.Int64Range(1, 3).Draw(t, "at"),
			Origin:  Origin{Node: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "node"), Incarnation: rapid.Uint64Range(1, 2).Draw(t, "inc")},
			Version: rapid.Uint64Range(1, 3).Draw(t, "version"),
		}
	})
}

// TestCompareLastSeenLaws: the register's merge is a total order's max:
// commutative, associative and idempotent, and a later time always wins.
func TestCompareLastSeenLaws(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(genLastSeen(), 3, 4).Draw(t, "writes")
		type id struct {
			o Origin
			v uint64
		}
		sameWrites(xs, func(ls *LastSeen) any { return id{ls.Origin, ls.Version} })
		checkOrderLaws(t, xs, CompareLastSeen, func(a, b *LastSeen) bool { return a.Origin == b.Origin && a.Version == b.Version })
		for _, a := range xs {
			for _, b := range xs {
				if m := MergeLastSeen(*a, *b); m.At != max(a.At, b.At) {
					t.Fatalf("merge of %+v and %+v is %+v: not the later time", *a, *b, m)
				}
			}
		}
	})
}

// TestLastSeenReplicasConverge: replicas that receive the same register
// writes in any order, with duplicates, as deltas or in syncs, hold the
// write a reference max keeps, and show it while the user is offline.
func TestLastSeenReplicasConverge(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		writers := []*Replica{mustReplica(t, "a", 1), mustReplica(t, "b", 1)}
		var ds []Delta
		best := map[string]LastSeen{}
		for i := range rapid.IntRange(1, 12).Draw(t, "writes") {
			w := writers[rapid.IntRange(0, 1).Draw(t, "writer")]
			u := rapid.SampledFrom([]string{"u", "v"}).Draw(t, "user")
			at := int64(time.Hour) + rapid.Int64Range(0, 5).Draw(t, "at")
			d, err := w.PutLastSeen(u, at)
			if err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			ds = append(ds, d)
			best[u] = MergeLastSeen(best[u], *d.LastSeen)
		}
		want := make([]LastSeen, 0, len(best))
		for _, u := range []string{"u", "v"} {
			if ls, ok := best[u]; ok {
				want = append(want, ls)
			}
		}
		now := int64(time.Hour) + 10
		for obs := range 3 {
			r := mustReplica(t, "o", uint64(obs+1))
			order := rapid.Permutation(ds).Draw(t, "order")
			for _, d := range order {
				if rapid.Bool().Draw(t, "sync") {
					if _, err := r.ApplySync(Sync{{Origin: d.Origin(), LastSeen: []LastSeen{*d.LastSeen}}}, now); err != nil {
						t.Fatal(err)
					}
				} else if _, _, err := r.Apply(d, now); err != nil {
					t.Fatal(err)
				}
				if rapid.Bool().Draw(t, "dup") {
					if _, _, err := r.Apply(d, now); err != nil {
						t.Fatal(err)
					}
				}
				if err := r.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
			}
			// Anti-entropy from a writer brings nothing new.
			for _, w := range writers {
				if _, err := r.ApplySync(w.Diff(r.Digest()), now); err != nil {
					t.Fatal(err)
				}
			}
			if got := r.LastSeenSnapshot(); !slices.Equal(got, want) {
				t.Fatalf("observer holds %+v, want %+v", got, want)
			}
			for _, ls := range want {
				if p := r.Presence(ls.User, now); p.LastSeen != ls.At {
					t.Fatalf("presence of %s shows last seen %d, want %d", ls.User, p.LastSeen, ls.At)
				}
			}
		}
	})
}

// TestLastSeenOutlivesTombstones: the register stays after GC collects the
// session's tombstone, and goes after LastSeenRetention, when a late copy
// of the write is not taken again.
func TestLastSeenOutlivesTombstones(t *testing.T) {
	t.Parallel()
	const retention = 24 * time.Hour
	a := newTestReplica(t, "a", 1, Config{LastSeenRetention: retention})
	b := newTestReplica(t, "b", 1, Config{LastSeenRetention: retention})
	t0 := int64(time.Hour)
	s := Session{User: "u", Device: "d", ID: "s1", Epoch: 1, State: StateActive, ExpiresAt: t0 + int64(time.Minute)}
	d1, err := a.PutLocal(s, t0)
	if err != nil {
		t.Fatal(err)
	}
	s.State = StateDisconnected
	end := t0 + int64(time.Second)
	d2, err := a.PutLocal(s, end)
	if err != nil {
		t.Fatal(err)
	}
	d3, err := a.PutLastSeen("u", end)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []Delta{d1, d2, d3} {
		if _, _, err := b.Apply(d, end); err != nil {
			t.Fatal(err)
		}
	}
	if p := b.Presence("u", end); p.Online || p.LastSeen != end {
		t.Fatalf("after the end: %+v, want offline, last seen %d", p, end)
	}
	later := end + int64(DefaultTombstoneHorizon) + int64(time.Minute)
	for _, r := range []*Replica{a, b} {
		if st := r.GC(later); st.Tombstones != 1 || st.LastSeen != 0 {
			t.Fatalf("%s GC past the tombstone horizon: %+v", r.Self(), st)
		}
		if p := r.Presence("u", later); p.LastSeen != end {
			t.Fatalf("%s after tombstone GC: %+v, want last seen %d", r.Self(), p, end)
		}
	}
	gone := end + int64(retention)
	if p := b.Presence("u", gone); p.LastSeen != 0 {
		t.Fatalf("past retention, before GC: %+v, want no last seen", p)
	}
	if st := b.GC(gone); st.LastSeen != 1 {
		t.Fatalf("GC past retention: %+v", st)
	}
	if n := b.LastSeenRegisters(); n != 0 {
		t.Fatalf("%d registers after GC", n)
	}
	// A late copy is older than retention: not taken back.
	if _, err := b.ApplySync(Sync{{Origin: a.Self(), Full: true, Watermark: a.Digest()[0].Watermark, LastSeen: []LastSeen{*d3.LastSeen}}}, gone); err != nil {
		t.Fatal(err)
	}
	if n := b.LastSeenRegisters(); n != 0 {
		t.Fatalf("a late copy past retention was taken: %d registers", n)
	}
	if err := b.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestLastSeenOfFailedGateway: a gateway that fails writes nothing; the
// projection shows its users last seen when it started showing their
// sessions expired, without a write, and the register's later write wins
// once there is one.
func TestLastSeenOfFailedGateway(t *testing.T) {
	t.Parallel()
	a := newTestReplica(t, "a", 1, Config{})
	b := newTestReplica(t, "b", 1, Config{})
	t0 := int64(time.Hour)
	d, err := a.PutLocal(Session{User: "u", Device: "d", ID: "s1", Epoch: 1, State: StateActive, ExpiresAt: t0 + int64(time.Minute)}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Apply(d, t0); err != nil {
		t.Fatal(err)
	}
	down := t0 + int64(10*time.Second)
	if users := b.SetNodeDown("a", down); !slices.Equal(users, []string{"u"}) {
		t.Fatalf("down: users %v", users)
	}
	if p := b.Presence("u", down); p.Online || p.LastSeen != down {
		t.Fatalf("owner down: %+v, want offline, last seen %d", p, down)
	}
	if len(b.LastSeenSnapshot()) != 0 {
		t.Fatal("marking a gateway down wrote a register")
	}
	// The purge of the failed gateway's sessions keeps the time.
	purged := down + int64(DefaultPurgeHorizon) + int64(time.Minute)
	if st := b.GC(purged); st.Purged != 1 {
		t.Fatalf("purge: %+v", st)
	}
	if p := b.Presence("u", purged); p.LastSeen != down {
		t.Fatalf("after the purge: %+v, want last seen %d", p, down)
	}
	// A write of another gateway, later, wins.
	c := newTestReplica(t, "c", 1, Config{})
	ls, err := c.PutLastSeen("u", purged)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Apply(ls, purged); err != nil {
		t.Fatal(err)
	}
	if p := b.Presence("u", purged); p.LastSeen != purged {
		t.Fatalf("after a later write: %+v, want last seen %d", p, purged)
	}
	if err := b.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestLastSeenHeapPerRegister measures what a register costs a replica:
// the heap held per user with one, the user's name included (a name a
// session record already holds is shared).
func TestLastSeenHeapPerRegister(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap")
	}
	const users = 100_000
	r := newTestReplica(t, "a", 1, Config{})
	w := newTestReplica(t, "w", 1, Config{})
	ds := make([]Delta, users)
	for i := range ds {
		d, err := w.PutLastSeen("user-"+itoa(i), int64(time.Hour)+int64(i))
		if err != nil {
			t.Fatal(err)
		}
		ds[i] = d
	}
	before := heapAlloc()
	for _, d := range ds {
		if _, _, err := r.Apply(d, int64(2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	after := heapAlloc()
	if n := r.LastSeenRegisters(); n != users {
		t.Fatalf("%d registers held, want %d", n, users)
	}
	runtime.KeepAlive(ds)
	runtime.KeepAlive(w)
	runtime.KeepAlive(r)
	per := float64(after-before) / users
	t.Logf("last-seen register: %.0f bytes of heap per user (%d users, names of 9-10 bytes, map, slot, name table, origin log)", per, users)
	if per > 256 {
		t.Errorf("%.0f bytes per register, want at most 256", per)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestLastSeenCoalesceAfterClockStep: a gateway whose clock steps back
// between two ends of one user's sessions still writes a time that
// dominates the first, so a receiver of the coalesced batch (the second
// write alone, covering both) holds what the writer holds.
func TestLastSeenCoalesceAfterClockStep(t *testing.T) {
	t.Parallel()
	w := newTestReplica(t, "a", 1, Config{})
	t0 := int64(time.Hour)
	d1, err := w.PutLastSeen("u", t0)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := w.PutLastSeen("u", t0-int64(time.Second)) // the clock stepped back
	if err != nil {
		t.Fatal(err)
	}
	r := newTestReplica(t, "b", 1, Config{})
	for _, d := range Coalesce([]Delta{d1, d2}) {
		if _, _, err := r.Apply(d, t0); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := r.LastSeenSnapshot(), w.LastSeenSnapshot(); !slices.Equal(got, want) || got[0].At != t0 {
		t.Fatalf("receiver holds %+v, writer %+v", got, want)
	}
}
