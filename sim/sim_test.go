package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

func run(t testing.TB, cfg Config) *Result {
	t.Helper()
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func small() Config {
	c := DefaultConfig()
	c.Nodes = 12
	c.Changes = 40
	c.Duration = 30 * time.Second
	return c
}

// The same scenario and seed give the same bytes, faults and all; another
// seed gives other bytes.
func TestDeterminism(t *testing.T) {
	cfg := small()
	cfg.Loss = 0.05
	cfg.Latency = Latency{Kind: LatencyLognormal, Min: 2 * time.Millisecond, Sigma: 0.5}
	cfg.Crashes = []Crash{{Node: 3, At: 8 * time.Second, Restart: 20 * time.Second}}
	cfg.Partitions = []Partition{{At: 5 * time.Second, Heal: 12 * time.Second, Groups: [][]int{{0, 1, 2}}}}
	encode := func(c Config) []byte {
		b, err := json.Marshal(run(t, c))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := encode(cfg), encode(cfg)
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different output:\n%s\n%s", a, b)
	}
	cfg.Seed++
	if bytes.Equal(a, encode(cfg)) {
		t.Fatal("different seeds gave identical output")
	}
}

// With no loss and no failures every change reaches every node, in eager
// and epidemic mode alike.
func TestNoFaultsConvergesFully(t *testing.T) {
	for _, c := range []struct {
		nodes, threshold int
	}{{8, 64}, {40, 64}, {40, 8}} {
		cfg := small()
		cfg.Nodes, cfg.EagerThreshold = c.nodes, c.threshold
		cfg.Churn = Churn{Connect: 1, Status: 1}
		r := run(t, cfg)
		if r.ConvergedFraction != 1 || r.Unconverged != 0 {
			t.Errorf("%d nodes (%s): converged fraction %v, %d unconverged", c.nodes, r.Mode, r.ConvergedFraction, r.Unconverged)
		}
		if r.FalseOffline != 0 && r.Mode == "eager" {
			t.Errorf("%d nodes eager: %d false offline without faults", c.nodes, r.FalseOffline)
		}
	}
}

// No change reaches every node faster than one network latency (an
// isolated write goes out at once; one within a write window waits more).
func TestNeverFasterThanTheNetwork(t *testing.T) {
	for _, lat := range []Latency{
		{Kind: LatencyFixed, Min: 5 * time.Millisecond},
		{Kind: LatencyUniform, Min: 3 * time.Millisecond, Max: 9 * time.Millisecond},
	} {
		for _, nodes := range []int{6, 80} {
			cfg := small()
			cfg.Nodes, cfg.Latency = nodes, lat
			r := run(t, cfg)
			floor := ms(lat.Floor())
			if r.Convergence.Min < floor {
				t.Errorf("%d nodes, latency %v: fastest convergence %vms < %vms", nodes, lat, r.Convergence.Min, floor)
			}
			if r.NodeConvergence.Samples == 0 {
				t.Fatal("no node convergence samples")
			}
		}
	}
}

// mean averages a metric over seeds.
func mean(t *testing.T, cfg Config, seeds int, metric func(*Result) float64) float64 {
	var sum float64
	for i := range seeds {
		cfg.Seed = uint64(100 + i)
		sum += metric(run(t, cfg))
	}
	return sum / float64(seeds)
}

func p90(r *Result) float64 { return r.Convergence.P90 }

// More loss never converges faster, on average over seeds.
func TestMoreLossIsNeverFaster(t *testing.T) {
	if testing.Short() {
		t.Skip("several runs per point")
	}
	prev := -1.0
	for _, loss := range []float64{0, 0.05, 0.2} {
		cfg := small()
		cfg.Loss = loss
		cfg.Churn = Churn{Connect: 1, Status: 1}
		cfg.Latency = Latency{Kind: LatencyUniform, Min: time.Millisecond, Max: 5 * time.Millisecond}
		got := mean(t, cfg, 4, p90)
		t.Logf("loss %v: mean p90 convergence %.1fms", loss, got)
		if got < prev {
			t.Errorf("loss %v converges faster (%.1fms) than less loss (%.1fms)", loss, got, prev)
		}
		prev = got
	}
}

// More nodes never converge faster, on average over seeds: in eager mode
// the slowest of more independent paths, in epidemic mode more rounds.
func TestMoreNodesIsNeverFaster(t *testing.T) {
	if testing.Short() {
		t.Skip("several runs per point")
	}
	for _, tc := range []struct {
		name      string
		threshold int
		nodes     []int
	}{{"eager", 64, []int{4, 16, 60}}, {"epidemic", 2, []int{16, 64, 200}}} {
		prev := -1.0
		for _, n := range tc.nodes {
			cfg := small()
			cfg.Nodes, cfg.EagerThreshold = n, tc.threshold
			cfg.Churn = Churn{Connect: 1, Status: 1}
			cfg.Latency = Latency{Kind: LatencyUniform, Min: time.Millisecond, Max: 5 * time.Millisecond}
			got := mean(t, cfg, 3, func(r *Result) float64 { return r.Convergence.P50 })
			t.Logf("%s %d nodes: mean p50 convergence %.1fms", tc.name, n, got)
			if got < prev {
				t.Errorf("%s: %d nodes converge faster (%.1fms) than fewer (%.1fms)", tc.name, n, got, prev)
			}
			prev = got
		}
	}
}

// Crash detection follows memberlist's formulas: no faster than one probe
// interval plus the minimum suspicion timeout (dissem.SuspicionTimeout, all
// confirmations in), no slower than the lease or a few probe intervals past
// it.
func TestCrashDetectionMatchesMemberlist(t *testing.T) {
	for _, tc := range []struct {
		profile string
		nodes   int
	}{{"lan", 16}, {"lan", 48}, {"local", 24}} {
		cfg := small()
		cfg.Profile, cfg.Nodes = tc.profile, tc.nodes
		cfg.Duration = 60 * time.Second
		cfg.LeaseTimeout = time.Hour // memberlist alone
		cfg.Crashes = []Crash{{Node: 1, At: 10 * time.Second}}
		r := run(t, cfg)
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		lo := cfg.ProbeInterval + dissem.SuspicionTimeout(cfg.SuspicionMult, cfg.Nodes, cfg.ProbeInterval)
		// k confirmations arrive about one probe interval apart.
		hi := lo + time.Duration(cfg.SuspicionMult+2)*cfg.ProbeInterval
		got := time.Duration(r.NodeCrash.P50 * 1e6)
		t.Logf("%s %d nodes: crash to offline p50 %v (expected %v..%v)", tc.profile, tc.nodes, got, lo, hi)
		if got < lo || got > hi {
			t.Errorf("%s %d nodes: crash to offline p50 %v outside %v..%v", tc.profile, tc.nodes, got, lo, hi)
		}
		if r.NodeCrash.Samples != tc.nodes-1 || r.NodeCrash.Censored != 0 {
			t.Errorf("crash samples %d (censored %d), want %d", r.NodeCrash.Samples, r.NodeCrash.Censored, tc.nodes-1)
		}
	}
}

// With a short lease, the lease expires first: detection is the lease
// (less the time since the last alive announcement) plus a lease tick.
func TestLeaseBoundsCrashDetection(t *testing.T) {
	cfg := small()
	cfg.Profile = "wan" // slow memberlist: 5s probes
	cfg.LeaseTimeout = 3 * time.Second
	cfg.Crashes = []Crash{{Node: 2, At: 10 * time.Second}}
	r := run(t, cfg)
	got := time.Duration(r.NodeCrash.Max * 1e6)
	if got < 3*time.Second-time.Second || got > 3*time.Second+250*time.Millisecond {
		t.Errorf("crash to offline max %v, want about the 3s lease", got)
	}
}

// A silent client is shown offline after the session timeout (less the
// time since its last request) plus a sweep and dissemination.
func TestSilentFailureDetection(t *testing.T) {
	cfg := small()
	cfg.Timeout = 6 * time.Second
	cfg.Heartbeat = 2 * time.Second
	cfg.Churn = Churn{Connect: 1, Fail: 1}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := run(t, cfg)
	d := r.ClientFailure
	if d.Samples == 0 {
		t.Fatal("no client failure samples")
	}
	if lo, hi := ms(cfg.Timeout-cfg.Heartbeat), ms(cfg.Timeout+cfg.SweepInterval+100*time.Millisecond); d.P50 < lo || d.Max > hi {
		t.Errorf("client failure to offline p50 %v max %v, want within %v..%v", d.P50, d.Max, lo, hi)
	}
}

// Check mode verifies the replicas' invariants and the lease index after
// every event, through crashes, restarts, partitions and loss.
func TestCheckedRun(t *testing.T) {
	cfg := small()
	cfg.Nodes = 10
	cfg.Check = true
	cfg.Loss = 0.1
	cfg.LeaseTimeout = 2 * time.Second
	cfg.AliveInterval = 200 * time.Millisecond
	cfg.Crashes = []Crash{{Node: 4, At: 5 * time.Second, Restart: 12 * time.Second}}
	cfg.Partitions = []Partition{{At: 14 * time.Second, Heal: 20 * time.Second, Groups: [][]int{{0, 1, 2, 3}}}}
	r := run(t, cfg)
	if r.Changes == 0 {
		t.Fatal("no changes")
	}
}

func TestJSONKeys(t *testing.T) {
	r := run(t, small())
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"nodes", "fanout", "interval_ms", "loss", "convergence_ms", "converged_fraction",
		"bytes_per_node_per_s", "messages_per_node_per_s", "copies_per_change", "offline_detection_ms",
		"false_offline", "ghost_ms"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	for _, k := range []string{"p50", "p90", "p99", "max"} {
		if _, ok := m["convergence_ms"].(map[string]any)[k]; !ok {
			t.Errorf("convergence_ms lacks %q", k)
		}
	}
	for _, k := range []string{"p50", "p99"} {
		if _, ok := m["offline_detection_ms"].(map[string]any)[k]; !ok {
			t.Errorf("offline_detection_ms lacks %q", k)
		}
	}
}

// A restarted node starts with an empty replica: a delta message it applied
// in its previous life, still relayed when it comes back, is applied again
// rather than skipped as a duplicate.
func TestRestartedNodeAppliesAgain(t *testing.T) {
	for _, threshold := range []int{64, 4} { // eager, epidemic
		cfg := small()
		cfg.EagerThreshold = threshold
		// A scenario with a restart: the simulator then keeps what a
		// restarted node must apply again. This test crashes and restarts
		// node 1 itself, before the scheduled ones.
		cfg.Crashes = []Crash{{Node: 1, At: cfg.Duration - 2*time.Second, Restart: cfg.Duration - time.Second}}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		owner, peer := s.nodes[0], int32(1)
		d, err := owner.r.PutLocal(crdt.Session{User: "u", Device: "d", ID: "s1", Epoch: 1,
			State: crdt.StateActive, Status: crdt.StatusAvailable}, s.wall())
		if err != nil {
			t.Fatal(err)
		}
		dm, err := dissem.NewDeltas([]crdt.Delta{d})
		if err != nil {
			t.Fatal(err)
		}
		m := s.newUmsg(dm)
		held := func() bool {
			_, ok := s.nodes[peer].r.Session(crdt.Key{User: "u", Device: "d"})
			return ok
		}
		s.handleUser(s.nodes[peer], m)
		if !held() {
			t.Fatalf("threshold %d: the peer did not apply the delta", threshold)
		}
		s.crash(peer)
		s.restart(peer)
		if held() {
			t.Fatalf("threshold %d: a restarted node kept its old replica", threshold)
		}
		s.handleUser(s.nodes[peer], m)
		if !held() {
			t.Fatalf("threshold %d: the restarted node skipped a delta its previous life applied", threshold)
		}
	}
}

// Rate gives round(Rate × Window) client actions, spread over the window:
// 200/s over a 2s run's default 1s window is 200 actions, each within the
// window and about half in each half of it.
func TestRateSpreadsActionsOverTheWindow(t *testing.T) {
	cfg := Config{Nodes: 5, Rate: 200, Duration: 2 * time.Second, Seed: 3}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	window := int64(s.cfg.Window)
	if s.cfg.Window != time.Second || s.cfg.Changes != 0 {
		t.Fatalf("window %v, changes %d: want the default window of half the run and no count", s.cfg.Window, s.cfg.Changes)
	}
	var n, firstHalf int
	for s.q.len() > 0 {
		e := s.q.pop()
		if e.kind != evChange {
			continue
		}
		n++
		if e.at < 0 || e.at >= window {
			t.Errorf("action at %v outside the window [0, %v)", time.Duration(e.at), s.cfg.Window)
		}
		if e.at < window/2 {
			firstHalf++
		}
	}
	if n != 200 {
		t.Errorf("%d actions scheduled, want 200", n)
	}
	if firstHalf < 60 || firstHalf > 140 {
		t.Errorf("%d of %d actions in the first half of the window: not spread over it", firstHalf, n)
	}
	if r := run(t, cfg); r.Actions != 200 {
		t.Errorf("result reports %d actions, want 200", r.Actions)
	}
	// A rate over an explicit window: 50/s over 3s of a 10s run.
	cfg = Config{Nodes: 5, Rate: 50, Window: 3 * time.Second, Duration: 10 * time.Second, Seed: 3}
	if r := run(t, cfg); r.Actions != 150 {
		t.Errorf("50/s over 3s: %d actions, want 150", r.Actions)
	}
}

// Rate and Changes are alternatives; a rate must be a finite, non-negative
// number that gives at least one action; with neither the default count
// applies.
func TestRateValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"both", Config{Changes: 10, Rate: 5}, "both set"},
		{"default changes and rate", func() Config { c := DefaultConfig(); c.Rate = 5; return c }(), "both set"},
		{"negative", Config{Rate: -1}, "rate"},
		{"NaN", Config{Rate: math.NaN()}, "rate"},
		{"Inf", Config{Rate: math.Inf(1)}, "rate"},
		{"too low", Config{Rate: 0.01, Duration: 10 * time.Second}, "no client actions"},
		{"too many", Config{Rate: 1e300}, "client actions"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	c := Config{}
	if err := c.Validate(); err != nil || c.Changes != DefaultConfig().Changes || c.actions() != c.Changes {
		t.Errorf("neither set: %v, changes %d", err, c.Changes)
	}
	c = Config{Rate: 4, Duration: 10 * time.Second}
	if err := c.Validate(); err != nil || c.Changes != 0 || c.actions() != 20 {
		t.Errorf("rate 4 over 5s: %v, changes %d, actions %d", err, c.Changes, c.actions())
	}
	// Validating again (as New does after a caller's Validate) keeps it valid.
	if err := c.Validate(); err != nil {
		t.Errorf("second Validate: %v", err)
	}
}
