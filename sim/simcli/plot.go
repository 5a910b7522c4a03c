package simcli

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/rollcall/rollcall/sim"
)

// Plot draws rows to file (.svg or .png): for a single run (or a sweep of
// a non-numeric parameter) the converged fraction against time since the
// change, one line per run; for a numeric sweep, p99 and p50 convergence
// against the swept value.
func Plot(file string, rows []Row) error {
	ext := strings.ToLower(filepath.Ext(file))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("plot %q: want a .svg or .png file", file)
	}
	var p *plot.Plot
	var err error
	if xs, ok := sweepValues(rows); ok && len(rows) > 1 {
		p, err = sweepPlot(rows, xs)
	} else {
		p, err = curvePlot(rows)
	}
	if err != nil {
		return err
	}
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, file)
}

// PlotCurves draws the convergence curve of every row, whatever the sweep.
func PlotCurves(file string, rows []Row) error {
	ext := strings.ToLower(filepath.Ext(file))
	if ext != ".svg" && ext != ".png" {
		return fmt.Errorf("plot %q: want a .svg or .png file", file)
	}
	p, err := curvePlot(rows)
	if err != nil {
		return err
	}
	return p.Save(16*vg.Centimeter, 10*vg.Centimeter, file)
}

var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
}

func sweepValues(rows []Row) ([]float64, bool) {
	if len(rows) == 0 || rows[0].Sweep == "" {
		return nil, false
	}
	xs := make([]float64, len(rows))
	for i, r := range rows {
		v := strings.TrimSpace(r.Value)
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			d, derr := parseDurationMS(v)
			if derr != nil {
				return nil, false
			}
			x = d
		}
		xs[i] = x
	}
	return xs, true
}

func parseDurationMS(s string) (float64, error) {
	l, err := sim.ParseLatency(s)
	if err != nil || l.Kind != sim.LatencyFixed {
		return 0, fmt.Errorf("not a duration")
	}
	return float64(l.Min) / 1e6, nil
}

func label(r Row) string {
	res := r.Result
	if r.Sweep == "calibration" {
		return r.Value
	}
	if r.Sweep != "" {
		return fmt.Sprintf("%s=%s", r.Sweep, r.Value)
	}
	return fmt.Sprintf("%d nodes, %s, loss %g", res.Nodes, res.Mode, res.Loss)
}

// curvePlot draws the convergence curves on a log time axis.
func curvePlot(rows []Row) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Convergence of session changes"
	p.X.Label.Text = "time since the change (ms, log scale)"
	p.Y.Label.Text = "fraction of (change, node) pairs converged"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	// Curves start near zero and rise to the right: the top left is free.
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	for i, r := range rows {
		var pts plotter.XYs
		for _, c := range r.Result.Curve {
			pts = append(pts, plotter.XY{X: math.Max(c.MS, 0.01), Y: c.Fraction})
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.StepStyle = plotter.PostStep
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(label(r), l)
	}
	return p, nil
}

// sweepPlot draws p50 and p99 convergence against the swept value.
func sweepPlot(rows []Row, xs []float64) (*plot.Plot, error) {
	p := plot.New()
	param := rows[0].Sweep
	p.Title.Text = "Convergence to every node against " + param
	p.X.Label.Text = param + unitOf(param)
	p.Y.Label.Text = "convergence time (ms)"
	p.Add(plotter.NewGrid())
	if param == "nodes" {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	for i, s := range []struct {
		name string
		get  func(*sim.Result) float64
	}{
		{"p99", func(r *sim.Result) float64 { return r.Convergence.P99 }},
		{"p50", func(r *sim.Result) float64 { return r.Convergence.P50 }},
	} {
		pts := make(plotter.XYs, len(rows))
		for j, r := range rows {
			pts[j] = plotter.XY{X: xs[j], Y: s.get(r.Result)}
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, err
		}
		l.Color = palette[i]
		l.Width = vg.Points(1.5)
		sc.Color = palette[i]
		sc.Shape = draw.CircleGlyph{}
		p.Add(l, sc)
		p.Legend.Add(s.name+" convergence", l, sc)
	}
	return p, nil
}

func unitOf(param string) string {
	switch param {
	case "nodes":
		return " (count, log scale)"
	case "loss":
		return " (fraction of packets lost)"
	case "fanout", "changes", "retransmit-mult", "eager-threshold":
		return " (count)"
	}
	return " (ms)"
}
