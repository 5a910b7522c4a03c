package calibrate

import (
	"context"
	"strings"
	"testing"
	"time"
)

// BenchmarkCalibration is the timing half of the calibration, as a report
// rather than an assertion: each iteration runs a 12-node calibration (Run,
// seed 3, 4, ...) in its mode, and the benchmark reports the medians over
// the iterations of the simulator's timings relative to the real
// cluster's (convergence p50 and p99, crash to offline p50, copies per
// change) and of the hop median given to the simulator, then logs each
// run's value (WriteRatios). An iteration takes about 18s; run several
// (-v, or go test cuts the log short):
//
//	go test -run '^$' -bench Calibration -benchtime 5x -v ./sim/calibrate
//
// `make calibrate` is the full-size measurement (32 nodes, runs pooled).
// Skipped with -short.
func BenchmarkCalibration(b *testing.B) {
	if testing.Short() {
		b.Skip("starts real memberlist clusters")
	}
	for _, bc := range []struct {
		name      string
		threshold int
	}{{"eager", 64}, {"epidemic", 4}} {
		b.Run(bc.name, func(b *testing.B) {
			sc := Scenario{Nodes: 12, EagerThreshold: bc.threshold, Changes: 40, Window: 2 * time.Second,
				Settle: 2 * time.Second, Observe: 2 * time.Second, Seed: 3, Host: true, Warmup: 60}
			var reports []*Report
			for b.Loop() {
				run := sc
				run.Seed += uint64(len(reports))
				r, err := Run(context.Background(), run)
				if err != nil {
					b.Fatal(err)
				}
				reports = append(reports, r)
			}
			for _, r := range Ratios(reports) {
				b.ReportMetric(r.Median, metricUnit(r.Metric))
			}
			var out strings.Builder
			for _, r := range reports {
				_ = r.Write(&out)
				out.WriteString("\n")
			}
			_ = WriteRatios(&out, reports)
			b.Logf("%s\n%s", bc.name, out.String())
		})
	}
}

// metricUnit makes a Ratio's metric name a benchmark unit (no spaces).
func metricUnit(metric string) string {
	metric = strings.NewReplacer(" (ms)", "-ms", "convergence", "conv", "crash to offline", "crash",
		"copies per change", "copies", "hop median given to the sim", "hop-median").Replace(metric)
	return "median-" + strings.ReplaceAll(metric, " ", "-")
}
