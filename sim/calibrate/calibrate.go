// Package calibrate checks the simulator against reality: it runs one
// scenario on a real in-process cluster (real memberlist nodes on loopback,
// gossip.New over gossip.ReplicaHost, the production code paths) and in the
// simulator, and reports both side by side.
//
// It is a measurement, not a unit test: it opens sockets, sleeps, and its
// real-cluster numbers depend on the machine's load.
package calibrate

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/gossip"
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

// Measure is what each side reports.
type Measure struct {
	ConvP50, ConvP99 float64 // ms, per change, to every live node
	CopiesPerChange  float64 // delta copies in packets per change
	CrashP50         float64 // ms, crash to offline, per (crash, survivor)
	CrashMax         float64
	Converged        float64 // fraction of changes that reached every node
	// Curve is the fraction of (change, node) pairs converged against the
	// time since the change (the simulator's first seed, or the real run).
	Curve []sim.CurvePoint
	// IndependentP50 and IndependentP99 are the simulator's convergence
	// without the measured write delays (sim only, with Scenario.Host):
	// what independent per-packet delays make of the same host.
	IndependentP50, IndependentP99 float64

	// conv and crash are the real cluster's samples (ms, sorted): each
	// converged change's convergence time and each crash detection, for
	// pooling runs (Pooled).
	conv, crash []float64
}

// Report is a calibration result.
type Report struct {
	Scenario  Scenario
	LatencyUS float64 // one-way latency given to the simulator
	// WriteDelays are the measured writes given to the simulator (with
	// Scenario.Host).
	WriteDelays []sim.WriteDelay
	Real, Sim   Measure
}

// Run runs the scenario on a real cluster, then in the simulator.
//
// The simulator has no model of CPU time, and an in-process cluster of
// dozens of nodes on a small machine spends more time waiting for a core
// than on the loopback wire (its shared garbage collector is taken out of
// the way: separateHeaps). So the real cluster measures its own delays:
// Warmup single writes at random, WarmupSpacing apart on average, half
// before the scenario and half after it, each split at its owner's first
// packet, which the transport timestamps as it sends it: the flush delay,
// from the write plus BatchDelay to that packet, and each receiver's hop
// delay, from that packet to the receiver's replica change.
//
// Unless sc.Latency is set, a lognormal fitted to each receiver's delay
// from the write, less BatchDelay (the median, and the spread within a
// write), is the simulator's latency for every packet.
// That leaves out what one write's receivers share, and the tail of
// eager convergence is exactly that: on a shared host the slow writes are
// slow at most of their receivers at once (a stall of the whole host: its
// cores taken by other processes, a GC cycle), not at one receiver by
// chance. With sc.Host, the measured writes themselves are the simulator's
// Config.WriteDelays: each flush replays one write's flush delay and its
// receivers' hop delays, together. In epidemic mode only the flush delay
// is used: a write's later receivers got it from relays, not from the
// owner, so their delays are not one hop's.
//
// The scenario itself (fan-out, batching, piggybacking, retransmit limits,
// failure detection) is then compared; nothing measured on the scenario's
// own writes sets the simulator.
func Run(ctx context.Context, sc Scenario) (*Report, error) {
	reports, err := RunPooled(ctx, sc, 1, nil)
	if err != nil {
		return nil, err
	}
	return reports[0], nil
}

