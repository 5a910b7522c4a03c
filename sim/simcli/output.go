package simcli

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rollcall/rollcall/sim"
)

// Row is one run's result, with the swept value when there is a sweep.
type Row struct {
	Sweep  string `json:"sweep,omitempty"`
	Value  string `json:"value,omitempty"`
	Result *sim.Result
}

// WriteJSON writes one object for a single run, an array of objects (each
// with "sweep" and "value") for a sweep.
func WriteJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if len(rows) == 1 && rows[0].Sweep == "" {
		return enc.Encode(rows[0].Result)
	}
	type swept struct {
		Sweep string `json:"sweep"`
		Value string `json:"value"`
		*sim.Result
	}
	out := make([]swept, len(rows))
	for i, r := range rows {
		out[i] = swept{r.Sweep, r.Value, r.Result}
	}
	return enc.Encode(out)
}

// columns are the table and CSV columns: header, unit, value.
var columns = []struct {
	name string
	get  func(r *sim.Result) string
}{
	{"nodes", func(r *sim.Result) string { return strconv.Itoa(r.Nodes) }},
	{"mode", func(r *sim.Result) string { return r.Mode }},
	{"fanout", func(r *sim.Result) string { return strconv.Itoa(r.Fanout) }},
	{"interval_ms", func(r *sim.Result) string { return f(r.IntervalMS) }},
	{"loss", func(r *sim.Result) string { return f(r.Loss) }},
	{"changes", func(r *sim.Result) string { return strconv.Itoa(r.Changes) }},
	{"conv_p50_ms", func(r *sim.Result) string { return f(r.Convergence.P50) }},
	{"conv_p90_ms", func(r *sim.Result) string { return f(r.Convergence.P90) }},
	{"conv_p99_ms", func(r *sim.Result) string { return f(r.Convergence.P99) }},
	{"conv_max_ms", func(r *sim.Result) string { return f(r.Convergence.Max) }},
	{"converged", func(r *sim.Result) string { return f(r.ConvergedFraction) }},
	{"bytes_node_s", func(r *sim.Result) string { return f(r.BytesPerNodePerS) }},
	{"msgs_node_s", func(r *sim.Result) string { return f(r.MessagesPerNodePerS) }},
	{"copies_change", func(r *sim.Result) string { return f(r.CopiesPerChange) }},
	{"offline_p50_ms", func(r *sim.Result) string { return f(r.OfflineDetection.P50) }},
	{"offline_p99_ms", func(r *sim.Result) string { return f(r.OfflineDetection.P99) }},
	{"crash_p50_ms", func(r *sim.Result) string { return f(r.NodeCrash.P50) }},
	{"false_offline", func(r *sim.Result) string { return strconv.Itoa(r.FalseOffline) }},
	{"ghost_ms", func(r *sim.Result) string { return f(r.GhostMS) }},
	{"anti_entropy_B", func(r *sim.Result) string { return strconv.FormatUint(r.AntiEntropyBytes, 10) }},
}

