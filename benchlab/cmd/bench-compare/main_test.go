package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

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

func TestParseRates(t *testing.T) {
	got, err := parseRates("20000, 50000,max", 10000, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want := []rate{{"20000", 500 * time.Millisecond}, {"50000", 200 * time.Millisecond}, {"max", 20 * time.Millisecond}}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// 19,000 sessions at 20,000/s: 950 ms; at 50,000/s: 380 ms
	got, err = parseRates("20000,50000", 19000, 0)
	if err != nil || got[0].heartbeat != 950*time.Millisecond || got[1].heartbeat != 380*time.Millisecond {
		t.Fatalf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "fast", "0", "-5", "20000,", "50000000"} {
		if _, err := parseRates(bad, 10000, 20*time.Millisecond); err == nil {
			t.Errorf("parseRates(%q) accepted", bad)
		}
	}
	if _, err := parseRates("max", 10000, 0); err == nil {
		t.Error("max without a heartbeat accepted")
	}
}

func TestWriteRates(t *testing.T) {
	res := compare.Result{Figures: []compare.Figure{
		{Metric: "heartbeats_per_core_second", Median: map[string]float64{"rollcall": 60000, "redis": 20000},
			Ratios: []compare.Ratio{{Of: "rollcall", To: "redis", Rounds: []float64{3, 2.9, 3.1}, Median: 3, Min: 2.9, Max: 3.1}}},
		{Metric: "heartbeats_per_second", Median: map[string]float64{"rollcall": 19990, "redis": 20010},
			Ratios: []compare.Ratio{{Of: "rollcall", To: "redis", Rounds: []float64{1}, Median: 1, Min: 1, Max: 1}}},
		{Metric: "rss_per_session_bytes", Median: map[string]float64{"rollcall": 3000}},
	}}
	var b bytes.Buffer
	writeRates(&b, []string{"rollcall", "redis"}, []rateResult{{Rate: "20000", Heartbeat: "500ms", Result: res}})
	want := "rate 20000  heartbeat 500ms   hb/s rollcall 19990 redis 20010 rollcall/redis 1.00 (1.00-1.00)  hb/core-s rollcall 60000 redis 20000 rollcall/redis 3.00 (2.90-3.10)  rss B/session rollcall 3000 redis -\n"
	if b.String() != want {
		t.Fatalf("got\n%q\nwant\n%q", b.String(), want)
	}
}

func TestRunRefusesRatesWithHeartbeat(t *testing.T) {
	var out, errs bytes.Buffer
	err := run(context.Background(), []string{"run", "--rates", "20000", "--heartbeat", "1s"}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("err %v", err)
	}
	err = run(context.Background(), []string{"run", "--rates", "fast"}, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "--rates") {
		t.Fatalf("err %v", err)
	}
}
