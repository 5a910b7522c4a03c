package sim

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// BenchmarkRun reports the simulator's speed as nodes×events per second of
// wall time: how many node-level events (packets handled, timers fired) it
// gets through. 1,000 nodes, epidemic, 200 changes over 10 simulated seconds.
func BenchmarkRun(b *testing.B) {
	for _, nodes := range []int{100, 1000} {
		b.Run(fmtNodes(nodes), func(b *testing.B) { benchScenario(b, nodes, 200, 10*time.Second) })
	}
}

func fmtNodes(n int) string { return "nodes=" + strconv.Itoa(n) }

// BenchmarkScale10k is the simulator's largest run: 10,000 nodes, 1,000 client
// actions over the first 10 of 20 simulated seconds (rollcall sim --nodes
// 10000 --changes 1000 --duration 20s). One iteration takes about a minute:
// run it by name, go test ./sim -run '^$' -bench Scale10k -benchtime 1x. It
// sets the GC as rollcall sim does (TuneGC).
func BenchmarkScale10k(b *testing.B) {
	defer TuneGC(10000)()
	benchScenario(b, 10000, 1000, 20*time.Second)
}

// benchScenario runs the default scenario at a size and reports events,
// nodes×events and simulated node-seconds per wall second.
func benchScenario(b *testing.B, nodes, changes int, duration time.Duration) {
	cfg := DefaultConfig()
	cfg.Nodes = nodes
	cfg.Changes = changes
	cfg.Duration = duration
	var events uint64
	start := time.Now()
	for range b.N {
		r, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		events += r.Counters.Events
	}
	secs := time.Since(start).Seconds()
	b.ReportMetric(float64(events)/secs, "events/s")
	b.ReportMetric(float64(events)*float64(nodes)/secs, "nodes×events/s")
	b.ReportMetric(float64(b.N)*duration.Seconds()*float64(nodes)/secs, "node-seconds/s")
}
