package calibrate

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"testing"
	"time"
)

// TestCalibration runs a small calibration (12 real nodes) in both modes and
// checks the simulator against the real cluster: copies per change within
// 25%, full convergence on both sides and the shape of the measured write
// delays, always. The timings — crash to offline p50
// within 25%, convergence p50 within 40% — are measured
// on a real cluster sharing two cores with whatever else runs (other test
// packages, in CI), so they are checked only with ROLLCALL_CALIBRATE_STRICT=1
// and logged otherwise: a timed assertion on a noisy machine would fail for
// reasons that are not the simulator's; a real cluster starved of CPU
// altogether (its median hop over 100ms) is no reference at all, and the
// test skips, saying so. `make calibrate` is the full-size measurement.
// It takes about 40s and is skipped with -short.
func TestCalibration(t *testing.T) {
	const starvedHop = 100 * time.Millisecond
	if testing.Short() {
		t.Skip("starts real memberlist clusters")
	}
	for _, tc := range []struct {
		name      string
		threshold int
	}{{"eager", 64}, {"epidemic", 4}} {
		sc := Scenario{Nodes: 12, EagerThreshold: tc.threshold, Changes: 40, Window: 2 * time.Second,
			Settle: 2 * time.Second, Observe: 2 * time.Second, Seed: 3, Host: true, Warmup: 60}
		r, err := Run(context.Background(), sc)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_ = r.Write(&b)
		t.Logf("%s\n%s", tc.name, b.String())
		// A real cluster whose median hop takes longer than its gossip and
		// probe intervals is starved of CPU: its piggyback retransmissions
		// and observation windows no longer run on time, so neither copies
		// per change nor convergence within the window describe the
		// protocol. On an idle 2-core machine the median hop is a few
		// milliseconds; under a test loop with CPU hogs it was 0.3-1.7s.
		if hop := time.Duration(r.LatencyUS * 1e3); hop > starvedHop {
			t.Skipf("%s: the real cluster's median hop took %v (over %v): the machine is too loaded for a calibration to mean anything; run `make calibrate` on a quiet machine", tc.name, hop, starvedHop)
		}
		within := func(what string, real, sim, tol float64, strict bool) {
			if real > 0 && math.Abs(sim/real-1) <= tol {
				return
			}
			msg := fmt.Sprintf("%s %s: sim %.2f vs real %.2f (tolerance %.0f%%)", tc.name, what, sim, real, tol*100)
			if strict {
				t.Error(msg)
			} else {
				t.Log(msg + "; timing, not checked without ROLLCALL_CALIBRATE_STRICT=1")
			}
		}
		strictTiming := os.Getenv("ROLLCALL_CALIBRATE_STRICT") == "1"
		within("copies per change", r.Real.CopiesPerChange, r.Sim.CopiesPerChange, 0.25, true)
		within("crash to offline p50", r.Real.CrashP50, r.Sim.CrashP50, 0.25, strictTiming)
		within("convergence p50", r.Real.ConvP50, r.Sim.ConvP50, 0.4, strictTiming)
		if n := len(r.WriteDelays); n == 0 || n > sc.Warmup {
			t.Errorf("%s: %d write delays measured from %d warm-up writes", tc.name, n, sc.Warmup)
		}
		for _, w := range r.WriteDelays {
			if want := map[string]int{"eager": sc.Nodes - 1, "epidemic": 0}[tc.name]; len(w.Hops) != want {
				// Eager: one hop per receiver, reached or not; epidemic:
				// none (later receivers got the write from relays).
				t.Errorf("%s: a measured write has %d hops, want %d", tc.name, len(w.Hops), want)
				break
			}
		}
		if r.Real.Converged != 1 || r.Sim.Converged != 1 {
			t.Errorf("%s: converged real %v sim %v", tc.name, r.Real.Converged, r.Sim.Converged)
		}
	}
}

// RunPooled gives every run's simulation the warm-up writes of all the
// runs, and Pooled takes the real percentiles over all their changes.
func TestRunPooled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real memberlist clusters")
	}
	sc := Scenario{Nodes: 6, EagerThreshold: 64, Changes: 20, Window: time.Second,
		Settle: time.Second, Observe: time.Second, Crashes: 1, Seed: 5, Host: true, Warmup: 16}
	var seeds []uint64
	reports, err := RunPooled(context.Background(), sc, 2, func(_ int, seed uint64) { seeds = append(seeds, seed) })
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 || len(seeds) != 2 || seeds[0] != 5 || seeds[1] != 6 {
		t.Fatalf("%d reports, seeds %v: want 2 runs, seeds 5 and 6", len(reports), seeds)
	}
	for i, r := range reports {
		if r.Scenario.Seed != seeds[i] {
			t.Errorf("report %d has seed %d, want %d", i, r.Scenario.Seed, seeds[i])
		}
		// Each warm-up makes 16 writes; a write whose owner never
		// flushed is left out, so all but a few of the 32 must be there.
		if n := len(r.WriteDelays); n <= sc.Warmup || n > 2*sc.Warmup {
			t.Errorf("report %d replays %d warm-up writes, want those of both runs (%d < n <= %d)", i, n, sc.Warmup, 2*sc.Warmup)
		}
	}
	if len(reports[0].WriteDelays) != len(reports[1].WriteDelays) {
		t.Errorf("the runs replay %d and %d writes, want the same pool", len(reports[0].WriteDelays), len(reports[1].WriteDelays))
	}
	real, _ := Pooled(reports)
	if want := len(reports[0].Real.conv) + len(reports[1].Real.conv); len(real.conv) != want || want == 0 {
		t.Errorf("pooled %d convergence samples, want the runs' %d", len(real.conv), want)
	}
}
