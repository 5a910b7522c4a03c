package crdt

import (
	"fmt"
	"maps"
	"testing"

	"pgregory.net/rapid"
)

// TestStrMapMatchesMap runs random puts, deletes and lookups on a strMap and
// a Go map side by side. Keys come from a small set, so tables wrap around,
// probe runs cross each other, and deletions must shift the runs back for
// every key to stay findable.
func TestStrMapMatchesMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newStrMap[int]()
		ref := map[string]int{}
		keys := rapid.IntRange(1, 60).Draw(t, "keys")
		key := func() string { return fmt.Sprintf("k%d", rapid.IntRange(0, keys-1).Draw(t, "key")) }
		for step := range rapid.IntRange(1, 400).Draw(t, "steps") {
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				k := key()
				m.put(k, step)
				ref[k] = step
			case 1:
				k := key()
				m.delete(k)
				delete(ref, k)
			default:
				k := key()
				p := m.ref(k)
				want, wantOK := ref[k]
				if (p != nil) != wantOK || p != nil && *p != want {
					t.Fatalf("ref %s = %v; want %d, %v", k, p, want, wantOK)
				}
			}
			if m.len() != len(ref) {
				t.Fatalf("len %d, want %d", m.len(), len(ref))
			}
			if all := maps.Collect(m.all()); !maps.Equal(all, ref) {
				t.Fatalf("holds %v, want %v", all, ref)
			}
			for k, v := range ref {
				if got := m.get(k); got != v {
					t.Fatalf("get %s = %d, want %d (a deletion lost its probe run?)", k, got, v)
				}
			}
		}
	})
}
