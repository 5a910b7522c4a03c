package compare

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/bench"
	"github.com/rollcall/rollcall/benchlab/baseline/redistest"
)

// testdata/rollcall-bench.json is `rollcall bench --format json` against
// three baseline gateways (1000 sessions, 500 ms heartbeat, 5 s window).
func TestSampleOfRollcallBenchReport(t *testing.T) {
	b, err := os.ReadFile("testdata/rollcall-bench.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sampleOf(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Established != 1000 || s.Failed != 0 || s.Lost != 0 || s.Heartbeats != 10010 || s.StatusOK != 50 {
		t.Fatalf("sessions, heartbeats, changes: %+v", s)
	}
	if s.ServerCPUSeconds != 2.21 || s.HeartbeatsPerCore != 10010/2.21 {
		t.Fatalf("cpu %v, hb/core-s %v", s.ServerCPUSeconds, s.HeartbeatsPerCore)
	}
	if s.ServerCores < 0.44 || s.ServerCores > 0.45 { // 2.21 core-seconds over 5.0002 s
		t.Fatalf("server cores %v", s.ServerCores)
	}
	if s.RSSPerSession != 46374.912 || s.Propagation.Count != 1600 || s.Propagation.P99 != 526.385151 {
		t.Fatalf("rss %v, propagation %+v", s.RSSPerSession, s.Propagation)
	}
	if s.ProbePropagation.Count != 200 || s.ProbePropagation.P99 != 4.25 {
		t.Fatalf("probe propagation %+v", s.ProbePropagation)
	}
	if s.Report == nil || len(s.Report.Server.PIDs) != 4 {
		t.Fatalf("report kept: %+v", s.Report)
	}
}

func TestSampleOfRefusesWhatIsNotAReport(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"", "not a rollcall bench JSON report"},
		{"starting\n{\"duration_s\": 5}", "not a rollcall bench JSON report"},
		{`{"duration_s": 0, "sessions": {"requested": 10}}`, "no measured window"},
		{`{"duration_s": 5, "sessions": {"requested": 0}}`, "no sessions"},
		{`{"duration_s": 5, "sessions": {"requested": 10}, "server": {"cpu_core_seconds": null}}`, "no server CPU"},
		{`{"duration_s": "5"}`, "not a rollcall bench JSON report"},
	} {
		if _, err := sampleOf([]byte(c.out)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sampleOf(%q): %v, want an error saying %q", c.out, err, c.want)
		}
	}
}

func TestSummarizePairsRounds(t *testing.T) {
	var samples []Sample
	for r, v := range [][2]float64{{100, 50}, {90, 60}, {120, 40}} {
		samples = append(samples, Sample{System: Rollcall, Round: r + 1, HeartbeatsPerCore: v[0], ServerCPUSeconds: 1},
			Sample{System: Redis, Round: r + 1, HeartbeatsPerCore: v[1], ServerCPUSeconds: 1})
	}
	figs := summarize([]string{Rollcall, Redis}, samples)
	i := slices.IndexFunc(figs, func(f Figure) bool { return f.Metric == "heartbeats_per_core_second" })
	f := figs[i]
	if f.Median[Rollcall] != 100 || f.Median[Redis] != 50 {
		t.Fatalf("medians %v", f.Median)
	}
	if len(f.Ratios) != 1 {
		t.Fatalf("ratios %+v", f.Ratios)
	}
	r := f.Ratios[0]
	if r.Of != Rollcall || r.To != Redis || !slices.Equal(r.Rounds, []float64{2, 1.5, 3}) || r.Median != 2 || r.Min != 1.5 || r.Max != 3 {
		t.Fatalf("ratio %+v", r)
	}
	// one system: medians, no ratios
	one := summarize([]string{Rollcall}, samples[:1])
	if one[i].Median[Rollcall] != 100 || one[i].Ratios != nil {
		t.Fatalf("one system: %+v", one[i])
	}
}

