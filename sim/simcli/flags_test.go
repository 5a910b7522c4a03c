package simcli

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/sim"
)

func TestParseArgs(t *testing.T) {
	o, err := ParseArgs(strings.Fields("--nodes 20 --profile local --interval 50ms --fanout 4 --loss 0.05 "+
		"--latency 1ms..3ms --changes 10 --duration 20s --timeout 8s --partition 2s..4s:half "+
		"--partition 5s:0-3|4,5 --crash 3@5s --crash 4@6s..9s --churn connect=1,fail=2 --seed 9 --format csv"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.Config
	if c.Nodes != 20 || c.Profile != "local" || c.GossipInterval != 50*time.Millisecond || c.GossipNodes != 4 ||
		c.Loss != 0.05 || c.Latency.Kind != sim.LatencyUniform || c.Changes != 10 || c.Duration != 20*time.Second ||
		c.Timeout != 8*time.Second || c.Seed != 9 || o.Format != "csv" {
		t.Fatalf("parsed %+v", c)
	}
	if len(c.Partitions) != 2 || len(c.Partitions[0].Groups[0]) != 10 || c.Partitions[0].Heal != 4*time.Second {
		t.Errorf("half partition: %+v", c.Partitions[0])
	}
	if g := c.Partitions[1].Groups; len(g) != 2 || len(g[0]) != 4 || len(g[1]) != 2 || c.Partitions[1].Heal != 0 {
		t.Errorf("explicit partition: %+v", c.Partitions[1])
	}
	if c.Crashes[1] != (sim.Crash{Node: 4, At: 6 * time.Second, Restart: 9 * time.Second}) {
		t.Errorf("crash: %+v", c.Crashes[1])
	}
	if c.Churn != (sim.Churn{Connect: 1, Fail: 2}) {
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

// --rate gives the actions as a rate over the load window, instead of
// --changes; giving both is an error, and the default count applies only
// when neither is given.
func TestParseRate(t *testing.T) {
	o, err := ParseArgs(strings.Fields("--nodes 5 --rate 200 --duration 2s"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c := o.Config; c.Rate != 200 || c.Changes != 0 || c.Window != time.Second {
		t.Errorf("--rate 200 --duration 2s: rate %v, changes %d, window %v", c.Rate, c.Changes, c.Window)
	}
	o, err = ParseArgs(nil, io.Discard)
	if err != nil || o.Config.Changes != sim.DefaultConfig().Changes || o.Config.Rate != 0 {
		t.Errorf("no flags: %v, changes %d, rate %v", err, o.Config.Changes, o.Config.Rate)
	}
	for _, bad := range []string{"--rate 10 --changes 50", "--rate -1", "--rate NaN", "--rate +Inf", "--rate x"} {
		if _, err := ParseArgs(strings.Fields(bad), io.Discard); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
	_, err = ParseArgs(strings.Fields("--rate 10 --changes 50"), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("--rate with --changes: %v, want an error saying both are set", err)
	}
	o, err = ParseArgs(strings.Fields("--nodes 5 --duration 4s --sweep rate=10,20"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	runs, err := o.Runs()
	if err != nil || len(runs) != 2 || runs[0].Rate != 10 || runs[1].Rate != 20 || runs[1].Changes != 0 {
		t.Errorf("sweep of rate: %+v, %v", runs, err)
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
	for _, name := range []string{"nodes", "profile", "interval", "fanout", "loss", "latency", "changes", "rate", "duration",
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
