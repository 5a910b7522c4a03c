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

// The same, with times as the simulator makes them: never before the last
// event popped, a delay ahead that is zero, within one wheel bucket, within
// the wheel, or beyond it (the far heap), and often equal (ties across
// buckets and between the wheel and the heap).
func TestEventQueueOrderAcrossWheel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	delays := []int64{0, 1 << (wheelShift - 3), 1 << wheelShift, 1 << (wheelShift + 4), wheelSize << wheelShift, 4 * wheelSize << wheelShift}
	for round := range 40 {
		var q eventQueue
		var want []event
		var now int64
		for step := range 3000 {
			if q.len() == 0 || rng.IntN(2) == 0 {
				d := delays[rng.IntN(len(delays))]
				if d > 0 {
					d = rng.Int64N(d)
					if rng.IntN(2) == 0 {
						d -= d % 1000 // ties
					}
				}
				e := event{at: now + d, a: int32(step)}
				q.push(e)
				e.seq = q.seq
				want = append(want, e)
				continue
			}
			exp := slices.MinFunc(want, cmpEvents)
			want = slices.DeleteFunc(want, func(e event) bool { return e == exp })
			if at := q.peekAt(); at != exp.at {
				t.Fatalf("round %d step %d: peekAt %d, want %d", round, step, at, exp.at)
			}
			got := q.pop()
			if got != exp {
				t.Fatalf("round %d step %d: popped (at %d, seq %d), want (at %d, seq %d)", round, step, got.at, got.seq, exp.at, exp.seq)
			}
			now = got.at
			if q.len() != len(want) {
				t.Fatalf("round %d step %d: len %d, want %d", round, step, q.len(), len(want))
			}
		}
		for len(want) > 0 {
			exp := slices.MinFunc(want, cmpEvents)
			want = slices.DeleteFunc(want, func(e event) bool { return e == exp })
			if got := q.pop(); got != exp {
				t.Fatalf("round %d drain: popped (at %d, seq %d), want (at %d, seq %d)", round, got.at, got.seq, exp.at, exp.seq)
			}
		}
	}
}