// With three systems every figure has Rollcall's ratio to each baseline;
// a figure a system did not measure has no median for it and no ratio to
// it, and rounds are paired by number whatever the systems' order.
func TestSummarizeThreeSystems(t *testing.T) {
	prop := func(p50 float64) bench.Quantiles { return bench.Quantiles{Count: 10, P50: p50} }
	var samples []Sample
	for r, v := range [][3]float64{{100, 50, 10}, {90, 60, 20}, {120, 40, 30}} {
		samples = append(samples,
			Sample{System: Centrifuge, Round: r + 1, HeartbeatsPerCore: v[2], ServerCPUSeconds: 1, Propagation: prop(4)},
			Sample{System: Rollcall, Round: r + 1, HeartbeatsPerCore: v[0], ServerCPUSeconds: 1, Propagation: prop(1),
				BeyondTimeout: bench.Quantiles{Count: 1, P50: 200}},
			Sample{System: Redis, Round: r + 1, HeartbeatsPerCore: v[1], ServerCPUSeconds: 1, Propagation: prop(8),
				BeyondTimeout: bench.Quantiles{Count: 1, P50: 2000}})
	}
	figs := summarize([]string{Centrifuge, Rollcall, Redis}, samples)
	fig := func(m string) Figure {
		i := slices.IndexFunc(figs, func(f Figure) bool { return f.Metric == m })
		if i < 0 {
			t.Fatalf("no figure %s", m)
		}
		return figs[i]
	}
	hb := fig("heartbeats_per_core_second")
	if hb.Median[Rollcall] != 100 || hb.Median[Redis] != 50 || hb.Median[Centrifuge] != 20 {
		t.Fatalf("medians %v", hb.Median)
	}
	if len(hb.Ratios) != 2 || hb.Ratios[0].To != Centrifuge || hb.Ratios[1].To != Redis {
		t.Fatalf("ratios %+v", hb.Ratios)
	}
	if c := hb.Ratios[0]; c.Of != Rollcall || !slices.Equal(c.Rounds, []float64{10, 4.5, 4}) || c.Median != 4.5 || c.Min != 4 || c.Max != 10 {
		t.Fatalf("rollcall/centrifuge %+v", c)
	}
	if r := hb.Ratios[1]; !slices.Equal(r.Rounds, []float64{2, 1.5, 3}) || r.Median != 2 {
		t.Fatalf("rollcall/redis %+v", r)
	}
	p := fig("propagation_p50_ms")
	if p.Median[Centrifuge] != 4 || len(p.Ratios) != 2 || p.Ratios[0].Median != 0.25 || p.Ratios[1].Median != 0.125 {
		t.Fatalf("propagation %+v", p)
	}
	off := fig("offline_beyond_timeout_p50_ms")
	if _, ok := off.Median[Centrifuge]; ok || off.Median[Rollcall] != 200 {
		t.Fatalf("offline medians %v: Centrifuge measured none", off.Median)
	}
	if len(off.Ratios) != 1 || off.Ratios[0].To != Redis || off.Ratios[0].Median != 0.1 {
		t.Fatalf("offline ratios %+v", off.Ratios)
	}
}

