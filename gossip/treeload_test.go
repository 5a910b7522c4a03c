package gossip

import (
	"fmt"
	"math"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/internal/testkit"
)

// treeLoad is a load offered to a running cluster: rate changes a second
// cluster-wide for window, at owners taken in turn; one change in sample
// (chosen by a hash of its number, so at every owner) is a probe: the
// connect of a user of its own, whose arrival at every other node is
// timed. The others rewrite a pool of 5,000 users' sessions, each always
// at the same owner. Probes get up to settle after the window to arrive.
type treeLoad struct {
	rate   int
	window time.Duration
	sample int
	settle time.Duration
	round  int // names the probes of one run apart from another's
}

// treeLoadResult is what runTreeLoad measured.
type treeLoadResult struct {
	conv         []time.Duration // per probe, to all other nodes (+Inf: never)
	probes, late int             // probes, and those not at every node after settle
	changes      uint64
	copies       uint64
	dropped      uint64 // inbound queue drops and in-process network drops
	pulls        uint64
	disturbed    uint64        // leases expired and members failed
	cpu          time.Duration // the process CPU time (user and system) over the windows
	elapsed      time.Duration // the windows' length, summed
	sched99      float64       // the Go scheduler's p99 wait for a core, ms (the worst window's)
}

func (r *treeLoadResult) add(o treeLoadResult) {
	r.conv = append(r.conv, o.conv...)
	r.probes += o.probes
	r.late += o.late
	r.changes += o.changes
	r.copies += o.copies
	r.dropped += o.dropped
	r.pulls += o.pulls
	r.disturbed += o.disturbed
	r.cpu += o.cpu
	r.elapsed += o.elapsed
	r.sched99 = max(r.sched99, o.sched99)
}

