package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/rollcall/rollcall/sim"
	"github.com/rollcall/rollcall/sim/simcli"
)

// runSim is `rollcall sim`: the convergence simulator, or `rollcall sim
// calibrate`, which checks it against a real in-process cluster.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "calibrate" {
		return simcli.Calibrate(ctx, args[1:], stdout, stderr)
	}
	o, err := simcli.ParseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.Regions.Regions != 0 {
		res, err := sim.RunRegions(ctx, o.Regions)
		if err != nil {
			return err
		}
		return simcli.WriteRegions(stdout, res, o.Format)
	}
	runs, err := o.Runs()
	if err != nil {
		return err
	}
	largest := 0
	for _, cfg := range runs {
		largest = max(largest, cfg.Nodes)
	}
	sim.TuneGC(largest)
	if o.CPUProfile != "" {
		stop, err := startCPUProfile(o.CPUProfile)
		if err != nil {
			return err
		}
		defer stop(stderr)
	}
	bar := newProgress(stderr, o.Format == "json" && !isTerminal(stdout))
	rows := make([]simcli.Row, 0, len(runs))
	for i, cfg := range runs {
		row := simcli.Row{}
		if o.SweepParam != "" {
			row.Sweep, row.Value = o.SweepParam, strings.TrimSpace(o.SweepValues[i])
		}
		cfg.Progress = bar.update(fmt.Sprintf("run %d/%d", i+1, len(runs)))
		res, err := sim.Run(ctx, cfg)
		bar.done()
		if err != nil {
			return err
		}
		row.Result = res
		rows = append(rows, row)
	}
	switch o.Format {
	case "json":
		err = simcli.WriteJSON(stdout, rows)
	case "csv":
		err = simcli.WriteCSV(stdout, rows)
	default:
		err = simcli.WriteTable(stdout, rows)
	}
	if err != nil {
		return err
	}
	if o.Plot != "" {
		if err := simcli.Plot(o.Plot, rows); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.Plot)
	}
	if o.Curves != "" {
		if err := simcli.PlotCurves(o.Curves, rows); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", o.Curves)
	}
	return nil
}

// startCPUProfile profiles the process into path until stop is called.
func startCPUProfile(path string) (stop func(stderr io.Writer), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func(stderr io.Writer) {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(stderr, "cpu profile: %v\n", err)
			return
		}
		fmt.Fprintf(stderr, "wrote %s\n", path)
	}, nil
}

// progress draws a progress bar on stderr, only when stderr is a terminal,
// and only once a run has taken more than two seconds.
type progress struct {
	w       io.Writer
	on      bool
	start   time.Time
	drawn   bool
	lastPct int
}

func newProgress(stderr io.Writer, suppress bool) *progress {
	return &progress{w: stderr, on: !suppress && isTerminal(stderr)}
}

func (p *progress) update(label string) func(float64) {
	p.start, p.drawn, p.lastPct = time.Now(), false, -1
	if !p.on {
		return nil
	}
	return func(done float64) {
		if time.Since(p.start) < 2*time.Second {
			return
		}
		pct := int(done * 100)
		if pct == p.lastPct {
			return
		}
		p.lastPct = pct
		const width = 40
		n := pct * width / 100
		fmt.Fprintf(p.w, "\r%s [%s%s] %3d%%", label, strings.Repeat("=", n), strings.Repeat(" ", width-n), pct)
		p.drawn = true
	}
}

func (p *progress) done() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
