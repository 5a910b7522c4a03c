package calibrate

import (
	"sort"
)

// Pooled combines reports of one scenario, run after run (curves are not
// combined: see the first report's). A single run's tail, the eager p99
// above all, moves with the host stalls that happen to fall in it: of 300
// changes its p99 is the 4th slowest. So the real cluster's percentiles
// are taken over every run's changes and crash detections together (900
// changes for 3 runs: the p99 is the 10th slowest), and its counts are
// averaged. The simulator's side is the mean over runs, each of them
// already a mean over several seeds (runSim) and, from RunPooled,
// replaying the warm-up writes of all the runs.
func Pooled(reports []*Report) (real, simm Measure) {
	var conv, crash []float64
	for _, r := range reports {
		conv = append(conv, r.Real.conv...)
		crash = append(crash, r.Real.crash...)
	}
	sort.Float64s(conv)
	sort.Float64s(crash)
	real = meanMeasure(reports, func(r *Report) *Measure { return &r.Real })
	real.ConvP50, real.ConvP99 = pct(conv, 50), pct(conv, 99)
	real.CrashP50, real.CrashMax = pct(crash, 50), pct(crash, 100)
	real.conv, real.crash = conv, crash
	return real, meanMeasure(reports, func(r *Report) *Measure { return &r.Sim })
}

// meanMeasure is the mean, field by field, of one side of reports.
func meanMeasure(reports []*Report, side func(*Report) *Measure) Measure {
	var m Measure
	n := float64(len(reports))
	for _, r := range reports {
		x := side(r)
		m.ConvP50 += x.ConvP50 / n
		m.ConvP99 += x.ConvP99 / n
		m.CopiesPerChange += x.CopiesPerChange / n
		m.CrashP50 += x.CrashP50 / n
		m.CrashMax += x.CrashMax / n
		m.Converged += x.Converged / n
		m.IndependentP50 += x.IndependentP50 / n
		m.IndependentP99 += x.IndependentP99 / n
	}
	return m
}

func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(float64(len(xs))*p/100+0.999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
