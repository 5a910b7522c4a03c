package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/benchlab/baseline/compare"
)

func TestWriteFigures(t *testing.T) {
	figs := []compare.Figure{
		{Metric: "heartbeats_per_core_second", Median: map[string]float64{"rollcall": 50000, "redis": 25000, "centrifuge": 10000},
			Ratios: []compare.Ratio{
				{Of: "rollcall", To: "redis", Rounds: []float64{2, 1.9, 2.1}, Median: 2, Min: 1.9, Max: 2.1},
				{Of: "rollcall", To: "centrifuge", Rounds: []float64{5, 4, 6}, Median: 5, Min: 4, Max: 6}}},
		{Metric: "offline_beyond_timeout_p50_ms", Median: map[string]float64{"rollcall": 200, "redis": 2000},
			Ratios: []compare.Ratio{{Of: "rollcall", To: "redis", Rounds: []float64{0.1}, Median: 0.1, Min: 0.1, Max: 0.1}}},
	}
	var b bytes.Buffer
	writeFigures(&b, []string{"rollcall", "redis", "centrifuge"}, figs)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"heartbeats_per_core_second      rollcall 5e+04  redis 2.5e+04  centrifuge 1e+04  rollcall/redis 2.00 (1.90-2.10 over 3 rounds)  rollcall/centrifuge 5.00 (4.00-6.00 over 3 rounds)",
		"offline_beyond_timeout_p50_ms   rollcall 200  redis 2000  centrifuge -  rollcall/redis 0.10 (0.10-0.10 over 1 rounds)",
	}
	if len(lines) != len(want) {
		t.Fatalf("got\n%s", b.String())
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d\n got %s\nwant %s", i, lines[i], want[i])
		}
	}
}
