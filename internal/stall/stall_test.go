package stall

import (
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

func TestDetector(t *testing.T) {
	d := NewDetector(100*time.Millisecond, 200*time.Millisecond)
	steps := []struct {
		at    int64
		stall time.Duration
	}{
		{0, 0},                               // first reading: nothing to compare
		{100 * ms, 0},                        // on time
		{350 * ms, 0},                        // 150ms late: under the threshold
		{450 * ms, 0},                        // on time
		{3450 * ms, 2900 * time.Millisecond}, // a 3s gap: 2.9s beyond one interval
		{3400 * ms, 0},                       // backwards: ignored
		{3550 * ms, 0},                       // on time again, from the 3450 reading
		{3950 * ms, 300 * time.Millisecond},
	}
	for _, s := range steps {
		if got := d.Observe(s.at); got != s.stall {
			t.Fatalf("Observe(%dms) = %v, want %v", s.at/ms, got, s.stall)
		}
	}
	if got, want := d.Total(), 3200*time.Millisecond; got != want {
		t.Fatalf("Total = %v, want %v", got, want)
	}
}
