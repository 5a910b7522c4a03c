package crdt

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestVersionLogMatchesModel drives versionLog with random inserts, deletes
// and queries, in and out of order, against a map.
func TestVersionLogMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var l versionLog
		model := map[uint64]uint32{}
		maxV := rapid.SampledFrom([]uint64{80, 3 * smallLogMax}).Draw(t, "versions") // small, and past the slice
		for range rapid.IntRange(0, 300).Draw(t, "steps") {
			v := rapid.Uint64Range(1, maxV).Draw(t, "v")
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0, 1:
				u := rapid.Uint32Range(1, 3).Draw(t, "ref")
				l.ReplaceOrInsert(logItem{version: v, ref: u, kind: itemAccount})
				model[v] = u
			case 2:
				l.Delete(logItem{version: v})
				delete(model, v)
			}
			if l.Len() != len(model) {
				t.Fatalf("Len %d, model %d", l.Len(), len(model))
			}
			got, ok := l.Get(v)
			if u, want := model[v]; ok != want || (ok && got.ref != u) {
				t.Fatalf("Get(%d) = %+v %v, model %d %v", v, got, ok, u, want)
			}
			if rapid.IntRange(0, 9).Draw(t, "bulk") == 0 {
				// a burst of in-order inserts, to cross into the tree
				for range rapid.IntRange(0, 2*smallLogMax).Draw(t, "burst") {
					v := rapid.Uint64Range(1, maxV).Draw(t, "bv")
					l.ReplaceOrInsert(logItem{version: v, ref: 2, kind: itemSession})
					model[v] = 2
				}
			}
			from := rapid.Uint64Range(0, maxV+10).Draw(t, "from")
			var asc, ge, lt []uint64
			l.Ascend(func(it logItem) bool { asc = append(asc, it.version); return true })
			l.AscendGreaterOrEqual(from, func(it logItem) bool { ge = append(ge, it.version); return true })
			l.AscendLessThan(from, func(it logItem) bool { lt = append(lt, it.version); return true })
			var want, wantGE, wantLT []uint64
			for k := range model {
				want = append(want, k)
				if k >= from {
					wantGE = append(wantGE, k)
				} else {
					wantLT = append(wantLT, k)
				}
			}
			slices.Sort(want)
			slices.Sort(wantGE)
			slices.Sort(wantLT)
			if !slices.Equal(asc, want) || !slices.Equal(ge, wantGE) || !slices.Equal(lt, wantLT) {
				t.Fatalf("ascend %v / %v / %v, want %v / %v / %v", asc, ge, lt, want, wantGE, wantLT)
			}
			mx, ok := l.Max()
			if ok != (len(want) > 0) || (ok && mx.version != want[len(want)-1]) {
				t.Fatalf("Max = %+v %v, want %v", mx, ok, want)
			}
		}
	})
}
