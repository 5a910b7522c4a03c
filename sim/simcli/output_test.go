package simcli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/sim"
)

// small is a quick scenario: 12 nodes, 40 client actions over 30s.
func small() sim.Config {
	c := sim.DefaultConfig()
	c.Nodes = 12
	c.Changes = 40
	c.Duration = 30 * time.Second
	return c
}

func run(t testing.TB, cfg sim.Config) *sim.Result {
	t.Helper()
	r, err := sim.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOutputsAndPlots(t *testing.T) {
	cfg := small()
	rows := []Row{{Sweep: "loss", Value: "0", Result: run(t, cfg)}}
	cfg.Loss = 0.1
	rows = append(rows, Row{Sweep: "loss", Value: "0.1", Result: run(t, cfg)})
	var b bytes.Buffer
	if err := WriteCSV(&b, rows); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(b.String(), "\n"); lines != 3 {
		t.Errorf("csv has %d lines, want a header and 2 rows:\n%s", lines, b.String())
	}
	b.Reset()
	if err := WriteTable(&b, rows); err != nil || !strings.Contains(b.String(), "conv_p99_ms") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
	dir := t.TempDir()
	for _, f := range []string{"curve.svg", "curve.png"} {
		if err := Plot(filepath.Join(dir, f), rows[:1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := Plot(filepath.Join(dir, "sweep.svg"), rows); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "sweep.svg"))
	if err != nil || !bytes.Contains(svg, []byte("p99 convergence")) || !bytes.Contains(svg, []byte("convergence time (ms)")) {
		t.Errorf("sweep plot lacks its legend or axis title (%v)", err)
	}
	if err := Plot(filepath.Join(dir, "x.jpg"), rows); err == nil {
		t.Error("plotted to .jpg")
	}
}
