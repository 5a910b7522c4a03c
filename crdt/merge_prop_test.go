package crdt

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// history runs a small cluster of gateways (writers only, no GC) and returns
// every delta they wrote, in order. The gateways exchange deltas and sync
// among themselves, so the history holds reconnects on other gateways, stale
// epochs, same-epoch ties and new incarnations, as a real one would.
func history(t *rapid.T) []Delta {
	w := newWorld(t, rapid.IntRange(2, 3).Draw(t, "writers"), 0)
	w.noGC = true
	for range rapid.IntRange(1, 50).Draw(t, "steps") {
		w.step()
	}
	if len(w.produced) == 0 {
		w.connect(0, Key{"u", "d1"}, 0)
	}
	return w.produced
}

// observer returns a fresh replica that writes nothing of its own.
func observer(t *rapid.T, name string) *Replica {
	r, err := NewReplica(Config{Self: Origin{Node: name, Incarnation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// feed applies deltas to r in the given order, checking invariants after
// each.
func feed(t *rapid.T, r *Replica, ds []Delta, order []int) {
	for _, i := range order {
		if _, _, err := r.Apply(ds[i], 0); err != nil {
			t.Fatalf("apply %s v%d: %v", ds[i].Origin(), ds[i].Version(), err)
		}
		if err := r.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", r.Self(), err)
		}
	}
}

// join makes a pull from b, through the codec, and returns a.
func join(t *rapid.T, a, b *Replica) *Replica {
	dg, err := DecodeDigest(must(AppendDigest(nil, a.Digest())))
	if err != nil {
		t.Fatal(err)
	}
	sy, err := DecodeSync(must(AppendSync(nil, b.Diff(dg))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ApplySync(sy, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckInvariants(); err != nil {
		t.Fatalf("%s after a pull from %s: %v", a.Self(), b.Self(), err)
	}
	return a
}

// indices returns 0, 1, ..., n-1: the positions of n deltas, in order.
func indices(n int) []int {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	return idx
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// projection describes what a replica shows: held records, each user's
// presence and each group's online users.
func projection(r *Replica) string {
	var b bytes.Buffer
	b.Write(canonicalSnapshot(r))
	for _, u := range propUsers {
		fmt.Fprintf(&b, "|%+v", r.Presence(u, 0))
	}
	for _, g := range propGroups {
		fmt.Fprintf(&b, "|%s=%v", g, r.GroupOnlineUsers(g))
	}
	return b.String()
}

// TestReplicaMergeLaws: merging whole replicas is commutative, associative
// and idempotent. Replicas fed the same deltas in any order, with
// duplicates, hold and show the same thing; so do replicas fed parts of them
// and then joined by anti-entropy in any grouping.
func TestReplicaMergeLaws(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ds := history(t)
		all := indices(len(ds))
		// Any order, with duplicates.
		p1 := rapid.Permutation(all).Draw(t, "order1")
		p2 := append(rapid.Permutation(all).Draw(t, "order2"), rapid.SliceOfN(rapid.SampledFrom(append(all, 0)), 0, 10).Draw(t, "duplicates")...)
		x1, x2 := observer(t, "x"), observer(t, "y")
		feed(t, x1, ds, p1)
		feed(t, x2, ds, p2)
		want := projection(x1)
		if got := projection(x2); got != want {
			t.Fatalf("two orders differ:\n%s\n%s", dumpReplica(x1), dumpReplica(x2))
		}
		// Idempotent: pulling from an equal replica changes nothing.
		if got := projection(join(t, x1, x2)); got != want {
			t.Fatalf("a pull from an equal replica changed it:\n%s", dumpReplica(x1))
		}
		// Split into three parts; join them in two groupings and both
		// orders.
		part := rapid.SliceOfN(rapid.IntRange(0, 2), len(ds), len(ds)).Draw(t, "parts")
		build := func(name string, p int) *Replica {
			r := observer(t, name)
			var idx []int
			for i, q := range part {
				if q == p {
					idx = append(idx, i)
				}
			}
			feed(t, r, ds, rapid.Permutation(idx).Draw(t, "part-order"))
			return r
		}
		left := join(t, join(t, build("a", 0), build("b", 1)), build("c", 2))
		right := join(t, build("a", 0), join(t, build("b", 1), build("c", 2)))
		swapped := join(t, join(t, build("c", 2), build("b", 1)), build("a", 0))
		for _, r := range []*Replica{left, right, swapped} {
			if got := projection(r); got != want {
				t.Fatalf("joined parts differ from the whole:\n%s\nwhole:\n%s", dumpReplica(r), dumpReplica(x1))
			}
		}
	})
}

// TestCoalesce: coalescing a run of one origin's deltas keeps the last
// write of each key and re-chains the coverage exactly: a replica that
// receives the coalesced batch ends up like one that received every delta,
// watermark included, and one that loses some of the coalesced deltas never
// claims more than it has, so anti-entropy with the writer repairs it.
func TestCoalesce(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ds := history(t)
		// A contiguous run of one origin's deltas.
		o := ds[rapid.IntRange(0, len(ds)-1).Draw(t, "origin-of")].Origin()
		var own []Delta
		for _, d := range ds {
			if d.Origin() == o {
				own = append(own, d)
			}
		}
		lo := rapid.IntRange(0, len(own)-1).Draw(t, "from")
		hi := rapid.IntRange(lo+1, len(own)).Draw(t, "to")
		prefix, batch := own[:lo], own[lo:hi]
		out := Coalesce(slices.Clone(batch))
		if len(out) > len(batch) {
			t.Fatalf("coalesce grew %d deltas to %d", len(batch), len(out))
		}
		keys := map[string]bool{}
		for i, d := range out {
			if err := d.Validate(); err != nil {
				t.Fatalf("coalesced delta %d invalid: %v", i, err)
			}
			k := fmt.Sprintf("%v/%s", d.Account != nil, d.User())
			if d.Session != nil {
				k += "/" + d.Session.Device
			}
			if keys[k] {
				t.Fatalf("coalesced batch holds two writes of %s", k)
			}
			keys[k] = true
			if i > 0 && d.Since != out[i-1].Version() {
				t.Fatalf("coalesced delta %d: since %d, previous version %d", i, d.Since, out[i-1].Version())
			}
		}
		if out[0].Since != batch[0].Since || out[len(out)-1].Version() != batch[len(batch)-1].Version() {
			t.Fatalf("coalesced coverage (%d, %d], batch (%d, %d]", out[0].Since, out[len(out)-1].Version(),
				batch[0].Since, batch[len(batch)-1].Version())
		}
		full, co := observer(t, "x"), observer(t, "y")
		feed(t, full, prefix, indices(len(prefix)))
		feed(t, co, prefix, indices(len(prefix)))
		feed(t, full, batch, indices(len(batch)))
		feed(t, co, out, rapid.Permutation(indices(len(out))).Draw(t, "coalesced-order"))
		if projection(full) != projection(co) || full.Watermark(o) != co.Watermark(o) {
			t.Fatalf("coalesced (watermark %d):\n%s\nevery delta (watermark %d):\n%s",
				co.Watermark(o), dumpReplica(co), full.Watermark(o), dumpReplica(full))
		}
		// Lose some of the coalesced deltas: the watermark claims only what
		// was received; a pull from a replica holding the batch repairs it.
		lossy := observer(t, "z")
		feed(t, lossy, prefix, indices(len(prefix)))
		kept := rapid.SliceOfNDistinct(rapid.IntRange(0, len(out)-1), 0, len(out), rapid.ID[int]).Draw(t, "kept")
		feed(t, lossy, out, kept)
		received := map[uint64]bool{}
		for _, i := range kept {
			received[out[i].Version()] = true
		}
		for i, d := range out {
			if !received[d.Version()] && lossy.Watermark(o) >= d.Version() {
				t.Fatalf("watermark %d covers coalesced delta %d (v%d), never received", lossy.Watermark(o), i, d.Version())
			}
		}
		if projection(join(t, lossy, full)) != projection(full) {
			t.Fatalf("anti-entropy did not repair the lost deltas:\n%s\nwant:\n%s", dumpReplica(lossy), dumpReplica(full))
		}
	})
}

// TestApplyViaIsApply: applying through OriginRefs gives what Apply gives,
// whatever the refs hold. Two observers get the same deltas in the same
// order, one through Apply and one through ApplyVia with a ref drawn from a
// small pool, which a third replica also fills now and then: a ref often
// holds another origin's state, or another replica's. Every step must
// report the same result, and the two observers must end up the same; and
// WatermarkVia through any ref must answer what Watermark answers.
func TestApplyViaIsApply(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		ds := history(t)
		all := indices(len(ds))
		order := append(rapid.Permutation(all).Draw(t, "order"), rapid.SliceOfN(rapid.SampledFrom(all), 0, 10).Draw(t, "duplicates")...)
		plain, via, other := observer(t, "x"), observer(t, "y"), observer(t, "z")
		refs := make([]OriginRef, rapid.IntRange(1, 3).Draw(t, "refs"))
		pick := func() *OriginRef { return &refs[rapid.IntRange(0, len(refs)-1).Draw(t, "ref")] }
		for step, i := range order {
			now := int64(step)
			if rapid.IntRange(0, 3).Draw(t, "other") == 0 {
				if _, _, err := other.ApplyVia(pick(), ds[i], now); err != nil {
					t.Fatal(err)
				}
			}
			c1, d1, err1 := plain.Apply(ds[i], now)
			c2, d2, err2 := via.ApplyVia(pick(), ds[i], now)
			if c1 != c2 || !slices.Equal(d1, d2) || (err1 == nil) != (err2 == nil) {
				t.Fatalf("step %d (%s v%d): Apply gave %v %v %v, ApplyVia %v %v %v",
					step, ds[i].Origin(), ds[i].Version(), c1, d1, err1, c2, d2, err2)
			}
			if err := via.CheckInvariants(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			// WatermarkVia is Watermark, whatever the ref holds.
			o := ds[rapid.SampledFrom(all).Draw(t, "asked")].Origin()
			if got, want := via.WatermarkVia(pick(), o), via.Watermark(o); got != want {
				t.Fatalf("step %d: WatermarkVia(%s) %d, Watermark %d", step, o, got, want)
			}
		}
		if got, want := projection(via), projection(plain); got != want {
			t.Fatalf("through refs:\n%s\nplain:\n%s", dumpReplica(via), dumpReplica(plain))
		}
	})
}
