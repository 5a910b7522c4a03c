package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

var (
	blue = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	red  = color.RGBA{0xd6, 0x27, 0x28, 0xff}
)

// WritePlot draws the report to an SVG file: the status round trip (p50,
// p99) per second of the window above, the CDF of propagation below.
func (r *Report) WritePlot(file string) error {
	if strings.ToLower(filepath.Ext(file)) != ".svg" {
		return fmt.Errorf("plot %q: want a .svg file", file)
	}
	top, err := r.timelinePlot()
	if err != nil {
		return err
	}
	bottom, err := r.cdfPlot()
	if err != nil {
		return err
	}
	c := vgsvg.New(16*vg.Centimeter, 18*vg.Centimeter)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	plots := [][]*plot.Plot{{top}, {bottom}}
	canvases := plot.Align(plots, tiles, draw.New(c))
	top.Draw(canvases[0][0])
	bottom.Draw(canvases[1][0])
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot: %w", err)
	}
	return f.Close()
}

func (r *Report) timelinePlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Status round trip over the window"
	p.X.Label.Text = "time into the window (s)"
	p.Y.Label.Text = "round trip (ms)"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	var p50, p99 plotter.XYs
	for _, t := range r.Timeline {
		if t.Changes == 0 {
			continue
		}
		p50 = append(p50, plotter.XY{X: float64(t.Second), Y: t.P50})
		p99 = append(p99, plotter.XY{X: float64(t.Second), Y: t.P99})
	}
	for _, s := range []struct {
		name string
		xy   plotter.XYs
		c    color.Color
	}{{"p50", p50, blue}, {"p99", p99, red}} {
		if len(s.xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(s.xy)
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = s.c, vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return p, nil
}

func (r *Report) cdfPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Propagation of status changes (CDF)"
	p.X.Label.Text = "status sent to subscriber's event (ms, log scale)"
	p.Y.Label.Text = "fraction of events"
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	vals, frac := r.propagation.CDF()
	if len(vals) == 0 {
		return p, nil
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	xy := make(plotter.XYs, 0, len(vals)+1)
	xy = append(xy, plotter.XY{X: math.Max(ms(vals[0]), 0.001), Y: 0})
	for i, v := range vals {
		xy = append(xy, plotter.XY{X: math.Max(ms(v), 0.001), Y: frac[i]})
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return nil, err
	}
	l.StepStyle = plotter.PostStep
	l.Color, l.Width = blue, vg.Points(1.5)
	p.Add(l)
	return p, nil
}
