package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A slotMap holds what a Go map holds after any sequence of sets and
// deletes, sparse (a value inline and a map), and dense past the switch.
func TestSlotMapMatchesMap(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		slots := 1 + rng.IntN(200)
		m := newSlotMap[int](slots)
		want := map[int32]int{}
		for op := range 400 {
			k := int32(rng.IntN(slots))
			// Mostly a few slots, as a queue's name index sees them,
			// sometimes many (which turns the map dense).
			if rng.IntN(4) != 0 {
				k %= 3
			}
			switch rng.IntN(3) {
			case 0, 1:
				m.set(k, op)
				want[k] = op
			default:
				m.del(k)
				delete(want, k)
			}
			if m.len() != len(want) {
				t.Fatalf("seed %d op %d: len %d, want %d", seed, op, m.len(), len(want))
			}
			for s := range int32(slots) {
				got, ok := m.get(s)
				w, wok := want[s]
				if ok != wok || got != w {
					t.Fatalf("seed %d op %d: slot %d holds %d,%v, want %d,%v", seed, op, s, got, ok, w, wok)
				}
			}
			if got, w := m.sortedSlots(), slices.Sorted(func(yield func(int32) bool) {
				for k := range want {
					if !yield(k) {
						return
					}
				}
			}); !slices.Equal(got, w) {
				t.Fatalf("seed %d op %d: slots %v, want %v", seed, op, got, w)
			}
		}
	}
}
