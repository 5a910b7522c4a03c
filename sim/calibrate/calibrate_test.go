package calibrate

import (
	"context"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/dissem"
)

// TestCalibration runs small calibrations (6 real nodes) in both modes and
// checks what does not depend on the machine's speed or load: that both
// sides ran the same scenario, that the simulator's side is a function of
// what the report records, that the copies the real cluster sent are the
// ones its protocol dictates, and the shape of the measured write delays
// and of the pooling. Timings are not checked here: on a shared 2-core
// machine they measure the load as much as the protocol. They are reported
// by BenchmarkCalibration and `make calibrate`. Skipped with -short.
func TestCalibration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real memberlist clusters")
	}
	base := Scenario{Nodes: 6, Changes: 20, Window: 500 * time.Millisecond, Settle: 500 * time.Millisecond,
		Observe: 500 * time.Millisecond, Crashes: 1, Seed: 5, Host: true, Warmup: 8}

	t.Run("eager", func(t *testing.T) {
		sc := base
		sc.EagerThreshold = 64
		var seeds []uint64
		reports, err := RunPooled(context.Background(), sc, 2, func(_ int, seed uint64) { seeds = append(seeds, seed) })
		if err != nil {
			t.Fatal(err)
		}
		if len(reports) != 2 || !slices.Equal(seeds, []uint64{5, 6}) {
			t.Fatalf("%d reports, seeds %v: want 2 runs, seeds 5 and 6", len(reports), seeds)
		}
		for i, r := range reports {
			if r.Scenario.Seed != seeds[i] {
				t.Errorf("report %d has seed %d, want %d", i, r.Scenario.Seed, seeds[i])
			}
			checkReport(t, r)
		}
		checkPooling(t, sc, reports)
	})
	t.Run("epidemic", func(t *testing.T) {
		sc := base
		sc.EagerThreshold = 4
		r, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		checkReport(t, r)
		if k := len(r.WriteDelays); k > sc.Warmup {
			t.Errorf("%d write delays measured from %d warm-up writes", k, sc.Warmup)
		}
	})
}

