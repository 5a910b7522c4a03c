package simcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rollcall/rollcall/sim"
	"github.com/rollcall/rollcall/sim/calibrate"
)

// Calibrate is `rollcall sim calibrate`: it parses args, runs the
// calibration (calibrate.RunPooled) in each mode asked for and prints the
// reports to stdout; progress and the names of files written go to stderr.
func Calibrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rollcall sim calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 32, "real memberlist nodes to start on loopback, a count")
	changes := fs.Int("changes", 300, "session writes, a count (the convergence p99 is the 4th slowest of 300)")
	window := fs.Duration("window", 5*time.Second, "time over which the writes are spread, a duration")
	seed := fs.Uint64("seed", 1, "random seed for owners and timing")
	modes := fs.String("modes", "eager,epidemic", "dissemination modes to calibrate: eager, epidemic or both (epidemic forces the eager threshold below the cluster size)")
	plotFile := fs.String("plot", "", "also draw FILE (.svg or .png): converged fraction against time, real and simulated, per mode")
	host := fs.Bool("host", true, "give the simulator the real cluster's measured write delays (flush delay and each receiver's hop, per write); false: independent per-packet latency only")
	runs := fs.Int("runs", 1, "run each mode this many times, with seeds seed, seed+1, ..., and pool them: the simulator replays every run's warm-up writes, and the pooled table gives the real cluster's percentiles over all the runs' changes beside the simulator's means; a count (single runs' p99 vary widely on a shared host)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rollcall sim calibrate [flags]\n\nRuns one scenario on a real in-process cluster and in the simulator and prints both.\nfast memberlist timers: probe 100ms, probe timeout 50ms, suspicion mult 2, gossip 20ms, push/pull 1s; lease 2s, alive 100ms.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *runs < 1 {
		return fmt.Errorf("--runs %d: need at least one run", *runs)
	}
	var rows []Row
	for _, mode := range splitComma(*modes) {
		sc := calibrate.Scenario{Nodes: *nodes, Changes: *changes, Window: *window, Settle: 3 * time.Second,
			Observe: 3 * time.Second, Seed: *seed, EagerThreshold: 64, Host: *host}
		switch mode {
		case "eager":
			sc.EagerThreshold = max(64, *nodes)
		case "epidemic":
			sc.EagerThreshold = max(1, *nodes/4)
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
		reports, err := calibrate.RunPooled(ctx, sc, *runs, func(i int, seed uint64) {
			fmt.Fprintf(stderr, "calibrating %s with %d real nodes (run %d of %d, seed %d)...\n", mode, *nodes, i+1, *runs, seed)
		})
		if err != nil {
			return err
		}
		for _, r := range reports {
			if err := r.Write(stdout); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
		if *runs > 1 {
			if err := calibrate.WritePooled(stdout, mode, reports); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
		r := reports[0]
		rows = append(rows,
			Row{Sweep: "calibration", Value: mode + " real cluster", Result: &sim.Result{Curve: r.Real.Curve}},
			Row{Sweep: "calibration", Value: mode + " simulator", Result: &sim.Result{Curve: r.Sim.Curve}})
	}
	if *plotFile != "" {
		if err := Plot(*plotFile, rows); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", *plotFile)
	}
	return nil
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