// RunPooled runs the scenario runs times on the real cluster, with seeds
// sc.Seed, sc.Seed+1, ..., and then each of them in the simulator, which
// gets the warm-up writes of all the runs together: the host's stalls,
// which a single warm-up of Warmup writes samples as thinly as the
// scenario does, are then measured over all of them, as Pooled measures
// the real side. progress, if set, is called before each real run.
func RunPooled(ctx context.Context, sc Scenario, runs int, progress func(run int, seed uint64)) ([]*Report, error) {
	sc = sc.withDefaults()
	scs := make([]Scenario, runs)
	reals := make([]*Measure, runs)
	var all warmDelays
	for i := range runs {
		scs[i] = sc
		scs[i].Seed = sc.Seed + uint64(i)
		if progress != nil {
			progress(i, scs[i].Seed)
		}
		real, warm, err := runReal(ctx, scs[i])
		if err != nil {
			return nil, err
		}
		reals[i] = real
		all.hops = append(all.hops, warm.hops...)
		all.writes = append(all.writes, warm.writes...)
	}
	reports := make([]*Report, runs)
	for i := range runs {
		r, err := compare(ctx, scs[i], reals[i], &all)
		if err != nil {
			return nil, err
		}
		reports[i] = r
	}
	return reports, nil
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

// compare runs the scenario in the simulator, set from what the real
// cluster's warm-up measured, and reports it beside the real measure.
func compare(ctx context.Context, sc Scenario, real *Measure, warm *warmDelays) (*Report, error) {
	if sc.Latency.Kind == sim.LatencyUnset {
		sc.Latency = fitLognormal(warm.hops)
	}
	var writes []sim.WriteDelay
	if sc.Host {
		writes = warm.writes
	}
	simm, err := runSim(ctx, sc, writes)
	if err != nil {
		return nil, err
	}
	if sc.Host {
		ind, err := runSim(ctx, sc, nil)
		if err != nil {
			return nil, err
		}
		simm.IndependentP50, simm.IndependentP99 = ind.ConvP50, ind.ConvP99
	}
	return &Report{Scenario: sc, LatencyUS: float64(sc.Latency.Min) / 1e3, WriteDelays: writes, Real: *real, Sim: *simm}, nil
}

// warmDelays is what the warm-up measured (see Run).
type warmDelays struct {
	// hops are per write: each receiver's delay (ns) from the write to its
	// replica change, less BatchDelay (in epidemic mode, the three
	// fastest: the seeds).
	hops [][]float64
	// writes are the writes split at the owner's first packet.
	writes []sim.WriteDelay
}

// fitLognormal fits the simulator's lognormal latency to hop delays (ns),
// grouped by write: the median of all of them, and the spread of the logs
// within a write (pooled). The spread between writes is left out on
// purpose: it is one owner's timer and scheduling delay, shared by all the
// receivers of a write, which independent per-packet delays cannot
// represent (fitting it would make the slowest of N receivers far too slow).
func fitLognormal(groups [][]float64) sim.Latency {
	var all []float64
	var ss float64
	n := 0
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		var mean float64
		for _, x := range g {
			mean += math.Log(math.Max(x, 1000)) / float64(len(g))
		}
		for _, x := range g {
			d := math.Log(math.Max(x, 1000)) - mean
			ss += d * d
			n++
		}
		all = append(all, g...)
	}
	if len(all) == 0 {
		return sim.Latency{Kind: sim.LatencyFixed, Min: 50 * time.Microsecond}
	}
	sort.Float64s(all)
	med := math.Max(all[len(all)/2], 1000)
	sigma := 0.0
	if n > 1 {
		sigma = math.Min(math.Sqrt(ss/float64(n-1)), 5)
	}
	return sim.Latency{Kind: sim.LatencyLognormal, Min: time.Duration(med), Sigma: sigma}
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

func runSim(ctx context.Context, sc Scenario, writes []sim.WriteDelay) (*Measure, error) {
	// Several seeds, pooled by averaging: one seed has one crash.
	const seeds = 5
	var m Measure
	for i := range seeds {
		cfg := SimConfig(sc)
		cfg.WriteDelays = writes
		cfg.Seed = sc.Seed + uint64(i)
		r, err := sim.Run(ctx, cfg)
		if err != nil {
			return nil, err
		}
		m.ConvP50 += r.Convergence.P50 / seeds
		m.ConvP99 += r.Convergence.P99 / seeds
		m.CopiesPerChange += r.CopiesPerChange / seeds
		m.CrashP50 += r.NodeCrash.P50 / seeds
		m.CrashMax += r.NodeCrash.Max / seeds
		m.Converged += r.ConvergedFraction / seeds
		if i == 0 {
			m.Curve = r.Curve
		}
	}
	return &m, nil
}

// realChange is one write in the real cluster.
type realChange struct {
	key          crdt.Key
	epoch, seq   uint64
	at           time.Time
	reached      map[int]time.Time
	reachedOwner int    // the owning node
	version      uint64 // the delta's version (its origin's counter)
}

type realRun struct {
	sc      Scenario
	mu      sync.Mutex
	hosts   []*gossip.ReplicaHost
	nodes   []*gossip.Cluster
	changes []*realChange
	byUser  map[string][]*realChange
	crash   []float64 // ms, crash to each survivor marking the node down
	copies  atomic.Uint64
	sends   sendLog
}

// sendLog records, while on, when each node starts sending a packet that
// carries its own writes: the warm-up splits a write's delay at its owner's
// first packet.
type sendLog struct {
	on    atomic.Bool
	mu    sync.Mutex
	sends map[int][]sent // by node, in order
}

// sent is one packet: when its sending started, and the highest version of
// the sender's own deltas in it (a packet of relayed deltas from others,
// in epidemic mode, is not logged).
type sent struct {
	at      time.Time
	version uint64
}

func (l *sendLog) record(node int, s sent) {
	l.mu.Lock()
	l.sends[node] = append(l.sends[node], s)
	l.mu.Unlock()
}

// first returns when node started sending the first packet, at or after t,
// with its own write of version v or a later one (a later write's flush
// carries v too, coalesced).
func (l *sendLog) first(node int, t time.Time, v uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ss := l.sends[node]
	for i := sort.Search(len(ss), func(i int) bool { return !ss[i].at.Before(t) }); i < len(ss); i++ {
		if ss[i].version >= v {
			return ss[i].at, true
		}
	}
	return time.Time{}, false
}

func runReal(ctx context.Context, sc Scenario) (*Measure, *warmDelays, error) {
	rr := &realRun{sc: sc, byUser: make(map[string][]*realChange)}
	rr.sends.sends = make(map[int][]sent)
	defer separateHeaps()()
	defer func() {
		for _, c := range rr.nodes {
			if c != nil {
				_ = c.Shutdown()
			}
		}
	}()
	for i := range sc.Nodes {
		if err := rr.start(i); err != nil {
			return nil, nil, err
		}
	}
	// Formation is a precondition, not a measurement: with 50ms probe
	// timeouts a heavily loaded machine keeps some member suspected for a
	// while, so the wait is generous.
	if err := rr.waitMembers(ctx, time.Minute); err != nil {
		return nil, nil, err
	}
	// Let joins and their push/pulls settle before measuring.
	if err := sleepUntil(ctx, time.Now().Add(2*time.Second)); err != nil {
		return nil, nil, err
	}
	rng := rand.New(rand.NewPCG(sc.Seed, 7))
	// Half the warm-up before the scenario and half after it (before the
	// crashes), so that a machine whose load drifts is measured on both
	// sides of the scenario, not only before it.
	warm, err := rr.warmup(ctx, rng, 0, sc.Warmup/2)
	if err != nil {
		return nil, nil, err
	}
	rr.copies.Store(0)
	times := make([]time.Duration, sc.Changes)
	for i := range times {
		times[i] = time.Duration(rng.Int64N(int64(sc.Window)))
	}
	slices.Sort(times)
	start := time.Now()
	var users []string
	for _, t := range times {
		if err := sleepUntil(ctx, start.Add(t)); err != nil {
			return nil, nil, err
		}
		owner := rng.IntN(sc.Nodes)
		if len(users) > 0 && rng.IntN(2) == 0 {
			rr.status(users[rng.IntN(len(users))], rng)
			continue
		}
		u := fmt.Sprintf("user-%06d", len(users))
		users = append(users, u)
		rr.connect(owner, u)
	}
	copies := rr.copies.Load()
	if err := sleepUntil(ctx, start.Add(sc.Window+sc.Settle)); err != nil {
		return nil, nil, err
	}
	after, err := rr.warmup(ctx, rng, sc.Warmup/2, sc.Warmup)
	if err != nil {
		return nil, nil, err
	}
	warm.hops = append(warm.hops, after.hops...)
	warm.writes = append(warm.writes, after.writes...)
	// Crash the last Crashes nodes, Observe apart; every survivor is polled
	// for when it marks the node down (the simulator's definition of
	// crash-to-offline).
	for k := range sc.Crashes {
		if err := rr.crashOne(ctx, sc.Nodes-1-k, sc.Nodes-k); err != nil {
			return nil, nil, err
		}
	}
	return rr.measure(copies), warm, nil
}

// crashOne crashes node victim and records, for each of the nodes below
// live (the survivors), how long it takes to mark it down.
func (rr *realRun) crashOne(ctx context.Context, victim, live int) error {
	at := time.Now()
	_ = rr.nodes[victim].Shutdown()
	rr.nodes[victim] = nil
	name := fmt.Sprintf("n%02d", victim)
	seen := make(map[int]time.Time)
	deadline := at.Add(rr.sc.Observe)
	for time.Now().Before(deadline) {
		for i := range live - 1 {
			if _, ok := seen[i]; ok {
				continue
			}
			var down bool
			rr.hosts[i].Do(func(r *crdt.Replica) { _, down = r.NodeDown(name) })
			if down {
				seen[i] = time.Now()
			}
		}
		if err := sleepUntil(ctx, time.Now().Add(2*time.Millisecond)); err != nil {
			return err
		}
	}
	rr.mu.Lock()
	defer rr.mu.Unlock()
	for i := range live - 1 {
		if t, ok := seen[i]; ok {
			rr.crash = append(rr.crash, float64(t.Sub(at))/1e6)
		} else {
			rr.crash = append(rr.crash, float64(rr.sc.Observe)/1e6)
		}
	}
	return nil
}

// warmup makes warm-up writes from..to-1, with exponential gaps of mean
// WarmupSpacing, and measures their delays (see Run).
func (rr *realRun) warmup(ctx context.Context, rng *rand.Rand, from, to int) (*warmDelays, error) {
	first := len(rr.changes)
	rr.sends.on.Store(true)
	next := time.Now()
	for i := from; i < to; i++ {
		rr.connect(rng.IntN(rr.sc.Nodes), fmt.Sprintf("warm-%03d", i))
		next = next.Add(time.Duration(rng.ExpFloat64() * float64(rr.sc.WarmupSpacing)))
		if err := sleepUntil(ctx, next); err != nil {
			return nil, err
		}
	}
	if err := sleepUntil(ctx, time.Now().Add(time.Second)); err != nil {
		return nil, err
	}
	rr.sends.on.Store(false)
	end := time.Now()
	batch := gossip.DefaultConfig().BatchDelay
	epidemic := gossip.ChooseMode(rr.sc.Nodes, rr.sc.EagerThreshold) == gossip.ModeEpidemic
	rr.mu.Lock()
	defer rr.mu.Unlock()
	w := &warmDelays{}
	for _, ch := range rr.changes[first:] {
		var ds []float64
		for i, t := range ch.reached {
			if i != ch.reachedOwner {
				ds = append(ds, float64(t.Sub(ch.at)-batch))
			}
		}
		if epidemic {
			// Only the three seeds get the write in one hop.
			sort.Float64s(ds)
			ds = ds[:min(3, len(ds))]
		}
		w.hops = append(w.hops, ds)
		flushed, ok := rr.sends.first(ch.reachedOwner, ch.at, ch.version)
		if !ok {
			continue // never flushed (the owner failed): nothing to split
		}
		wd := sim.WriteDelay{Flush: max(0, flushed.Sub(ch.at)-batch)}
		if !epidemic {
			// A receiver still without the write (an overloaded machine:
			// the packet was dropped, or is waiting in a queue) counts as
			// getting it now, a lower bound, rather than being left out,
			// which would make the write look faster than it was.
			for i := range rr.sc.Nodes {
				if i == ch.reachedOwner || rr.nodes[i] == nil {
					continue
				}
				t, ok := ch.reached[i]
				if !ok {
					t = end
				}
				wd.Hops = append(wd.Hops, max(0, t.Sub(flushed)))
			}
		}
		w.writes = append(w.writes, wd)
	}
	rr.changes = rr.changes[:first]
	return w, nil
}

// realHeapLimit is the Go heap the real cluster may grow to before it is
// collected (separateHeaps).
const realHeapLimit = 1 << 30

// separateHeaps makes the in-process cluster's garbage collection look like
// that of separate processes, and returns a function that restores the
// settings it changed. The nodes of an in-process cluster share one heap
// and one collector, and memberlist allocates a 64KB buffer for every UDP
// packet it reads (NetTransport.udpListen): at the scenario's ~15,000
// packets a second the shared heap turns over about 750MB a second, and
// with the default GOGC the collector runs about 40 times a second, each
// cycle's stop-the-world pauses and mark assists holding up all 32 nodes
// at once, on cores the nodes need (on the 2-core development machine,
// 84-343 cycles in an 8s window, 5-19% of the CPU, and the median hop
// delay doubled). A deployed gateway has a collector of its own, on its
// own cores, that stops nobody else. So the real cluster runs with the
// collector off until the heap reaches realHeapLimit (it then runs about
// once a second, over a live heap of a few MB). GOGC or GOMEMLIMIT in the
// environment take precedence.
func separateHeaps() (restore func()) { return sim.CollectOnlyAt(realHeapLimit) }

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (rr *realRun) start(i int) error {
	name := fmt.Sprintf("n%02d", i)
	h, err := gossip.NewReplicaHost(crdt.Origin{Node: name, Incarnation: 1}, nil)
	if err != nil {
		return err
	}
	h.OnChange = func(users []string) { rr.changed(i, users) }
	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.Incarnation = name, 1
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Profile = "local"
	cfg.LeaseTimeout, cfg.AliveInterval = leaseTimeout, aliveInterval
	cfg.EagerThreshold = rr.sc.EagerThreshold
	cfg.Memberlist = fastMemberlist
	cfg.WrapTransport = func(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
		return &countingTransport{NodeAwareTransport: t, copies: &rr.copies, node: i, name: name, sends: &rr.sends}
	}
	if len(rr.nodes) > 0 {
		cfg.Join = []string{rr.nodes[0].LocalAddr()}
	}
	c, err := gossip.New(cfg, h)
	if err != nil {
		return err
	}
	rr.hosts = append(rr.hosts, h)
	rr.nodes = append(rr.nodes, c)
	return nil
}

func (rr *realRun) waitMembers(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ok := true
		for _, c := range rr.nodes {
			n := 0
			for _, m := range c.Members() {
				if m.State == "alive" {
					n++
				}
			}
			if n != rr.sc.Nodes {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		if err := sleepUntil(ctx, time.Now().Add(20*time.Millisecond)); err != nil {
			return err
		}
	}
	return errors.New("calibrate: the real cluster did not form in time")
}

func (rr *realRun) connect(owner int, user string) {
	rr.write(owner, crdt.Session{User: user, Device: "phone", ID: user + "-1", Epoch: 1,
		State: crdt.StateActive, Status: crdt.StatusAvailable, Groups: []string{"team"}})
}

func (rr *realRun) status(user string, rng *rand.Rand) {
	rr.mu.Lock()
	ch := rr.byUser[user]
	owner := ch[0].reachedOwner
	rr.mu.Unlock()
	rr.write(owner, crdt.Session{User: user, Device: "phone", ID: user + "-1", Epoch: 1,
		State: crdt.StateActive, Status: crdt.Status(1 + rng.IntN(2)), Groups: []string{"team"}})
}

func (rr *realRun) write(owner int, s crdt.Session) {
	if rr.nodes[owner] == nil {
		return
	}
	d, err := rr.hosts[owner].Put(s)
	if err != nil {
		return
	}
	ch := &realChange{key: crdt.Key{User: s.User, Device: s.Device}, epoch: d.Session.Epoch, seq: d.Session.Seq,
		at: time.Now(), reached: map[int]time.Time{owner: time.Now()}, reachedOwner: owner, version: d.Version()}
	rr.mu.Lock()
	rr.changes = append(rr.changes, ch)
	rr.byUser[s.User] = append(rr.byUser[s.User], ch)
	rr.mu.Unlock()
	rr.nodes[owner].Publish([]crdt.Delta{d})
}

// changed is a host's OnChange hook: which changes of these users does
// node i now hold?
func (rr *realRun) changed(i int, users []string) {
	now := time.Now()
	for _, u := range users {
		var sess crdt.Session
		var ok bool
		rr.hosts[i].Do(func(r *crdt.Replica) { sess, ok = r.Session(crdt.Key{User: u, Device: "phone"}) })
		if !ok {
			continue
		}
		rr.mu.Lock()
		for _, ch := range rr.byUser[u] {
			if _, got := ch.reached[i]; got {
				continue
			}
			if sess.Epoch > ch.epoch || (sess.Epoch == ch.epoch && sess.Seq >= ch.seq) {
				ch.reached[i] = now
			}
		}
		rr.mu.Unlock()
	}
}

func (rr *realRun) measure(copies uint64) *Measure {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	var conv, ages []float64
	converged := 0
	var n int
	for _, ch := range rr.changes {
		n++
		for _, t := range ch.reached {
			ages = append(ages, float64(t.Sub(ch.at))/1e6)
		}
		if len(ch.reached) < rr.sc.Nodes {
			continue
		}
		converged++
		var last time.Time
		for _, t := range ch.reached {
			if t.After(last) {
				last = t
			}
		}
		conv = append(conv, float64(last.Sub(ch.at))/1e6)
	}
	crash := slices.Clone(rr.crash)
	sort.Float64s(conv)
	sort.Float64s(crash)
	m := &Measure{ConvP50: pct(conv, 50), ConvP99: pct(conv, 99), CrashP50: pct(crash, 50), CrashMax: pct(crash, 100),
		conv: conv, crash: crash}
	sort.Float64s(ages)
	total := float64(n * rr.sc.Nodes)
	last := -1.0
	for i, a := range ages {
		if f := float64(i+1) / total; f-last >= 0.005 || i == len(ages)-1 {
			m.Curve = append(m.Curve, sim.CurvePoint{MS: a, Fraction: f})
			last = f
		}
	}
	if n > 0 {
		m.CopiesPerChange = float64(copies) / float64(n)
		m.Converged = float64(converged) / float64(n)
	}
	return m
}

func pct(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(float64(len(xs))*p/100+0.999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// countingTransport counts the session deltas in every UDP packet a node
// sends, piggybacked ones included, by reading memberlist's framing (CRC
// header, compound messages, user messages) and gossip's (version, type,
// crdt deltas). During the warm-up it also logs when node (called name)
// starts sending a packet with its own writes.
type countingTransport struct {
	memberlist.NodeAwareTransport
	copies *atomic.Uint64
	node   int
	name   string
	sends  *sendLog
}

func (t *countingTransport) count(b []byte) {
	at := time.Now()
	ds := packetDeltas(b, nil)
	t.copies.Add(uint64(len(ds)))
	if len(ds) == 0 || !t.sends.on.Load() {
		return
	}
	var own uint64
	for i := range ds {
		if ds[i].Origin().Node == t.name {
			own = max(own, ds[i].Version())
		}
	}
	if own > 0 {
		t.sends.record(t.node, sent{at: at, version: own})
	}
}

// memberlist message types (net.go).
const (
	mlCompound = 7
	mlUser     = 8
	mlHasCRC   = 12
	rcDeltas   = 1 // gossip's msgDeltas
)

func (t *countingTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	t.count(b)
	return t.NodeAwareTransport.WriteToAddress(b, addr)
}

func (t *countingTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.count(b)
	return t.NodeAwareTransport.WriteTo(b, addr)
}

// packetDeltas appends the session deltas in packet b to out.
func packetDeltas(b []byte, out []crdt.Delta) []crdt.Delta {
	if len(b) >= 5 && b[0] == mlHasCRC {
		b = b[5:]
	}
	if len(b) == 0 {
		return out
	}
	switch b[0] {
	case mlUser:
		if len(b) < 3 || b[2] != rcDeltas {
			return out
		}
		ds, err := crdt.DecodeDeltas(b[3:])
		if err != nil {
			return out
		}
		return append(out, ds...)
	case mlCompound:
		if len(b) < 2 {
			return out
		}
		parts := int(b[1])
		lens := b[2:]
		if len(lens) < 2*parts {
			return out
		}
		body := lens[2*parts:]
		for i := range parts {
			l := int(binary.BigEndian.Uint16(lens[2*i:]))
			if l > len(body) {
				return out
			}
			out = packetDeltas(body[:l], out)
			body = body[l:]
		}
	}
	return out
}

// Write prints a report as a side-by-side table.
func (r *Report) Write(w io.Writer) error {
	sc := r.Scenario
	mode := gossip.ChooseMode(sc.Nodes, sc.EagerThreshold)
	fmt.Fprintf(w, "%d nodes, %s dissemination, %d changes over %v; simulator latency %s (fitted to the real cluster's hop delays)\n",
		sc.Nodes, mode, sc.Changes, sc.Window, sc.Latency)
	if sc.Host {
		fmt.Fprintf(w, "simulator write delays: %s\n", summarize(r.WriteDelays))
	}
	return writeTable(w, sc.Host, r.Real, r.Sim)
}

// writeTable prints the real and simulated measures side by side, and with
// host the simulator's convergence without the write delays.
func writeTable(w io.Writer, host bool, real, simm Measure) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "metric\treal\tsim\tsim/real\t")
	row := func(name string, a, b float64) {
		ratio := "-"
		if a > 0 {
			ratio = fmt.Sprintf("%.2f", b/a)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%s\t\n", name, a, b, ratio)
	}
	row("convergence p50 (ms)", real.ConvP50, simm.ConvP50)
	row("convergence p99 (ms)", real.ConvP99, simm.ConvP99)
	row("copies per change", real.CopiesPerChange, simm.CopiesPerChange)
	row("crash to offline p50 (ms)", real.CrashP50, simm.CrashP50)
	row("crash to offline max (ms)", real.CrashMax, simm.CrashMax)
	row("converged fraction", real.Converged, simm.Converged)
	if err := tw.Flush(); err != nil {
		return err
	}
	if host {
		_, err := fmt.Fprintf(w, "without the write delays (independent packets) the simulator's convergence p50/p99 is %.2f/%.2f ms\n",
			simm.IndependentP50, simm.IndependentP99)
		return err
	}
	return nil
}

// Pooled combines reports of one scenario, run after run (curves are not
// combined: see the first report's). A single run's tail, the eager p99
// above all, moves with the host stalls that happen to fall in it: of 300
// changes its p99 is the 4th slowest. So the real cluster's percentiles
// are taken over every run's changes and crash detections together (900
// changes for 3 runs: the p99 is the 10th slowest), and its counts are
// averaged. The simulator's side is the mean over runs, each of them
// already a mean over several seeds (runSim) and, from RunPooled,
// replaying the warm-up writes of all the runs.
func Pooled(reports []*Report) (real, simm Measure) {
	var conv, crash []float64
	for _, r := range reports {
		conv = append(conv, r.Real.conv...)
		crash = append(crash, r.Real.crash...)
	}
	sort.Float64s(conv)
	sort.Float64s(crash)
	real = meanMeasure(reports, func(r *Report) *Measure { return &r.Real })
	real.ConvP50, real.ConvP99 = pct(conv, 50), pct(conv, 99)
	real.CrashP50, real.CrashMax = pct(crash, 50), pct(crash, 100)
	real.conv, real.crash = conv, crash
	return real, meanMeasure(reports, func(r *Report) *Measure { return &r.Sim })
}

// meanMeasure is the mean, field by field, of one side of reports.
func meanMeasure(reports []*Report, side func(*Report) *Measure) Measure {
	var m Measure
	n := float64(len(reports))
	for _, r := range reports {
		x := side(r)
		m.ConvP50 += x.ConvP50 / n
		m.ConvP99 += x.ConvP99 / n
		m.CopiesPerChange += x.CopiesPerChange / n
		m.CrashP50 += x.CrashP50 / n
		m.CrashMax += x.CrashMax / n
		m.Converged += x.Converged / n
		m.IndependentP50 += x.IndependentP50 / n
		m.IndependentP99 += x.IndependentP99 / n
	}
	return m
}

// summarize describes measured write delays: how many, the flush delay's
// median and p98, and the median and p98 over writes of the slowest
// receiver's hop delay.
func summarize(ws []sim.WriteDelay) string {
	if len(ws) == 0 {
		return "none measured"
	}
	var flush, slowest []float64
	for _, w := range ws {
		flush = append(flush, float64(w.Flush)/1e6)
		if len(w.Hops) > 0 {
			slowest = append(slowest, float64(slices.Max(w.Hops))/1e6)
		}
	}
	sort.Float64s(flush)
	out := fmt.Sprintf("%d writes; flush delay median %.2fms, p98 %.2fms", len(ws), pct(flush, 50), pct(flush, 98))
	if len(slowest) > 0 {
		sort.Float64s(slowest)
		out += fmt.Sprintf("; slowest receiver's hop median %.2fms, p98 %.2fms", pct(slowest, 50), pct(slowest, 98))
	}
	return out
}

// Main is `rollcall sim calibrate`.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rollcall sim calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 32, "real memberlist nodes to start on loopback, a count")
	changes := fs.Int("changes", 300, "session writes, a count (the convergence p99 is the 4th slowest of 300)")
	window := fs.Duration("window", 5*time.Second, "time over which the writes are spread, a duration")
	seed := fs.Uint64("seed", 1, "random seed for owners and timing")
	modes := fs.String("modes", "eager,epidemic", "dissemination modes to calibrate: eager, epidemic or both (epidemic forces the eager threshold below the cluster size)")
	plotFile := fs.String("plot", "", "also draw FILE (.svg or .png): converged fraction against time, real and simulated, per mode")
	host := fs.Bool("host", true, "give the simulator the real cluster's measured write delays (flush delay and each receiver's hop, per write); false: independent per-packet latency only")
	runs := fs.Int("runs", 1, "run each mode this many times, with seeds seed, seed+1, ..., and pool them: the simulator replays every run's warm-up writes, and the pooled table gives the real cluster's percentiles over all the runs' changes beside the simulator's means; a count (single runs' p99 vary widely on a shared host)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: rollcall sim calibrate [flags]\n\nRuns one scenario on a real in-process cluster and in the simulator and prints both.\nfast memberlist timers: probe 100ms, probe timeout 50ms, suspicion mult 2, gossip 20ms, push/pull 1s; lease 2s, alive 100ms.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *runs < 1 {
		return fmt.Errorf("--runs %d: need at least one run", *runs)
	}
	var rows []sim.Row
	for _, mode := range splitComma(*modes) {
		sc := Scenario{Nodes: *nodes, Changes: *changes, Window: *window, Settle: 3 * time.Second,
			Observe: 3 * time.Second, Seed: *seed, EagerThreshold: 64, Host: *host}
		switch mode {
		case "eager":
			sc.EagerThreshold = max(64, *nodes)
		case "epidemic":
			sc.EagerThreshold = max(1, *nodes/4)
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
		reports, err := RunPooled(ctx, sc, *runs, func(i int, seed uint64) {
			fmt.Fprintf(stderr, "calibrating %s with %d real nodes (run %d of %d, seed %d)...\n", mode, *nodes, i+1, *runs, seed)
		})
		if err != nil {
			return err
		}
		for _, r := range reports {
			if err := r.Write(stdout); err != nil {
				return err
			}
			fmt.Fprintln(stdout)
		}
		if *runs > 1 {
			real, simm := Pooled(reports)
			replay := ""
			if *host {
				replay = fmt.Sprintf(", replaying all %d warm-up writes", len(reports[0].WriteDelays))
			}
			fmt.Fprintf(stdout, "%d nodes, %s: %d runs pooled (seeds %d-%d; real: percentiles of all %d changes and %d crash detections; sim: mean of the runs%s)\n",
				*nodes, mode, *runs, *seed, *seed+uint64(*runs-1), len(real.conv), len(real.crash), replay)
			if err := writeTable(stdout, *host, real, simm); err != nil {
				return err
			}
			var ratios []string
			for _, r := range reports {
				ratios = append(ratios, fmt.Sprintf("%.2f", r.Sim.ConvP99/r.Real.ConvP99))
			}
			fmt.Fprintf(stdout, "convergence p99 sim/real per run: %s\n\n", strings.Join(ratios, ", "))
		}
		r := reports[0]
		rows = append(rows,
			sim.Row{Sweep: "calibration", Value: mode + " real cluster", Result: &sim.Result{Curve: r.Real.Curve}},
			sim.Row{Sweep: "calibration", Value: mode + " simulator", Result: &sim.Result{Curve: r.Sim.Curve}})
	}
	if *plotFile != "" {
		if err := sim.Plot(*plotFile, rows); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", *plotFile)
	}
	return nil
}

func splitComma(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
