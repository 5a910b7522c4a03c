package gossip

import (
	"flag"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// The cluster benchmarks run real memberlist clusters on loopback and report
// propagation, copies and bytes per change, crash and leave to offline, and
// quiet anti-entropy as metrics (medians and p99 over the iterations):
//
//	go test -run '^$' -bench 'Cluster' -benchtime 200x ./gossip
//
// They measure at the replica (the moment a node's projection shows the
// change), which is what a subscriber's event is computed from.

// watcher records, per user, when each node first saw it online / offline.
type watcher struct {
	mu      sync.Mutex
	online  map[string]map[int]time.Time
	offline map[string]map[int]time.Time
}

func newWatcher() *watcher {
	return &watcher{online: map[string]map[int]time.Time{}, offline: map[string]map[int]time.Time{}}
}

func (w *watcher) attach(i int, h *fakeHost) {
	h.OnChange = func(users []string) {
		now := time.Now()
		for _, u := range users {
			p := h.presence(u)
			w.mu.Lock()
			m := w.offline
			if p.Online {
				m = w.online
			}
			if m[u] == nil {
				m[u] = map[int]time.Time{}
			}
			if _, ok := m[u][i]; !ok {
				m[u][i] = now
			}
			w.mu.Unlock()
		}
	}
}

// waitAll waits until every node in nodes saw user in the given state and
// returns the latest time one did.
func (w *watcher) waitAll(b testing.TB, user string, online bool, nodes []int, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		m := w.offline[user]
		if online {
			m = w.online[user]
		}
		var last time.Time
		all := true
		for _, i := range nodes {
			t, ok := m[i]
			if !ok {
				all = false
				break
			}
			if t.After(last) {
				last = t
			}
		}
		w.mu.Unlock()
		if all {
			return last
		}
		time.Sleep(200 * time.Microsecond)
	}
	b.Fatalf("%s never reached online=%v on all of %v", user, online, nodes)
	return time.Time{}
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(p * float64(len(s)-1))
	return s[i]
}

// lanProfile is the agent's defaults: memberlist's LAN profile and the
// default peer lease and alive interval.
func lanProfile(c *Config) {
	d := DefaultConfig()
	c.Profile = "lan"
	c.Memberlist = nil
	c.LeaseTimeout = d.LeaseTimeout
	c.AliveInterval = d.AliveInterval
}

func benchClusterN(b testing.TB, n int, opts ...func(*Config)) (*testCluster, *watcher) {
	w := newWatcher()
	tc := startNodes(b, n, w.attach, opts)
	tc.waitMembers(n)
	return tc, w
}

// startNodes starts nodes n0..n(n-1) on a fault network, each host passed
// to attach, all shut down when the test ends. It does not wait for them
// to see each other.
func startNodes(tb testing.TB, n int, attach func(int, *fakeHost), opts []func(*Config)) *testCluster {
	tc := &testCluster{t: tb, net: NewFaultNetwork(1), opts: opts, onHost: attach}
	for i := range n {
		tc.start(fmt.Sprintf("n%d", i), 1)
	}
	tb.Cleanup(func() {
		for _, c := range tc.nodes {
			if c != nil {
				_ = c.Shutdown()
			}
		}
	})
	return tc
}

func others(n, except int) []int {
	var out []int
	for i := range n {
		if i != except {
			out = append(out, i)
		}
	}
	return out
}

// BenchmarkClusterPropagation16: time from a connect written on one node to
// its appearance in every other node's projection, 16 nodes, 0% loss;
// copies and bytes sent per change.
func BenchmarkClusterPropagation16(b *testing.B) {
	const n = 16
	tc, w := benchClusterN(b, n, lanProfile)
	var lat []time.Duration
	copies0, bytes0 := sumStats(tc, func(s *Stats) uint64 { return s.DeltaCopies.Load() }), sumStats(tc, func(s *Stats) uint64 { return s.DeltaBytes.Load() })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		src := i % n
		user := fmt.Sprintf("user-%d", i)
		start := time.Now()
		tc.hosts[src].connect(b, user, "phone", "team-7")
		last := w.waitAll(b, user, true, others(n, src), 10*time.Second)
		lat = append(lat, last.Sub(start))
	}
	b.StopTimer()
	copies := sumStats(tc, func(s *Stats) uint64 { return s.DeltaCopies.Load() }) - copies0
	bytes := sumStats(tc, func(s *Stats) uint64 { return s.DeltaBytes.Load() }) - bytes0
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(copies)/float64(b.N), "copies/change")
	b.ReportMetric(float64(bytes)/float64(b.N), "bytes/change")
}

func sumStats(tc *testCluster, f func(*Stats) uint64) uint64 {
	var t uint64
	for _, c := range tc.nodes {
		if c != nil {
			t += f(c.Stats())
		}
	}
	return t
}

// BenchmarkClusterCrashToOffline16: a node holding a session is killed
// without a word (kill -9 equivalent); time until every survivor shows the
// session offline. LAN profile, the default peer lease (3.5s, the bound
// dissem.CrashBound: 3.675s). Each iteration takes seconds.
func BenchmarkClusterCrashToOffline16(b *testing.B) {
	benchGoneToOffline(b, "crash", 60*time.Second, func(tc *testCluster, victim int, _ string) {
		tc.crash(victim)
	})
}