// testdata/centrifuge-load.json is `centrifuge-baseline load` against
// three Centrifuge nodes sharing one redis-server, as bench-compare runs
// it (2000 sessions, 5 s ping, 10 s window).
func TestSampleOfCentrifugeLoad(t *testing.T) {
	b, err := os.ReadFile("testdata/centrifuge-load.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := sampleOfCentrifuge(b)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Centrifuge
	if r == nil || len(r.PIDs) != 4 {
		t.Fatalf("result kept: %+v", r)
	}
	if s.Established != r.Subscribed || s.Established == 0 || s.Failed != r.Failed || s.Lost != uint64(r.Lost) {
		t.Fatalf("sessions: sample %+v, result %+v", s, r)
	}
	if s.Heartbeats != uint64(r.Pings) || s.Heartbeats == 0 || s.HeartbeatsPerSec != r.PingsPerSec {
		t.Fatalf("pings: sample %d %v, result %d %v", s.Heartbeats, s.HeartbeatsPerSec, r.Pings, r.PingsPerSec)
	}
	if s.ServerCPUSeconds != r.ServerCPU || s.HeartbeatsPerCore != float64(r.Pings)/r.ServerCPU || s.ServerCores != r.ServerCPU/r.HoldSeconds {
		t.Fatalf("cpu: sample %v %v %v, result %+v", s.ServerCPUSeconds, s.HeartbeatsPerCore, s.ServerCores, r)
	}
	if s.RSSPerSession != r.RSSPerSession || s.RSSPerSession == 0 || s.Propagation != r.Propagation || s.Propagation.Count == 0 {
		t.Fatalf("rss %v, propagation %+v", s.RSSPerSession, s.Propagation)
	}
	if s.StatusOK != uint64(r.StatusOK) || s.StatusOK == 0 || s.BeyondTimeout.Count != 0 {
		t.Fatalf("changes %d, offline %+v", s.StatusOK, s.BeyondTimeout)
	}
}

func TestSampleOfCentrifugeRefusesWhatIsNotAResult(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"", "not a centrifuge-baseline load JSON result"},
		{`{"sessions": "10"}`, "not a centrifuge-baseline load JSON result"},
		{`{"sessions": 10, "hold_seconds": 0, "server_pids": [1]}`, "no measured window"},
		{`{"sessions": 0, "hold_seconds": 5, "server_pids": [1]}`, "no sessions"},
		{`{"sessions": 10, "hold_seconds": 5}`, "no server processes"},
	} {
		if _, err := sampleOfCentrifuge([]byte(c.out)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sampleOfCentrifuge(%q): %v, want an error saying %q", c.out, err, c.want)
		}
	}
}

func TestCentrifugeArgs(t *testing.T) {
	cfg := Config{Sessions: 500, Heartbeat: 500e6, Timeout: 15e9, StatusRate: -1, Subscribers: 20, Warmup: -1}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	sys := &system{name: Centrifuge, addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, pids: []int{7, 8, 9}}
	got := strings.Join(centrifugeLoadArgs(cfg, sys), " ")
	want := "bin/centrifuge-baseline load --url ws://127.0.0.1:1/connection/websocket,ws://127.0.0.1:2/connection/websocket" +
		" --sessions 500 --connect-rate 2000 --status-rate 0 --subscribers 20 --watch 1000 --settle -1ns --hold 30s --pids 7,8,9"
	if got != want {
		t.Fatalf("load argv\n got %s\nwant %s", got, want)
	}
	cfg.Warmup = 5e9
	if got := strings.Join(centrifugeLoadArgs(cfg, sys), " "); !strings.Contains(got, " --settle 5s ") {
		t.Fatalf("load argv with a warmup: %s", got)
	}
	serve := strings.Join(centrifugeServeArgs(cfg, "127.0.0.1:3", "127.0.0.1:6379"), " ")
	if want := "bin/centrifuge-baseline serve --addr 127.0.0.1:3 --redis 127.0.0.1:6379 --ping 500ms --presence-update 500ms --presence-ttl 15s"; serve != want {
		t.Fatalf("serve argv\n got %s\nwant %s", serve, want)
	}
}

