package calibrate

import (
	"slices"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/sim"
)

// Runs are pooled: the real cluster's percentiles come from all runs'
// samples together, not from any one run's percentiles; the simulator's
// side, and the real counts, are means over the runs.
func TestPooled(t *testing.T) {
	real := func(conv, crash []float64, copies float64) Measure {
		return Measure{ConvP50: -1, ConvP99: -1, CrashP50: -1, CrashMax: -1, CopiesPerChange: copies, Converged: 1, conv: conv, crash: crash}
	}
	// 100 changes a run, each run's p99 its 2nd slowest: 40, 4.2 and 4.5
	// ms (median 4.5, mean 16.2). Pooled, the p99 is the 4th slowest of
	// 300: 32 ms (after 50, 40 and 35).
	fast := func(base float64) []float64 {
		v := make([]float64, 0, 100)
		for i := range 98 {
			v = append(v, base+float64(i)/100)
		}
		return v
	}
	r1 := append(fast(3), 40, 50)
	r2 := append(fast(3), 4.2, 35)
	r3 := append(fast(3), 4.5, 32)
	reports := []*Report{
		{Real: real(r1, []float64{500, 600}, 30), Sim: Measure{ConvP50: 3, ConvP99: 9, IndependentP99: 5}},
		{Real: real(r2, []float64{700}, 31), Sim: Measure{ConvP50: 4, ConvP99: 12, IndependentP99: 4}},
		{Real: real(r3, []float64{400}, 32), Sim: Measure{ConvP50: 5, ConvP99: 30, IndependentP99: 6}},
	}
	for _, r := range reports {
		slices.Sort(r.Real.conv)
	}
	gotReal, gotSim := Pooled(reports)
	if gotReal.ConvP99 != 32 {
		t.Errorf("pooled real p99 = %v, want 32 (the 4th slowest of 300)", gotReal.ConvP99)
	}
	if want := 3.5; gotReal.ConvP50 < want-0.01 || gotReal.ConvP50 > want+0.01 {
		t.Errorf("pooled real p50 = %v, want about %v", gotReal.ConvP50, want)
	}
	if gotReal.CrashP50 != 500 || gotReal.CrashMax != 700 {
		t.Errorf("pooled crash p50/max = %v/%v, want 500/700 (of 400, 500, 600, 700)", gotReal.CrashP50, gotReal.CrashMax)
	}
	if gotReal.CopiesPerChange != 31 || gotReal.Converged != 1 {
		t.Errorf("real copies %v, converged %v: want the means 31 and 1", gotReal.CopiesPerChange, gotReal.Converged)
	}
	if gotSim.ConvP50 != 4 || gotSim.ConvP99 != 17 || gotSim.IndependentP99 != 5 {
		t.Errorf("sim %+v: want the means p50 4, p99 17, independent p99 5", gotSim)
	}
	if len(reports[0].Real.conv) != 100 || reports[0].Real.conv[99] != 50 {
		t.Error("Pooled changed a report's samples")
	}
}

// The pooled report says what was pooled (runs, seeds, samples, replayed
// writes), gives the pooled table and each run's timing ratios with their
// medians.
func TestWritePooled(t *testing.T) {
	sc := Scenario{Nodes: 6, Seed: 5, Host: true}
	next := sc
	next.Seed = 6
	writes := make([]sim.WriteDelay, 3)
	reports := []*Report{
		{Scenario: sc, WriteDelays: writes, Real: Measure{ConvP99: 10, Converged: 1, conv: []float64{2, 10}, crash: []float64{400}},
			Sim: Measure{ConvP99: 20, Converged: 1}},
		{Scenario: next, WriteDelays: writes, Real: Measure{ConvP99: 8, Converged: 1, conv: []float64{3, 8}, crash: []float64{500}},
			Sim: Measure{ConvP99: 4, Converged: 1}},
	}
	var b strings.Builder
	if err := WritePooled(&b, "eager", reports); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if want := "6 nodes, eager: 2 runs pooled (seeds 5-6; real: percentiles of all 4 changes and 2 crash detections; sim: mean of the runs, replaying all 3 warm-up writes)"; lines[0] != want {
		t.Errorf("header %q, want %q", lines[0], want)
	}
	if !strings.Contains(b.String(), "convergence p99 (ms)") || !strings.Contains(b.String(), "without the write delays") {
		t.Errorf("no pooled table with the independent-packet line:\n%s", b.String())
	}
	var p99 string
	for _, l := range lines {
		if strings.HasPrefix(l, "convergence p99 sim/real") {
			p99 = strings.Join(strings.Fields(l), " ")
		}
	}
	if want := "convergence p99 sim/real 1.25 2.00 0.50"; p99 != want {
		t.Errorf("p99 ratio line %q, want %q (the median of the runs' 2.00 and 0.50, then each)", p99, want)
	}
}

// Ratios are sim/real per run, with their median; a run with no real
// sample of a measure is left out of that measure, not counted as 0 or
// infinity.
func TestRatios(t *testing.T) {
	reports := []*Report{
		{LatencyUS: 4000, Real: Measure{ConvP50: 2, CrashP50: 500}, Sim: Measure{ConvP50: 3, CrashP50: 400}},
		{LatencyUS: 1000, Real: Measure{ConvP50: 4, CrashP50: 0}, Sim: Measure{ConvP50: 2, CrashP50: 450}},
		{LatencyUS: 2000, Real: Measure{ConvP50: 1, CrashP50: 500}, Sim: Measure{ConvP50: 1, CrashP50: 600}},
	}
	got := make(map[string]Ratio)
	for _, r := range Ratios(reports) {
		got[r.Metric] = r
	}
	conv := got["convergence p50 sim/real"]
	if !slices.Equal(conv.Runs, []float64{1.5, 0.5, 1}) || conv.Median != 1 {
		t.Errorf("convergence p50 ratios %v median %v, want [1.5 0.5 1] median 1", conv.Runs, conv.Median)
	}
	crash := got["crash to offline p50 sim/real"]
	if !slices.Equal(crash.Runs, []float64{0.8, 1.2}) || crash.Median != 1 {
		t.Errorf("crash ratios %v median %v, want [0.8 1.2] (the run without a real detection left out) median 1", crash.Runs, crash.Median)
	}
	if hop := got["hop median given to the sim (ms)"]; hop.Median != 2 {
		t.Errorf("hop median %v ms, want 2", hop.Median)
	}
}
