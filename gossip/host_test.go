package gossip

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/cluster"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/internal/testkit"
)

// fakeHost is a ReplicaHost with test helpers.
type fakeHost struct {
	*ReplicaHost
	cluster *Cluster
	epochs  map[crdt.Key]uint64

	tmu       sync.Mutex
	delivered []cluster.Message
}

func newFakeHost(t testing.TB, name string, inc uint64) *fakeHost {
	rh, err := NewReplicaHost(crdt.Origin{Node: name, Incarnation: inc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{ReplicaHost: rh, epochs: make(map[crdt.Key]uint64)}
	rh.OnDeliver = func(m cluster.Message) {
		h.tmu.Lock()
		h.delivered = append(h.delivered, m)
		h.tmu.Unlock()
	}
	return h
}

func (h *fakeHost) deliveredMessages() []cluster.Message {
	h.tmu.Lock()
	defer h.tmu.Unlock()
	return slices.Clone(h.delivered)
}

// connect writes an active session for user/device and publishes it.
func (h *fakeHost) connect(t testing.TB, user, device string, groups ...string) {
	h.write(t, user, device, crdt.StateActive, crdt.StatusAvailable, groups)
}

func (h *fakeHost) write(t testing.TB, user, device string, state crdt.State, status crdt.Status, groups []string) {
	k := crdt.Key{User: user, Device: device}
	var ep uint64
	h.Do(func(r *crdt.Replica) {
		ep = h.epochs[k]
		if ep == 0 || r.MaxEpoch(k) > ep {
			ep = r.MaxEpoch(k) + 1
			h.epochs[k] = ep
		}
	})
	d, err := h.Put(crdt.Session{User: user, Device: device, ID: fmt.Sprintf("%s-%s-%d", user, device, ep),
		Epoch: ep, State: state, Status: status, Groups: groups})
	if err != nil {
		t.Fatalf("write %s/%s: %v", user, device, err)
	}
	h.cluster.Publish([]crdt.Delta{d})
}

func (h *fakeHost) snapshot() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	ss, as := h.r.Snapshot()
	b, _ := crdt.AppendSync(nil, crdt.Sync{{Origin: crdt.Origin{Node: "snapshot"}, Sessions: ss, Accounts: as}})
	return string(b)
}

func (h *fakeHost) nodeDown(n string) (since int64, down bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.r.NodeDown(n)
}

func (h *fakeHost) presence(user string) crdt.Presence {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.r.Presence(user, 0)
}

// testCluster is an in-process cluster of real memberlist nodes on loopback.
type testCluster struct {
	t     testing.TB
	net   *FaultNetwork
	nodes []*Cluster
	hosts []*fakeHost
	opts  []func(*Config)
	// onHost, if set, is called for each new host before its cluster starts.
	onHost func(i int, h *fakeHost)
	// wrapHost, if set, gives the host the cluster drives (fault injection
	// between the cluster and its host).
	wrapHost func(i int, h *fakeHost) Host
}

func fastMemberlist(mlc *memberlist.Config) {
	mlc.ProbeInterval = 100 * time.Millisecond
	mlc.ProbeTimeout = 50 * time.Millisecond
	mlc.SuspicionMult = 2
	mlc.GossipInterval = 20 * time.Millisecond
	mlc.PushPullInterval = time.Second
	mlc.TCPTimeout = time.Second
	mlc.DeadNodeReclaimTime = 10 * time.Millisecond
}

// patientMemberlist is fastMemberlist with a failure detector that rides
// out seconds of starvation: a probe every second, an ack awaited 500ms,
// a suspect declared dead after about five seconds among 24 nodes. For
// tests of dissemination among many nodes in one process, where the race
// detector and a busy machine stall whole nodes for longer than
// fastMemberlist's 50ms probe timeout, and a false death (then its
// refutation) keeps the membership from settling.
func patientMemberlist(mlc *memberlist.Config) {
	fastMemberlist(mlc)
	mlc.ProbeInterval = time.Second
	mlc.ProbeTimeout = 500 * time.Millisecond
	mlc.SuspicionMult = 4
}

func testConfig(name string, inc uint64) Config {
	cfg := DefaultConfig()
	cfg.Name = name
	cfg.Incarnation = inc
	cfg.BindAddr = "127.0.0.1:0"
	cfg.Profile = "local"
	cfg.LeaseTimeout = 2 * time.Second
	cfg.AliveInterval = 100 * time.Millisecond
	cfg.Memberlist = fastMemberlist
	if os.Getenv("GOSSIP_TEST_LOG") != "" {
		cfg.Logger, _ = zap.NewDevelopment()
	}
	cfg.ReconnectInterval = 300 * time.Millisecond
	return cfg
}

func newTestCluster(t testing.TB, n int, opts ...func(*Config)) *testCluster {
	return (&testCluster{t: t, net: NewFaultNetwork(1), opts: opts}).run(n)
}

// run starts nodes n0..n(n-1) of a cluster whose hooks are set, and shuts
// them down when the test ends.
func (tc *testCluster) run(n int) *testCluster {
	for i := range n {
		tc.start(fmt.Sprintf("n%d", i), 1)
	}
	tc.t.Cleanup(func() {
		for _, c := range tc.nodes {
			if c != nil {
				_ = c.Shutdown()
			}
		}
	})
	return tc
}

// start adds (or restarts, as a new incarnation) a node and joins it.
func (tc *testCluster) start(name string, inc uint64) int {
	tc.t.Helper()
	h := newFakeHost(tc.t, name, inc)
	cfg := testConfig(name, inc)
	cfg.WrapTransport = tc.net.Wrap
	for _, o := range tc.opts {
		o(&cfg)
	}
	if tc.onHost != nil {
		tc.onHost(len(tc.nodes), h)
	}
	for _, c := range tc.nodes {
		if c != nil {
			cfg.Join = []string{c.LocalAddr()}
			break
		}
	}
	var host Host = h
	if tc.wrapHost != nil {
		host = tc.wrapHost(len(tc.nodes), h)
	}
	c, err := New(cfg, host)
	if err != nil {
		tc.t.Fatal(err)
	}
	h.cluster = c
	tc.nodes = append(tc.nodes, c)
	tc.hosts = append(tc.hosts, h)
	return len(tc.nodes) - 1
}

func (tc *testCluster) addr(i int) string { return tc.nodes[i].LocalAddr() }

// live returns the indexes of running nodes.
func (tc *testCluster) live() []int {
	var out []int
	for i, c := range tc.nodes {
		if c != nil {
			out = append(out, i)
		}
	}
	return out
}

func (tc *testCluster) crash(i int) {
	_ = tc.nodes[i].Shutdown()
	tc.nodes[i] = nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, d, what, cond)
}

// converged reports whether every live node holds the same records.
func (tc *testCluster) converged() bool {
	live := tc.live()
	first := tc.hosts[live[0]].snapshot()
	for _, i := range live[1:] {
		if tc.hosts[i].snapshot() != first {
			return false
		}
	}
	return true
}

func (tc *testCluster) waitMembers(n int) { tc.waitMembersWithin(n, 10*time.Second) }

// waitMembersWithin waits until every live node counts n members.
// When the wait fails it logs the last node it found behind.
func (tc *testCluster) waitMembersWithin(n int, d time.Duration) {
	var behind string
	settled := false
	defer func() {
		if !settled {
			tc.t.Logf("last node behind: %s", behind)
		}
	}()
	waitFor(tc.t, d, fmt.Sprintf("%d members", n), func() bool {
		for _, i := range tc.live() {
			// memberlist's view, and ours (built from its events,
			// handled asynchronously), which is what sends go to
			members, live := tc.nodes[i].ml.NumMembers(), len(tc.nodes[i].liveMembers())
			if members != n || live != n-1 {
				behind = fmt.Sprintf("%s: %d memberlist members, %d live peers", tc.nodes[i].LocalAddr(), members, live)
				return false
			}
		}
		return true
	})
	settled = true
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }
