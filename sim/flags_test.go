package sim

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseLatency(t *testing.T) {
	for in, want := range map[string]Latency{
		"1ms":               {Kind: LatencyFixed, Min: time.Millisecond},
		"1ms..5ms":          {Kind: LatencyUniform, Min: time.Millisecond, Max: 5 * time.Millisecond},
		"normal:2ms,500us":  {Kind: LatencyNormal, Min: 2 * time.Millisecond, Max: 500 * time.Microsecond},
		"lognormal:2ms,0.5": {Kind: LatencyLognormal, Min: 2 * time.Millisecond, Sigma: 0.5},
	} {
		got, err := ParseLatency(in)
		if err != nil || got != want {
			t.Errorf("ParseLatency(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if back, _ := ParseLatency(got.String()); back != got {
			t.Errorf("%q does not round-trip: %q", in, got.String())
		}
	}
	for _, bad := range []string{"", "fast", "5ms..1ms", "-1ms", "lognormal:0s,1", "lognormal:1ms", "normal:1ms"} {
		if _, err := ParseLatency(bad); err == nil {
			t.Errorf("ParseLatency(%q) accepted", bad)
		}
	}
}

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs(strings.Fields("--nodes 20 --profile local --interval 50ms --fanout 4 --loss 0.05 "+
		"--latency 1ms..3ms --changes 10 --duration 20s --timeout 8s --partition 2s..4s:half "+
		"--partition 5s:0-3|4,5 --crash 3@5s --crash 4@6s..9s --churn connect=1,fail=2 --seed 9 --format csv"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.Config
	if c.Nodes != 20 || c.Profile != "local" || c.GossipInterval != 50*time.Millisecond || c.GossipNodes != 4 ||
		c.Loss != 0.05 || c.Latency.Kind != LatencyUniform || c.Changes != 10 || c.Duration != 20*time.Second ||
		c.Timeout != 8*time.Second || c.Seed != 9 || o.Format != "csv" {
		t.Fatalf("parsed %+v", c)
	}
	if len(c.Partitions) != 2 || len(c.Partitions[0].Groups[0]) != 10 || c.Partitions[0].Heal != 4*time.Second {
		t.Errorf("half partition: %+v", c.Partitions[0])
	}
	if g := c.Partitions[1].Groups; len(g) != 2 || len(g[0]) != 4 || len(g[1]) != 2 || c.Partitions[1].Heal != 0 {
		t.Errorf("explicit partition: %+v", c.Partitions[1])
	}
	if c.Crashes[1] != (Crash{Node: 4, At: 6 * time.Second, Restart: 9 * time.Second}) {
		t.Errorf("crash: %+v", c.Crashes[1])
	}
	if c.Churn != (Churn{Connect: 1, Fail: 2}) {
		t.Errorf("churn: %+v", c.Churn)
	}
	// The profile fills what the flags left.
	if c.ProbeTimeout != 200*time.Millisecond || c.RetransmitMult != 2 {
		t.Errorf("local profile defaults not applied: %+v", c)
	}
	for _, bad := range []string{"--nodes 1", "--loss 1", "--format xml", "--crash 40@1s", "--profile moon",
		"--partition 5s:0-99", "--sweep nodes", "--sweep bogus=1,2", "--churn status=1", "extra"} {
		if _, err := ParseArgs(strings.Fields(bad), io.Discard); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func TestSweepRuns(t *testing.T) {
	o, err := ParseArgs(strings.Fields("--nodes 6 --changes 5 --duration 5s --sweep nodes=4,8"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := o.Runs()
	if err != nil || len(runs) != 2 || runs[0].Nodes != 4 || runs[1].Nodes != 8 || runs[1].Changes != 5 {
		t.Fatalf("runs %+v, %v", runs, err)
	}
}

// Every flag's help says its unit or its choices.
func TestHelpExplainsEveryFlag(t *testing.T) {
	var o Options
	fs := NewFlagSet(&o, io.Discard)
	units := []string{"duration", "count", "fraction", "ms", "seed", "lan", "table", "FILE", "PARAM", "W", "NODE", "AT", "fixed"}
	for _, name := range []string{"nodes", "profile", "interval", "fanout", "loss", "latency", "changes", "duration",
		"timeout", "partition", "crash", "churn", "seed", "format", "plot", "sweep"} {
		f := fs.Lookup(name)
		if f == nil {
			t.Errorf("no --%s flag", name)
			continue
		}
		ok := false
		for _, u := range units {
			ok = ok || strings.Contains(f.Usage, u)
		}
		if !ok {
			t.Errorf("--%s help names no unit: %q", name, f.Usage)
		}
	}
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
