package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The event queue pops events by time, and events of one time in the order
// they were pushed, under any interleaving of pushes and pops: the
// determinism of every run rests on it.
func TestEventQueueOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 50 {
		var q eventQueue
		var want []event // pushed, not yet popped
		for step := range 2000 {
			if q.len() == 0 || rng.IntN(3) > 0 {
				// Few distinct times, so ties are common.
				e := event{at: rng.Int64N(50), a: int32(step)}
				q.push(e)
				e.seq = q.seq
				want = append(want, e)
				continue
			}
			min := slices.MinFunc(want, cmpEvents)
			i := slices.Index(want, min)
			exp := want[i]
			want = slices.Delete(want, i, i+1)
			if got := q.pop(); got != exp {
				t.Fatalf("round %d step %d: popped (at %d, seq %d), want (at %d, seq %d)", round, step, got.at, got.seq, exp.at, exp.seq)
			}
		}
		for len(want) > 0 {
			exp := slices.MinFunc(want, cmpEvents)
			want = slices.DeleteFunc(want, func(e event) bool { return e == exp })
			if got := q.pop(); got != exp {
				t.Fatalf("round %d drain: popped (at %d, seq %d), want (at %d, seq %d)", round, got.at, got.seq, exp.at, exp.seq)
			}
		}
		if q.len() != 0 {
			t.Fatalf("round %d: %d events left", round, q.len())
		}
	}
}

func cmpEvents(a, b event) int {
	switch {
	case less(&a, &b):
		return -1
	case less(&b, &a):
		return 1
	}
	return 0
}