// BenchmarkClusterLeaveToOffline16: a node ends its sessions cleanly and
// leaves; time until every other member shows them offline.
func BenchmarkClusterLeaveToOffline16(b *testing.B) {
	benchGoneToOffline(b, "leave", 10*time.Second, func(tc *testCluster, leaver int, user string) {
		tc.hosts[leaver].write(b, user, "phone", crdt.StateDisconnected, crdt.StatusAvailable, nil)
		_ = tc.nodes[leaver].Leave(time.Second)
		tc.nodes[leaver] = nil
	})
}

// benchGoneToOffline measures, per iteration, from gone (which removes the
// node holding user's session) until every other node shows user offline,
// then replaces the node so the cluster keeps 16 members.
func benchGoneToOffline(b *testing.B, what string, limit time.Duration, gone func(tc *testCluster, victim int, user string)) {
	const n = 16
	tc, w := benchClusterN(b, n, lanProfile)
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		victim := tc.live()[len(tc.live())-1]
		user := fmt.Sprintf("%s-%d", what, i)
		tc.hosts[victim].connect(b, user, "phone")
		var rest []int
		for _, j := range tc.live() {
			if j != victim {
				rest = append(rest, j)
			}
		}
		w.waitAll(b, user, true, rest, 10*time.Second)
		start := time.Now()
		gone(tc, victim, user)
		last := w.waitAll(b, user, false, rest, limit)
		lat = append(lat, last.Sub(start))
		tc.start(fmt.Sprintf("r%d", i), 1)
		// Setup for the next iteration, not measured. A member that
		// missed the leaver's dead broadcast (UDP, under the load of the
		// previous benchmark) still counts it until its own probe and
		// suspicion, or a push/pull (30s in the LAN profile), tell it:
		// longer than the 10s the tests allow.
		tc.waitMembersWithin(n, 45*time.Second)
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkClusterQuietAntiEntropy16: a quiet 16-node cluster holding
// 100,000 sessions; bytes per node per minute spent on anti-entropy
// (push/pull digests, syncs, pulls) and on alive announcements, measured over
// one minute of LAN-profile operation (push/pull every 30s).
func BenchmarkClusterQuietAntiEntropy16(b *testing.B) {
	const n, sessions = 16, 100_000
	tc, _ := benchClusterN(b, n, lanProfile)
	for i := range sessions {
		tc.hosts[i%n].connect(b, fmt.Sprintf("u%d", i), "phone")
		if i%2000 == 1999 {
			time.Sleep(5 * time.Millisecond) // stay within the inbound queues
		}
	}
	waitFor(b, 60*time.Second, "100k sessions converged", tc.converged)
	ae := func() uint64 {
		return sumStats(tc, func(s *Stats) uint64 { return s.StateBytes.Load() + s.SyncBytesSent.Load() + s.PullBytes.Load() })
	}
	alive := func() uint64 { return sumStats(tc, func(s *Stats) uint64 { return s.AliveBytes.Load() }) }
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ae0, al0 := ae(), alive()
		time.Sleep(time.Minute)
		b.ReportMetric(float64(ae()-ae0)/n, "ae-bytes/node/min")
		b.ReportMetric(float64(alive()-al0)/n, "alive-bytes/node/min")
	}
}

// Flags of BenchmarkClusterTree100.
var (
	tree100Rate   = flag.Int("tree100-rate", 1000, "changes per second BenchmarkClusterTree100 offers across its 100 nodes")
	tree100Net    = flag.String("tree100-net", "mem", "BenchmarkClusterTree100's network: mem (in-process, MemNetwork) or udp (loopback sockets)")
	tree100Window = flag.Duration("tree100-window", 20*time.Second, "how long each BenchmarkClusterTree100 iteration offers its load")
)

// BenchmarkClusterTree100: 100 real memberlist nodes in one process (LAN
// profile), past the eager threshold so deltas travel the relay tree,
// under -tree100-rate changes per second cluster-wide for -tree100-window
// per iteration; every tenth change is measured, from its write at its
// owner to its arrival at all 99 others (see runTreeLoad). By default the
// nodes share an in-process network (MemNetwork): over loopback sockets
// (-tree100-net udp) the kernel's work per packet, for all hundred nodes
// on this machine's cores, is most of the CPU.
//
//	go test -run '^$' -bench ClusterTree100 -benchtime 1x ./gossip
func BenchmarkClusterTree100(b *testing.B) {
	const n = 100
	// No fault injection: its wrapper takes a lock per packet.
	opts := []func(*Config){lanProfile, func(c *Config) { c.WrapTransport = nil }}
	var mem *MemNetwork
	switch *tree100Net {
	case "mem":
		mem = NewMemNetwork()
		opts = append(opts, func(c *Config) { c.Network = mem })
	case "udp":
	default:
		b.Fatalf("-tree100-net %q: mem or udp", *tree100Net)
	}
	tc, w := treeCluster(b, n, opts...)
	tc.nodes[0].mu.Lock()
	m := tc.nodes[0].core.Mode()
	tc.nodes[0].mu.Unlock()
	if m != dissem.ModeTree {
		b.Fatalf("mode %s at %d members", m, n)
	}
	var all treeLoadResult
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := runTreeLoad(b, tc, w, mem, treeLoad{rate: *tree100Rate, window: *tree100Window, sample: 10, settle: 10 * time.Second, round: i})
		all.add(r)
	}
	b.StopTimer()
	all.report(b)
}
