package crdt

import (
	"fmt"
	"math"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// Laws of the two merge orders. Records are drawn from small domains so that
// ties on every field before the last tiebreaks are common.

// genSession draws a session record of key u/d. Its (Origin, Version)
// identifies the write; sessionLaws makes records that share it equal.
func genSession() *rapid.Generator[*Session] {
	return rapid.Custom(func(t *rapid.T) *Session {
		gw := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "gateway")
		return &Session{
			User: "u", Device: "d",
			ID:        rapid.SampledFrom([]string{"s1", "s2"}).Draw(t, "id"),
			Epoch:     rapid.Uint64Range(1, 3).Draw(t, "epoch"),
			Seq:       rapid.Uint64Range(1, 3).Draw(t, "seq"),
			Gateway:   gw,
			State:     State(rapid.IntRange(0, int(StateExpired)).Draw(t, "state")),
			Status:    Status(rapid.IntRange(0, int(StatusBusy)).Draw(t, "status")),
			Groups:    NormalizeGroups(rapid.SliceOfN(rapid.SampledFrom([]string{"g1", "g2"}), 0, 2).Draw(t, "groups")),
			ExpiresAt: rapid.Int64Range(0, 3).Draw(t, "expires"),
			Meta:      rapid.SampledFrom([]string{"", `{"a":1}`}).Draw(t, "meta"),
			Info:      rapid.SampledFrom([]string{"", `{"n":"u"}`}).Draw(t, "info"),
			Origin:    Origin{Node: gw, Incarnation: rapid.Uint64Range(1, 2).Draw(t, "inc")},
			Version:   rapid.Uint64Range(1, 3).Draw(t, "version"),
		}
	})
}

func genAccount() *rapid.Generator[*Account] {
	return rapid.Custom(func(t *rapid.T) *Account {
		w := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "writer")
		return &Account{
			User:                "u",
			Override:            Override(rapid.IntRange(0, int(maxOverrideEnum)).Draw(t, "override")),
			AuthoritativeDevice: rapid.SampledFrom([]string{"", "d1", "d2"}).Draw(t, "auth"),
			Text:                rapid.SampledFrom([]string{"", "t1", "t2"}).Draw(t, "text"),
			Emoji:               rapid.SampledFrom([]string{"", "🍔"}).Draw(t, "emoji"),
			Until:               rapid.Int64Range(0, 2).Draw(t, "until"),
			Stamp: Timestamp{Wall: rapid.Int64Range(1, 3).Draw(t, "wall"),
				Logical: rapid.Uint32Range(0, 2).Draw(t, "logical")},
			Writer:  w,
			Origin:  Origin{Node: w, Incarnation: rapid.Uint64Range(1, 2).Draw(t, "inc")},
			Version: rapid.Uint64Range(1, 3).Draw(t, "version"),
		}
	})
}

// checkOrderLaws checks that cmp is a total order on xs (reflexive,
// antisymmetric, transitive), that it ties only on the same write, and that
// merge = "keep the greater" is commutative, associative and idempotent.
func checkOrderLaws[T any](t *rapid.T, xs []*T, cmp func(a, b *T) int, sameWrite func(a, b *T) bool) {
	merge := func(a, b *T) *T {
		if cmp(a, b) >= 0 {
			return a
		}
		return b
	}
	for _, a := range xs {
		if cmp(a, a) != 0 {
			t.Fatalf("not reflexive: %+v", *a)
		}
		if !reflect.DeepEqual(merge(a, a), a) {
			t.Fatalf("merge not idempotent on %+v", *a)
		}
		for _, b := range xs {
			ab, ba := cmp(a, b), cmp(b, a)
			if ab != -ba || ab < -1 || ab > 1 {
				t.Fatalf("not antisymmetric: cmp(a,b)=%d cmp(b,a)=%d\na=%+v\nb=%+v", ab, ba, *a, *b)
			}
			if (ab == 0) != sameWrite(a, b) {
				t.Fatalf("cmp=%d but same write=%v\na=%+v\nb=%+v", ab, sameWrite(a, b), *a, *b)
			}
			if !reflect.DeepEqual(*merge(a, b), *merge(b, a)) {
				t.Fatalf("merge not commutative\na=%+v\nb=%+v", *a, *b)
			}
			for _, c := range xs {
				if ab <= 0 && cmp(b, c) <= 0 && cmp(a, c) > 0 {
					t.Fatalf("not transitive\na=%+v\nb=%+v\nc=%+v", *a, *b, *c)
				}
				l, r := merge(merge(a, b), c), merge(a, merge(b, c))
				if !reflect.DeepEqual(*l, *r) {
					t.Fatalf("merge not associative\na=%+v\nb=%+v\nc=%+v", *a, *b, *c)
				}
			}
		}
	}
}

