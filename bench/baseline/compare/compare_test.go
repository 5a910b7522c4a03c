package compare

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rollcall/rollcall/bench/baseline/redistest"
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
		samples = append(samples, Sample{System: Rollcall, Round: r + 1, HeartbeatsPerCore: v[0]},
			Sample{System: Redis, Round: r + 1, HeartbeatsPerCore: v[1]})
	}
	figs := summarize([]string{Rollcall, Redis}, samples)
	i := slices.IndexFunc(figs, func(f Figure) bool { return f.Metric == "heartbeats_per_core_second" })
	f := figs[i]
	if f.Median[Rollcall] != 100 || f.Median[Redis] != 50 {
		t.Fatalf("medians %v", f.Median)
	}
	if !slices.Equal(f.Ratios, []float64{2, 1.5, 3}) || f.RatioMedian != 2 || f.RatioMin != 1.5 || f.RatioMax != 3 {
		t.Fatalf("ratios %v median %v spread %v-%v", f.Ratios, f.RatioMedian, f.RatioMin, f.RatioMax)
	}
	// one system: medians, no ratios
	one := summarize([]string{Rollcall}, samples[:1])
	if one[i].Median[Rollcall] != 100 || one[i].Ratios != nil {
		t.Fatalf("one system: %+v", one[i])
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
		" --warmup 5s --duration 30s --pids 7,8 --format json"
	if got != want {
		t.Fatalf("load argv\n got %s\nwant %s", got, want)
	}
	if cfg.Timeout != 600e6 {
		t.Fatalf("default timeout %v, want 3 heartbeats", cfg.Timeout)
	}
}

func TestUnknownSystemRefused(t *testing.T) {
	cfg := Config{Systems: []string{"rollcall", "memcached"}}
	if err := cfg.defaults(); err == nil || !strings.Contains(err.Error(), `"memcached"`) {
		t.Fatalf("defaults: %v", err)
	}
}

func TestWaitRedis(t *testing.T) {
	addr := redistest.Start(t)
	if err := waitRedis(t.Context(), addr); err != nil {
		t.Fatal(err)
	}
}