func f(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// WriteCSV writes a header and one line per run.
func WriteCSV(w io.Writer, rows []Row) error {
	cw := csv.NewWriter(w)
	sweep := len(rows) > 0 && rows[0].Sweep != ""
	var head []string
	if sweep {
		head = append(head, rows[0].Sweep)
	}
	for _, c := range columns {
		head = append(head, c.name)
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for _, r := range rows {
		var rec []string
		if sweep {
			rec = append(rec, r.Value)
		}
		for _, c := range columns {
			rec = append(rec, c.get(r.Result))
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteTable writes a human-readable report: a labelled summary for a
// single run, a table with one row per value for a sweep.
// WriteRegions writes a multi-region run's result as a table, or as one
// JSON object.
func WriteRegions(w io.Writer, r *sim.RegionResult, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "regions\t%d (%d gateways, %d bridge-capable per region)\n", r.Regions, r.Nodes, r.Bridges)
	fmt.Fprintf(tw, "between regions\t%v one way\n", r.RegionLatency)
	fmt.Fprintf(tw, "changes\t%d\n", r.Changes)
	fmt.Fprintf(tw, "cross-region reach (every gateway of every other region)\tp50 %v  p99 %v  max %v  (%d of %d reached)\n",
		r.ReachP50.Round(time.Microsecond), r.ReachP99.Round(time.Microsecond), r.ReachMax.Round(time.Microsecond), r.Reached, r.Changes)
	fmt.Fprintf(tw, "in-region reach\tp50 %v  p99 %v\n", r.LocalP50.Round(time.Microsecond), r.LocalP99.Round(time.Microsecond))
	fmt.Fprintf(tw, "WAN copies per change per other region\t%.3f (%d in all, %d bytes)\n", r.WANCopiesPerChange, r.WANCopies, r.WANBytes)
	fmt.Fprintf(tw, "repair pulls\t%d\n", r.WANPulls)
	fmt.Fprintf(tw, "regions shown expired\t%d\n", r.RegionsExpired)
	if r.BridgeCrashed != "" {
		fmt.Fprintf(tw, "bridge killed\t%s\n", r.BridgeCrashed)
	}
	return tw.Flush()
}

func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(rows) == 1 && rows[0].Sweep == "" {
		writeSummary(tw, rows[0].Result)
		return tw.Flush()
	}
	if len(rows) > 0 {
		fmt.Fprintf(tw, "%s", rows[0].Sweep)
	}
	for _, c := range columns {
		fmt.Fprintf(tw, "\t%s", c.name)
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		fmt.Fprint(tw, r.Value)
		for _, c := range columns {
			fmt.Fprintf(tw, "\t%s", c.get(r.Result))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func writeSummary(w io.Writer, r *sim.Result) {
	p := func(label, format string, args ...any) { fmt.Fprintf(w, label+"\t"+format+"\n", args...) }
	p("cluster", "%d nodes, %s profile, %s dissemination, fanout %d every %gms", r.Nodes, r.Profile, r.Mode, r.Fanout, r.IntervalMS)
	p("network", "latency %s, loss %g", r.Latency, r.Loss)
	p("run", "%gs simulated, seed %d, %d client actions, %d changes, session timeout %gs", r.DurationS, r.Seed, r.Actions, r.Changes, r.TimeoutS)
	p("convergence to all nodes", "p50 %gms  p90 %gms  p99 %gms  max %gms (%d changes)", r.Convergence.P50, r.Convergence.P90, r.Convergence.P99, r.Convergence.Max, r.Convergence.Samples)
	p("convergence per node", "p50 %gms  p90 %gms  p99 %gms", r.NodeConvergence.P50, r.NodeConvergence.P90, r.NodeConvergence.P99)
	p("converged fraction", "%g (%d changes never reached every live node)", r.ConvergedFraction, r.Unconverged)
	p("traffic per node", "%g bytes/s, %g messages/s", r.BytesPerNodePerS, r.MessagesPerNodePerS)
	p("copies per change", "%g (%g sent point to point, not piggybacked)", r.CopiesPerChange, r.DirectCopiesPerChange)
	p("anti-entropy", "%d bytes (%g bytes/s per node), %d gap pulls, %d push/pulls", r.AntiEntropyBytes, r.AntiEntropyBytesPerNodePerS, r.Counters.GapPulls, r.Counters.PushPulls)
	det := func(d sim.Detection) string {
		if d.Samples == 0 {
			return "no samples"
		}
		s := fmt.Sprintf("p50 %gms  p99 %gms  max %gms (%d samples", d.P50, d.P99, d.Max, d.Samples)
		if d.Censored > 0 {
			s += fmt.Sprintf(", %d undetected at the end", d.Censored)
		}
		return s + ")"
	}
	p("offline after client failure", "%s", det(r.ClientFailure))
	p("offline after gateway crash", "%s", det(r.NodeCrash))
	p("false offline", "%d (session, node) incidents, %gs in total", r.FalseOffline, r.FalseOfflineS)
	p("ghost time", "mean %gms, max %gms", r.GhostMS, r.GhostMaxMS)
	p("failure detector", "%d probes, %d failed; %d suspicions, %d deaths declared, %d refutes",
		r.Counters.Probes, r.Counters.FailedProbes, r.Counters.Suspicions, r.Counters.Deaths, r.Counters.Refutes)
}
