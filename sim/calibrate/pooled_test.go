package calibrate

import (
	"slices"
	"testing"
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