// The Centrifuge system takes the Centrifuge load's argv and decoder:
// the fake load prints a result and receives the flags it is given.
func TestRunLoadCentrifuge(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	script := filepath.Join(dir, "load.sh")
	b, err := os.ReadFile("testdata/centrifuge-load.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "out.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" > "+argsFile+"\ncat "+filepath.Join(dir, "out.json")+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := Config{CentrifugeLoad: []string{script}, Sessions: 2000, Dir: dir, LoadCPUs: "0"}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	sys := &system{name: Centrifuge, addrs: []string{"127.0.0.1:1"}, pids: []int{os.Getpid()}, names: []string{"cgw1"}}
	s, err := runLoad(t.Context(), cfg, sys, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	if s.System != Centrifuge || s.Round != 2 || s.Centrifuge == nil || s.Report != nil {
		t.Fatalf("sample %+v", s)
	}
	if _, ok := s.CPUByProcess["cgw1"]; !ok {
		t.Fatalf("cpu by process %v", s.CPUByProcess)
	}
	got, err := os.ReadFile(argsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(got), "--url ws://127.0.0.1:1/connection/websocket --sessions 2000 ") {
		t.Fatalf("the load got %s", got)
	}
}

func TestLoadArgsAreRollcallBenchFlags(t *testing.T) {
	cfg := Config{Sessions: 500, Heartbeat: 200e6, SilentFailures: 3, StatusRate: -1}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	sys := &system{name: Redis, addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, pids: []int{7, 8}}
	got := strings.Join(loadArgs(cfg, sys), " ")
	want := "bin/rollcall bench --dev --addrs 127.0.0.1:1,127.0.0.1:2 --sessions 500 --procs 2 --connect-rate 2000" +
		" --heartbeat 200ms --status-rate 0 --subscribers 100 --watch 1000 --silent-failures 3 --silent-after 1s" +
		" --probe-rate 20 --warmup 5s --duration 30s --pids 7,8 --format json"
	if got != want {
		t.Fatalf("load argv\n got %s\nwant %s", got, want)
	}
	if cfg.Timeout != 600e6 {
		t.Fatalf("default timeout %v, want 3 heartbeats", cfg.Timeout)
	}
}

// With Raw the load is the raw generator, given rollcall bench's flags
// with none of the work it does not do; what it cannot measure is refused.
func TestRawLoadArgs(t *testing.T) {
	cfg := Config{Raw: true, Sessions: 19000, Heartbeat: 95e6}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	sys := &system{name: Rollcall, addrs: []string{"127.0.0.1:1"}, pids: []int{7}}
	got := strings.Join(loadArgs(cfg, sys), " ")
	want := "bin/hbgen bench --addrs 127.0.0.1:1 --sessions 19000 --procs 2 --connect-rate 2000" +
		" --heartbeat 95ms --status-rate 0 --subscribers 0 --watch 1000 --silent-failures 0 --silent-after 1s" +
		" --probe-rate 0 --warmup 5s --duration 30s --pids 7 --format json"
	if got != want {
		t.Fatalf("load argv\n got %s\nwant %s", got, want)
	}
	for _, bad := range []Config{
		{Raw: true, Systems: []string{Rollcall, Centrifuge}},
		{Raw: true, SilentFailures: 10},
		{Raw: true, Floor: true, FloorCommand: []string{"x"}},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("raw load with %+v accepted", bad)
		}
	}
}

func TestUnknownSystemRefused(t *testing.T) {
	cfg := Config{Systems: []string{"rollcall", "memcached"}}
	if err := cfg.defaults(); err == nil || !strings.Contains(err.Error(), `"memcached"`) {
		t.Fatalf("defaults: %v", err)
	}
	twice := Config{Systems: []string{"rollcall", "centrifuge", "centrifuge"}}
	if err := twice.defaults(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("defaults: %v", err)
	}
	three := Config{Systems: []string{"rollcall", "redis", "centrifuge"}}
	if err := three.defaults(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

func TestWaitRedis(t *testing.T) {
	addr := redistest.Start(t)
	if err := waitRedis(t.Context(), addr); err != nil {
		t.Fatal(err)
	}
}

// The servers' ports are distinct, free for TCP and UDP, and outside the
// kernel's ephemeral range, where an outbound connection could take one
// before its server binds it.
func TestFreePortsAreDistinctAndBelowTheEphemeralRange(t *testing.T) {
	var ps portSet
	seen := map[int]bool{}
	for range 200 {
		p, err := ps.freePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p >= ephemeralLow() {
			t.Fatalf("port %d is in the ephemeral range (from %d)", p, ephemeralLow())
		}
	}
}