// checkReport checks one report of a run of r.Scenario for what is exact.
func checkReport(t *testing.T, r *Report) {
	t.Helper()
	sc := r.Scenario
	n := sc.Nodes
	mode := dissem.ChooseMode(n, sc.EagerThreshold)

	// Both sides ran the scenario: its nodes, its mode, its writes and
	// the same nodes crashed in the same order.
	var victims []int
	for k := range sc.Crashes {
		victims = append(victims, n-1-k)
	}
	want := ran{nodes: n, writes: sc.Changes, mode: mode.String(), crashed: victims}
	for side, got := range map[string]ran{"real": r.Real.ran, "sim": r.Sim.ran} {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the %s side ran %+v, want the scenario's %+v", mode, side, got, want)
		}
	}

	// The simulator's side is reproduced exactly from the scenario and
	// the write delays the report records: same seeds, same result.
	again, err := runSim(context.Background(), sc, r.WriteDelays)
	if err != nil {
		t.Fatal(err)
	}
	ind, err := runSim(context.Background(), sc, nil)
	if err != nil {
		t.Fatal(err)
	}
	again.IndependentP50, again.IndependentP99 = ind.ConvP50, ind.ConvP99
	if !reflect.DeepEqual(*again, r.Sim) {
		t.Errorf("%s: the simulator, run again on the same scenario and write delays, gave\n%+v\nnot the report's\n%+v", mode, *again, r.Sim)
	}
	if r.Sim.Converged != 1 {
		t.Errorf("%s: %.3f of the simulated changes reached every live node, want all", mode, r.Sim.Converged)
	}

	// The copies. An owner flushes each delta once (after coalescing), to
	// every other live member in eager mode and to 3 of them in epidemic
	// mode; gossip counts those sends in Stats.DeltaCopies. Before any
	// crash every member is live to every owner unless a lease expired, a
	// member was declared failed or a send failed (Disturbed, which a
	// starved machine can cause): then a flush may reach fewer.
	a := r.Real.audit
	t.Logf("%s copy audit: %+v", mode, a)
	if a.Deltas == 0 {
		t.Fatalf("%s: no delta was sent", mode)
	}
	if a.MaxPeers > n-1 {
		t.Errorf("%s: an owner sent a delta to %d peers, more than the %d others", mode, a.MaxPeers, n-1)
	}
	seeds := min(3, n-1)
	switch mode {
	case dissem.ModeEager:
		// Straight to every member, nothing relayed or repeated.
		if a.Relayed != 0 || a.Repeats != 0 {
			t.Errorf("eager: %d relayed and %d repeated copies, want none", a.Relayed, a.Repeats)
		}
		if a.Disturbed == 0 {
			if a.MinPeers != n-1 || a.Own != a.Deltas*(n-1) || uint64(a.Own) != a.Direct {
				t.Errorf("eager: %d deltas to %d-%d peers each, %d copies, gossip counted %d: want each to all %d others, %d copies",
					a.Deltas, a.MinPeers, a.MaxPeers, a.Own, a.Direct, n-1, a.Deltas*(n-1))
			}
		} else if a.Direct > uint64(a.Deltas*(n-1)) {
			t.Errorf("eager: gossip counted %d direct copies of %d deltas, more than %d others each", a.Direct, a.Deltas, n-1)
		}
		// In the simulator every copy is direct, at most one per other node.
		if r.Sim.CopiesPerChange != r.Sim.directCopies || r.Sim.CopiesPerChange > float64(n-1)+1e-9 {
			t.Errorf("eager: the simulator sent %.3f copies per change, %.3f of them direct: want all direct, at most %d",
				r.Sim.CopiesPerChange, r.Sim.directCopies, n-1)
		}
	case dissem.ModeEpidemic:
		// Each flushed delta seeds 3 members directly; the owner's later
		// piggybacked copies and the relays come on top.
		if a.Disturbed == 0 {
			if a.Direct != uint64(a.Deltas*seeds) || a.Own < int(a.Direct) {
				t.Errorf("epidemic: gossip counted %d direct copies of %d deltas (want %d each), the owners sent %d in all",
					a.Direct, a.Deltas, seeds, a.Own)
			}
		} else if a.Direct > uint64(a.Deltas*seeds) {
			t.Errorf("epidemic: gossip counted %d direct copies of %d deltas, more than %d each", a.Direct, a.Deltas, seeds)
		}
		if r.Sim.directCopies > float64(seeds)+1e-9 || r.Sim.CopiesPerChange < r.Sim.directCopies {
			t.Errorf("epidemic: the simulator sent %.3f copies per change, %.3f direct: want at most %d direct",
				r.Sim.CopiesPerChange, r.Sim.directCopies, seeds)
		}
	}

	// The measured write delays: one per flushed warm-up write; eager
	// writes carry a hop per receiver, reached or not, epidemic ones none
	// (later receivers got the write from relays).
	// (How many of them: the callers, which know how many runs were
	// pooled.)
	if len(r.WriteDelays) == 0 {
		t.Errorf("%s: no write delay measured", mode)
	}
	hops := map[dissem.Mode]int{dissem.ModeEager: n - 1, dissem.ModeEpidemic: 0}[mode]
	for _, w := range r.WriteDelays {
		if len(w.Hops) != hops {
			t.Errorf("%s: a measured write has %d hops, want %d", mode, len(w.Hops), hops)
			break
		}
	}
}

// checkPooling checks that RunPooled gave every run's simulation the
// warm-up writes of all the runs, and that Pooled takes the real
// percentiles over all their changes.
func checkPooling(t *testing.T, sc Scenario, reports []*Report) {
	t.Helper()
	for i, r := range reports {
		// Each warm-up makes Warmup writes; a write whose owner never
		// flushed is left out, so all but a few must be there.
		if k := len(r.WriteDelays); k <= sc.Warmup || k > len(reports)*sc.Warmup {
			t.Errorf("report %d replays %d warm-up writes, want those of all %d runs (%d < n <= %d)", i, k, len(reports), sc.Warmup, len(reports)*sc.Warmup)
		}
		if !reflect.DeepEqual(r.WriteDelays, reports[0].WriteDelays) {
			t.Errorf("reports 0 and %d replay different writes, want the same pool", i)
		}
	}
	real, _ := Pooled(reports)
	want := 0
	for _, r := range reports {
		want += len(r.Real.conv)
	}
	if len(real.conv) != want || want == 0 {
		t.Errorf("pooled %d convergence samples, want the runs' %d", len(real.conv), want)
	}
}
