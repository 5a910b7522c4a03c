package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/sim"
)

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
	log     copyLog
	crashed []int // the crashed nodes, in order
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
	// Every write has been sent; audit the copies before any node fails.
	audit := rr.audit()
	// Crash the last Crashes nodes, Observe apart; every survivor is polled
	// for when it marks the node down (the simulator's definition of
	// crash-to-offline).
	for k := range sc.Crashes {
		if err := rr.crashOne(ctx, sc.Nodes-1-k, sc.Nodes-k); err != nil {
			return nil, nil, err
		}
	}
	m := rr.measure(copies)
	m.audit = audit
	return m, warm, nil
}

// crashOne crashes node victim and records, for each of the nodes below
// live (the survivors), how long it takes to mark it down.
func (rr *realRun) crashOne(ctx context.Context, victim, live int) error {
	at := time.Now()
	_ = rr.nodes[victim].Shutdown()
	rr.nodes[victim] = nil
	rr.crashed = append(rr.crashed, victim)
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
	epidemic := dissem.ChooseMode(rr.sc.Nodes, rr.sc.EagerThreshold) == dissem.ModeEpidemic
	rr.mu.Lock()
	defer rr.mu.Unlock()
	w := &warmDelays{}
	for _, ch := range rr.changes[first:] {
		var ds []float64
		for i, t := range ch.reached {
			if i != ch.reachedOwner {
				ds = append(ds, float64(t.Sub(ch.at)))
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
		// A warm-up write, alone, goes out at once (no write window is
		// open): its flush delay is all the host's.
		wd := sim.WriteDelay{Flush: max(0, flushed.Sub(ch.at))}
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
	cfg.Relay = dissem.RelayEpidemic // the calibrated relay beyond the threshold
	cfg.Memberlist = fastMemberlist
	cfg.WrapTransport = func(t memberlist.NodeAwareTransport) memberlist.NodeAwareTransport {
		return &countingTransport{NodeAwareTransport: t, copies: &rr.copies, node: i, name: name, sends: &rr.sends, log: &rr.log}
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
		conv: conv, crash: crash,
		ran: ran{nodes: len(rr.nodes), writes: n, crashed: slices.Clone(rr.crashed),
			mode: dissem.ChooseMode(len(rr.nodes), rr.sc.EagerThreshold).String()}}
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