// sameWrites makes records that share an identity equal in every field, as
// they are for real: one origin writes one record per version.
func sameWrites[T any](xs []*T, id func(*T) any) {
	first := map[any]*T{}
	for i, x := range xs {
		if f, ok := first[id(x)]; ok {
			c := *f
			xs[i] = &c
			continue
		}
		first[id(x)] = x
	}
}

func TestCompareSessionsLaws(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(genSession(), 3, 4).Draw(t, "sessions")
		type id struct {
			o Origin
			v uint64
		}
		sameWrites(xs, func(s *Session) any { return id{s.Origin, s.Version} })
		checkOrderLaws(t, xs, CompareSessions, func(a, b *Session) bool { return a.Origin == b.Origin && a.Version == b.Version })
		for _, a := range xs {
			for _, b := range xs {
				// A lower epoch never beats a higher one.
				if a.Epoch < b.Epoch && CompareSessions(a, b) >= 0 {
					t.Fatalf("epoch %d beats epoch %d", a.Epoch, b.Epoch)
				}
				// A terminal record is never beaten by an active one of
				// its epoch or an older one.
				if a.State.Terminal() && b.State == StateActive && b.Epoch <= a.Epoch && CompareSessions(b, a) >= 0 {
					t.Fatalf("active %+v revives terminal %+v", *b, *a)
				}
			}
		}
	})
}

func TestCompareAccountsLaws(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		xs := rapid.SliceOfN(genAccount(), 3, 4).Draw(t, "accounts")
		type id struct {
			o Origin
			v uint64
		}
		sameWrites(xs, func(a *Account) any { return id{a.Origin, a.Version} })
		checkOrderLaws(t, xs, CompareAccounts, func(a, b *Account) bool { return a.Origin == b.Origin && a.Version == b.Version })
		for _, a := range xs {
			for _, b := range xs {
				if a.Stamp.Compare(b.Stamp) < 0 && CompareAccounts(a, b) >= 0 {
					t.Fatalf("stamp %v beats later stamp %v", a.Stamp, b.Stamp)
				}
			}
		}
	})
}

// TestHLCMonotonic: every reading, local or after observing a remote one, is
// strictly greater than every reading before it and than the remote stamp,
// even when the remote stamp's logical counter is at its limit.
func TestHLCMonotonic(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		var c HLC
		var last Timestamp
		for i := range rapid.IntRange(1, 30).Draw(t, "n") {
			wall := rapid.Int64Range(0, 5).Draw(t, fmt.Sprint("wall", i))
			var ts Timestamp
			if rapid.Bool().Draw(t, fmt.Sprint("observe", i)) {
				remote := Timestamp{Wall: rapid.Int64Range(0, 6).Draw(t, fmt.Sprint("rwall", i)),
					// a peer's counter can hold any value, its limit included
					Logical: rapid.SampledFrom([]uint32{0, 1, 2, 3, math.MaxUint32 - 1, math.MaxUint32}).Draw(t, fmt.Sprint("rlogical", i))}
				ts = c.Observe(wall, remote)
				if ts.Compare(remote) <= 0 {
					t.Fatalf("observe(%d, %v) = %v, not after the remote stamp", wall, remote, ts)
				}
			} else {
				ts = c.Now(wall)
			}
			if ts.Compare(last) <= 0 || ts.Wall < wall {
				t.Fatalf("reading %v after %v at wall %d", ts, last, wall)
			}
			if c.Last() != ts {
				t.Fatalf("Last() = %v, want %v", c.Last(), ts)
			}
			last = ts
		}
	})
}
