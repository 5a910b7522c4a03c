package calibrate

import (
	"math"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/sim"
)

// Scenario is what both sides run: Nodes nodes with fast memberlist timers
// (the gossip tests' settings), Changes session writes at random owners over
// Window, then a crash of one session-owning node after Settle.
type Scenario struct {
	Nodes          int
	EagerThreshold int // below Nodes to force epidemic dissemination
	Changes        int
	Window         time.Duration
	Settle         time.Duration // after the window, before the crash
	Observe        time.Duration // after each crash
	Crashes        int           // nodes crashed one after the other (default 3)
	Seed           uint64
	// Latency is the simulator's one-way delay; zero means measure it on
	// the real cluster first (see Run).
	Latency sim.Latency
	// Host says whether the simulator gets the real cluster's measured
	// write delays (sim.Config.WriteDelays, see Run), which carry the
	// stalls that its nodes share with each other on one machine; false
	// leaves every packet to Latency, drawn independently.
	Host bool
	// Warmup is the number of single writes used to measure the real
	// cluster's delays, half before the scenario and half after it
	// (default Changes: the simulator's convergence p99 replays the
	// slowest 1% of the measured writes, which 40 writes, as once, left
	// to none).
	Warmup int
	// WarmupSpacing is the mean time between warm-up writes, which come at
	// random times, as the scenario's do (default Window/Changes, the
	// scenario's mean rate: the host is measured under the load the
	// scenario puts on it, bunched writes and all).
	WarmupSpacing time.Duration
}

// Timers used on both sides: memberlist's local profile with the gossip
// tests' fast overrides, and Rollcall's lease and alive interval to match.
const (
	probeInterval    = 100 * time.Millisecond
	probeTimeout     = 50 * time.Millisecond
	suspicionMult    = 2
	gossipInterval   = 20 * time.Millisecond
	pushPullInterval = time.Second
	leaseTimeout     = 2 * time.Second
	aliveInterval    = 100 * time.Millisecond
)

func fastMemberlist(mlc *memberlist.Config) {
	mlc.ProbeInterval = probeInterval
	mlc.ProbeTimeout = probeTimeout
	mlc.SuspicionMult = suspicionMult
	mlc.GossipInterval = gossipInterval
	mlc.PushPullInterval = pushPullInterval
	mlc.TCPTimeout = time.Second
	mlc.DeadNodeReclaimTime = 10 * time.Millisecond
	// The simulator does not model LZW compression; compare like with like
	// (and let the packet counter read the packets).
	mlc.EnableCompression = false
}

func (sc Scenario) withDefaults() Scenario {
	if sc.Warmup == 0 {
		sc.Warmup = sc.Changes
	}
	if sc.WarmupSpacing == 0 && sc.Changes > 0 {
		sc.WarmupSpacing = sc.Window / time.Duration(sc.Changes)
	}
	if sc.Crashes == 0 {
		sc.Crashes = 3
	}
	return sc
}

// SimConfig is the simulator's configuration of the scenario.
//
// It has no WriteDelays: those are measured (Run).
func SimConfig(sc Scenario) sim.Config {
	cfg := sim.DefaultConfig()
	cfg.Nodes = sc.Nodes
	cfg.Profile = "local"
	cfg.ProbeInterval, cfg.ProbeTimeout = probeInterval, probeTimeout
	cfg.SuspicionMult = suspicionMult
	cfg.GossipInterval = gossipInterval
	cfg.PushPullInterval = pushPullInterval
	cfg.LeaseTimeout, cfg.AliveInterval = leaseTimeout, aliveInterval
	cfg.EagerThreshold = sc.EagerThreshold
	cfg.Relay = dissem.RelayEpidemic // the calibrated relay beyond the threshold
	cfg.Latency = sc.Latency
	cfg.Changes = sc.Changes
	cfg.Churn = sim.Churn{Connect: 1, Status: 1}
	cfg.Window = sc.Window
	cfg.Crashes = nil
	for k := range sc.Crashes {
		cfg.Crashes = append(cfg.Crashes, sim.Crash{Node: sc.Nodes - 1 - k, At: sc.Window + sc.Settle + time.Duration(k)*sc.Observe})
	}
	cfg.Duration = sc.Window + sc.Settle + time.Duration(sc.Crashes)*sc.Observe + latencyTail(sc.Latency)
	cfg.Seed = sc.Seed
	return cfg
}

// latencyTail is how long the simulation runs past the last observation so
// that deliveries still in flight arrive: the converged fraction counts the
// changes that reached every live node at all, as the real run's does. A
// lognormal fitted to a loaded cluster's hop delays has a tail far longer
// than the window (median 1.5s, sigma 0.84 puts the 99.99th percentile near
// 40s); without the tail its late deliveries would count as never arriving.
// Capped at a minute of virtual time.
func latencyTail(l sim.Latency) time.Duration {
	tail := l.Min
	if l.Kind == sim.LatencyLognormal {
		tail = time.Duration(float64(l.Min) * math.Exp(4*l.Sigma))
	}
	return min(tail, time.Minute)
}