func (r *treeLoadResult) report(b *testing.B) {
	ms := func(d time.Duration) float64 {
		if d == math.MaxInt64 {
			return math.Inf(1)
		}
		return float64(d.Microseconds()) / 1000
	}
	b.ReportMetric(ms(percentile(r.conv, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(r.conv, 0.99)), "p99-ms")
	b.ReportMetric(float64(r.probes), "probes")
	b.ReportMetric(float64(r.late), "probes-late")
	b.ReportMetric(float64(r.changes)/r.elapsed.Seconds(), "changes/s")
	b.ReportMetric(float64(r.copies)/float64(max(r.changes, 1)), "copies/change")
	b.ReportMetric(float64(r.cpu.Microseconds())/float64(max(r.changes, 1)), "cpu-us/change")
	b.ReportMetric(float64(r.dropped), "dropped")
	b.ReportMetric(float64(r.pulls)/r.elapsed.Seconds(), "gap-pulls/s")
	b.ReportMetric(r.sched99, "sched-p99-ms")
	b.ReportMetric(float64(r.disturbed), "leases-expired+failed")
}

// probeWatcher records when each node first held each probe user online.
type probeWatcher struct {
	mu     sync.Mutex
	prefix string
	at     map[string][]time.Time // by user, by node (zero: not yet)
	n      int
}

func (w *probeWatcher) attach(i int, h *fakeHost) {
	h.OnChange = func(users []string) {
		now := time.Now()
		for _, u := range users {
			if !strings.HasPrefix(u, w.prefix) || !h.presence(u).Online {
				continue
			}
			w.mu.Lock()
			ts := w.at[u]
			if ts == nil {
				ts = make([]time.Time, w.n)
				w.at[u] = ts
			}
			if ts[i].IsZero() {
				ts[i] = now
			}
			w.mu.Unlock()
		}
	}
}

// treeCluster starts n nodes that record the arrival of probe users.
func treeCluster(tb testing.TB, n int, opts ...func(*Config)) (*testCluster, *probeWatcher) {
	w := &probeWatcher{prefix: "p-", at: map[string][]time.Time{}, n: n}
	tc := startNodes(tb, n, w.attach, opts)
	tc.waitMembersWithin(n, time.Minute)
	return tc, w
}

type probe struct {
	user  string
	owner int
	at    time.Time
}

// runTreeLoad offers l to the cluster and measures its probes.
func runTreeLoad(tb testing.TB, tc *testCluster, w *probeWatcher, mem *MemNetwork, l treeLoad) treeLoadResult {
	n := len(tc.nodes)
	copies := func(s *Stats) uint64 { return s.DeltaCopies.Load() }
	inDropped := func(s *Stats) uint64 { return s.InboundDropped.Load() }
	pulls := func(s *Stats) uint64 { return s.GapPulls.Load() }
	disturbed := func(s *Stats) uint64 { return s.LeasesExpired.Load() + s.MembersFailed.Load() }
	disturbed0 := sumStats(tc, disturbed)
	var memDropped func() uint64 = func() uint64 { return 0 }
	if mem != nil {
		memDropped = mem.Dropped
	}
	copies0, dropped0, pulls0, mem0 := sumStats(tc, copies), sumStats(tc, inDropped), sumStats(tc, pulls), memDropped()
	sched0 := schedLatencies()
	cpu0 := processCPU()
	// Generators paced by a schedule rather than a ticker (a ticker drops
	// the ticks a busy scheduler delays, and the offered rate with them); a
	// generator behind its schedule writes at once until it has caught up.
	const generators = 4
	var (
		mu      sync.Mutex
		probes  []probe
		changes atomic.Uint64
		wg      sync.WaitGroup
	)
	start := time.Now()
	end := start.Add(l.window)
	for g := range generators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			interval := time.Second * generators / time.Duration(l.rate)
			next := start
			for i := g; ; i += generators {
				next = next.Add(interval)
				if !next.Before(end) {
					return
				}
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				owner := i % n
				if uint32(i*2654435761)>>16%uint32(l.sample) == 0 {
					p := probe{user: fmt.Sprintf("p-%d-%d", l.round, i), owner: owner, at: time.Now()}
					tc.hosts[owner].connect(tb, p.user, "phone", "team-7")
					mu.Lock()
					probes = append(probes, p)
					mu.Unlock()
				} else {
					tc.hosts[owner].connect(tb, fmt.Sprintf("bg-%d", i%5000), fmt.Sprintf("d%d", owner), "team-7")
				}
				changes.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sched := schedLatencies()
	cpu := processCPU() - cpu0
	// Wait for the probes to arrive everywhere, or settle to pass.
	arrived := func(p probe) (time.Time, bool) {
		ts := w.at[p.user]
		if ts == nil {
			return time.Time{}, false
		}
		var last time.Time
		for j, t := range ts {
			if j == p.owner {
				continue
			}
			if t.IsZero() {
				return time.Time{}, false
			}
			if t.After(last) {
				last = t
			}
		}
		return last, true
	}
	deadline := time.Now().Add(l.settle)
	for {
		all := true
		w.mu.Lock()
		for _, p := range probes {
			if _, ok := arrived(p); !ok {
				all = false
				break
			}
		}
		w.mu.Unlock()
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r := treeLoadResult{probes: len(probes), changes: changes.Load(), elapsed: elapsed, cpu: cpu}
	w.mu.Lock()
	for _, p := range probes {
		last, ok := arrived(p)
		if !ok {
			r.late++
			r.conv = append(r.conv, math.MaxInt64)
			continue
		}
		r.conv = append(r.conv, last.Sub(p.at))
	}
	w.mu.Unlock()
	r.copies = sumStats(tc, copies) - copies0
	r.dropped = sumStats(tc, inDropped) - dropped0 + memDropped() - mem0
	r.pulls = sumStats(tc, pulls) - pulls0
	r.disturbed = sumStats(tc, disturbed) - disturbed0
	r.sched99 = histPercentile(sched0, sched, 0.99) * 1e3
	return r
}

// processCPU is the CPU time this process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// schedLatencies is the Go scheduler's histogram of how long runnable
// goroutines waited for a core.
func schedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64Histogram()
}

// histPercentile is the p-th percentile of what histogram b counted since
// a (an upper bucket bound, in seconds).
func histPercentile(a, b *metrics.Float64Histogram, p float64) float64 {
	c := slices.Clone(b.Counts)
	var total uint64
	for i := range c {
		c[i] -= a.Counts[i]
		total += c[i]
	}
	var run uint64
	for i, k := range c {
		run += k
		if float64(run) >= p*float64(total) && total > 0 {
			return b.Buckets[i+1]
		}
	}
	return 0
}

// TestTreeRelayCarriesEveryChange: 24 nodes on an in-process network,
// past an eager threshold of 8 so deltas travel the relay tree, under 400
// changes a second for a second (a quarter second under -race): every
// change reaches every node, and nothing is dropped from a queue on the
// way.
func TestTreeRelayCarriesEveryChange(t *testing.T) {
	const n = 24
	mn := NewMemNetwork()
	tc, w := treeCluster(t, n, func(c *Config) {
		c.Network = mn
		c.EagerThreshold = 8
		// The relay is under test, not failure detection: leases and
		// probes that a starved process does not trip.
		c.LeaseTimeout = 10 * time.Second
		c.Memberlist = patientMemberlist
	})
	tc.nodes[0].mu.Lock()
	m := tc.nodes[0].core.Mode()
	tc.nodes[0].mu.Unlock()
	if m != dissem.ModeTree {
		t.Fatalf("mode %s at %d members", m, n)
	}
	// Under the race detector a change costs ten times the CPU: a quarter
	// of the changes. Every change must arrive; how soon is the
	// benchmark's to measure, so the wait is long (it ends when all are in).
	window := time.Second
	if testkit.RaceEnabled {
		window = time.Second / 4
	}
	r := runTreeLoad(t, tc, w, mn, treeLoad{rate: 400, window: window, sample: 1, settle: time.Minute})
	if want := int(400 * window.Seconds()); r.probes < want*3/4 {
		t.Fatalf("%d changes offered, want about %d", r.probes, want)
	}
	if r.late > 0 {
		t.Errorf("%d of %d changes did not reach every node", r.late, r.probes)
	}
	if r.dropped > 0 {
		t.Errorf("%d messages dropped from full queues", r.dropped)
	}
}
