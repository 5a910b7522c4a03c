package main

import (
	"runtime"
	"testing"

	"go.uber.org/zap"
)

// The agent keeps one P more than it runs pollers, so that a poller
// blocked in epoll_wait never holds the only one.
func TestSchedulerSlotsKeepAPForOtherGoroutines(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(before) })
	t.Setenv("GOMAXPROCS", "")

	pollers := schedulerSlots(zap.NewNop())
	if pollers != before || runtime.GOMAXPROCS(0) != before+1 {
		t.Fatalf("%d pollers and GOMAXPROCS %d, want %d and %d", pollers, runtime.GOMAXPROCS(0), before, before+1)
	}

	// GOMAXPROCS from the environment is the operator's: kept, with a P
	// to spare when there are two or more.
	for _, c := range []struct{ procs, pollers int }{{4, 3}, {2, 1}, {1, 1}} {
		runtime.GOMAXPROCS(c.procs)
		t.Setenv("GOMAXPROCS", "set")
		if got := schedulerSlots(zap.NewNop()); got != c.pollers || runtime.GOMAXPROCS(0) != c.procs {
			t.Errorf("GOMAXPROCS=%d in the environment: %d pollers, GOMAXPROCS now %d; want %d and %d",
				c.procs, got, runtime.GOMAXPROCS(0), c.pollers, c.procs)
		}
	}
}
