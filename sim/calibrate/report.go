package calibrate

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/sim"
)

// Write prints a report as a side-by-side table.
func (r *Report) Write(w io.Writer) error {
	sc := r.Scenario
	mode := dissem.ChooseMode(sc.Nodes, sc.EagerThreshold)
	fmt.Fprintf(w, "%d nodes, %s dissemination, %d changes over %v; simulator latency %s (fitted to the real cluster's hop delays)\n",
		sc.Nodes, mode, sc.Changes, sc.Window, sc.Latency)
	if sc.Host {
		fmt.Fprintf(w, "simulator write delays: %s\n", summarize(r.WriteDelays))
	}
	return writeTable(w, sc.Host, r.Real, r.Sim)
}

// WritePooled prints reports, runs of one scenario in dissemination mode
// mode (RunPooled), pooled (Pooled): what was pooled, the side-by-side
// table, and each run's timing ratios with their medians (WriteRatios).
func WritePooled(w io.Writer, mode string, reports []*Report) error {
	if len(reports) == 0 {
		return nil
	}
	first, last := reports[0].Scenario, reports[len(reports)-1].Scenario
	real, simm := Pooled(reports)
	replay := ""
	if first.Host {
		replay = fmt.Sprintf(", replaying all %d warm-up writes", len(reports[0].WriteDelays))
	}
	fmt.Fprintf(w, "%d nodes, %s: %d runs pooled (seeds %d-%d; real: percentiles of all %d changes and %d crash detections; sim: mean of the runs%s)\n",
		first.Nodes, mode, len(reports), first.Seed, last.Seed, len(real.conv), len(real.crash), replay)
	if err := writeTable(w, first.Host, real, simm); err != nil {
		return err
	}
	return WriteRatios(w, reports)
}

// A Ratio is one measure over runs of a scenario: its value in each run
// and their median.
type Ratio struct {
	Metric string
	Runs   []float64
	Median float64
}

// Ratios gives, over reports (runs of one scenario), the simulator's
// timings relative to the real cluster's, sim/real, run by run and their
// median, and the median hop delay given to the simulator (fitted to the
// real cluster's warm-up, unless the scenario set a latency). These are
// measurements of a shared host, not pass/fail: a single run's p99 moves
// with the host stalls that fall in it, which is why the median is given.
// A run without a real sample for a measure (no converged change) is left
// out of that measure.
func Ratios(reports []*Report) []Ratio {
	ratio := func(real, sim float64) (float64, bool) { return sim / real, real > 0 }
	out := []Ratio{
		ratioOf(reports, "convergence p50 sim/real", func(r *Report) (float64, bool) { return ratio(r.Real.ConvP50, r.Sim.ConvP50) }),
		ratioOf(reports, "convergence p99 sim/real", func(r *Report) (float64, bool) { return ratio(r.Real.ConvP99, r.Sim.ConvP99) }),
		ratioOf(reports, "crash to offline p50 sim/real", func(r *Report) (float64, bool) { return ratio(r.Real.CrashP50, r.Sim.CrashP50) }),
		ratioOf(reports, "copies per change sim/real", func(r *Report) (float64, bool) {
			return ratio(r.Real.CopiesPerChange, r.Sim.CopiesPerChange)
		}),
		ratioOf(reports, "hop median given to the sim (ms)", func(r *Report) (float64, bool) { return r.LatencyUS / 1e3, true }),
	}
	return out
}

func ratioOf(reports []*Report, metric string, f func(*Report) (float64, bool)) Ratio {
	r := Ratio{Metric: metric}
	for _, rep := range reports {
		if v, ok := f(rep); ok {
			r.Runs = append(r.Runs, v)
		}
	}
	r.Median = median(r.Runs)
	return r
}

// median is the middle value of xs (the mean of the middle two for an even
// count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteRatios prints Ratios(reports): each measure's median over the runs
// and its value in each run.
func WriteRatios(w io.Writer, reports []*Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "over %d runs\tmedian\tper run\n", len(reports))
	for _, r := range Ratios(reports) {
		runs := make([]string, len(r.Runs))
		for i, v := range r.Runs {
			runs[i] = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%s\n", r.Metric, r.Median, strings.Join(runs, " "))
	}
	return tw.Flush()
}

// writeTable prints the real and simulated measures side by side, and with
// host the simulator's convergence without the write delays.
func writeTable(w io.Writer, host bool, real, simm Measure) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\treal\tsim\tsim/real\t")
	row := func(name string, a, b float64) {
		ratio := "-"
		if a > 0 {
			ratio = fmt.Sprintf("%.2f", b/a)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%s\t\n", name, a, b, ratio)
	}
	row("convergence p50 (ms)", real.ConvP50, simm.ConvP50)
	row("convergence p99 (ms)", real.ConvP99, simm.ConvP99)
	row("copies per change", real.CopiesPerChange, simm.CopiesPerChange)
	row("crash to offline p50 (ms)", real.CrashP50, simm.CrashP50)
	row("crash to offline max (ms)", real.CrashMax, simm.CrashMax)
	row("converged fraction", real.Converged, simm.Converged)
	if err := tw.Flush(); err != nil {
		return err
	}
	if host {
		_, err := fmt.Fprintf(w, "without the write delays (independent packets) the simulator's convergence p50/p99 is %.2f/%.2f ms\n",
			simm.IndependentP50, simm.IndependentP99)
		return err
	}
	return nil
}

// summarize describes measured write delays: how many, the flush delay's
// median and p98, and the median and p98 over writes of the slowest
// receiver's hop delay.
func summarize(ws []sim.WriteDelay) string {
	if len(ws) == 0 {
		return "none measured"
	}
	var flush, slowest []float64
	for _, w := range ws {
		flush = append(flush, float64(w.Flush)/1e6)
		if len(w.Hops) > 0 {
			slowest = append(slowest, float64(slices.Max(w.Hops))/1e6)
		}
	}
	sort.Float64s(flush)
	out := fmt.Sprintf("%d writes; flush delay median %.2fms, p98 %.2fms", len(ws), pct(flush, 50), pct(flush, 98))
	if len(slowest) > 0 {
		sort.Float64s(slowest)
		out += fmt.Sprintf("; slowest receiver's hop median %.2fms, p98 %.2fms", pct(slowest, 50), pct(slowest, 98))
	}
	return out
}
