package calibrate

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The medians of several runs are taken per measure and per side, each
// over its own values: the run with the median p50 need not be the run
// with the median p99.
func TestMedians(t *testing.T) {
	reports := []*Report{
		{Real: Measure{ConvP50: 3, ConvP99: 30, CrashP50: 500}, Sim: Measure{ConvP50: 4, ConvP99: 9, IndependentP99: 5}},
		{Real: Measure{ConvP50: 1, ConvP99: 8, CrashP50: 700}, Sim: Measure{ConvP50: 2, ConvP99: 10, IndependentP99: 4}},
		{Real: Measure{ConvP50: 2, ConvP99: 7, CrashP50: 600}, Sim: Measure{ConvP50: 3, ConvP99: 26, IndependentP99: 6}},
	}
	real, simm := Medians(reports)
	if real.ConvP50 != 2 || real.ConvP99 != 8 || real.CrashP50 != 600 {
		t.Errorf("real medians %+v, want p50 2, p99 8, crash 600", real)
	}
	if simm.ConvP50 != 3 || simm.ConvP99 != 10 || simm.IndependentP99 != 5 {
		t.Errorf("sim medians %+v, want p50 3, p99 10, independent p99 5", simm)
	}
	real, _ = Medians(reports[:2])
	if real.ConvP99 != 19 {
		t.Errorf("median of two p99s (30, 8) = %v, want their mean 19", real.ConvP99)
	}
	if reports[0].Real.ConvP99 != 30 {
		t.Error("Medians reordered the reports' values")
	}
}

// --runs below one is refused before any cluster starts.
func TestRunsFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Main(context.Background(), []string{"--runs", "0"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "--runs 0") {
		t.Fatalf("--runs 0: got %v, want an error naming it", err)
	}
	if out.Len() != 0 {
		t.Errorf("--runs 0 printed %q", out.String())
	}
}
