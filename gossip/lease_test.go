package gossip

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// The default peer lease against the two failures it must tell apart: a
// gateway stopped for up to dissem.DefaultMaxPause (SIGSTOP, a paused VM)
// and a gateway that died. memberlist's prober is off in these tests, so
// leases alone decide.

// leasesOnly gives a node the default lease and alive interval, with
// memberlist's failure detection off.
func leasesOnly(c *Config) {
	d := DefaultConfig()
	c.LeaseTimeout, c.AliveInterval = d.LeaseTimeout, d.AliveInterval
	c.Memberlist = func(m *memberlist.Config) { fastMemberlist(m); m.ProbeInterval = time.Hour }
}

// pauseClock is the clock of a stopped process as it sees it: it stands
// still while the process is stopped and jumps to the real time when it
// resumes, so the node's timers stop and its stall detector sees the stall.
type pauseClock struct {
	start time.Time

	mu       sync.Mutex
	stopped  bool
	stoppedA time.Time
}

func newPauseClock() *pauseClock { return &pauseClock{start: time.Now()} }

func (p *pauseClock) now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return p.stoppedA
	}
	return time.Now()
}

func (p *pauseClock) elapsed() time.Duration { return p.now().Sub(p.start) }

func (p *pauseClock) stop() {
	p.mu.Lock()
	p.stopped, p.stoppedA = true, time.Now()
	p.mu.Unlock()
}

func (p *pauseClock) resume() {
	p.mu.Lock()
	p.stopped = false
	p.mu.Unlock()
}

// offlineCounter counts, per node, the changes that showed a watched user
// offline.
type offlineCounter struct {
	watch map[int]string // node index -> user whose offline it counts
	n     [8]atomic.Int32
}

func (o *offlineCounter) attach(i int, h *fakeHost) {
	user, ok := o.watch[i]
	if !ok {
		return
	}
	h.OnChange = func(users []string) {
		for _, u := range users {
			if u == user && !h.presence(u).Online {
				o.n[i].Add(1)
			}
		}
	}
}

// heardSince reports whether node i has heard from peer at or after t (on
// its lease clock, which is the real clock here).
func (tc *testCluster) heardSince(i int, peer string, t time.Time) bool {
	c := tc.nodes[i]
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.core.LastHeard(peer)
	return ok && last >= t.UnixNano()
}

// pausedCluster starts n0, n1 and n2, n2 on clk, and waits until alice (on
// n2) is online on n0 and n1 and bob (on n0) is online on n2.
func pausedCluster(t *testing.T, clk *pauseClock, offline *offlineCounter) *testCluster {
	tc := &testCluster{t: t, net: NewFaultNetwork(1), onHost: offline.attach, opts: []func(*Config){leasesOnly, func(c *Config) {
		if c.Name == "n2" {
			c.Now, c.elapsed = clk.now, clk.elapsed
		}
	}}}
	tc.run(3)
	tc.waitMembers(3)
	tc.hosts[2].connect(t, "alice", "phone")
	tc.hosts[0].connect(t, "bob", "laptop")
	waitFor(t, 30*time.Second, "alice online on n0 and n1, bob on n2", func() bool {
		return tc.hosts[0].presence("alice").Online && tc.hosts[1].presence("alice").Online && tc.hosts[2].presence("bob").Online
	})
	return tc
}

// pause stops n2 for d: its clock stands still, nothing it sends leaves and
// what is sent to it waits; then it resumes and its held packets go. It
// returns when the pause ended.
func pause(tc *testCluster, clk *pauseClock, d time.Duration) time.Time {
	clk.stop()
	tc.net.Hold(tc.addr(2))
	time.Sleep(d) // the pause itself, not a wait for anything
	clk.resume()
	tc.net.Release()
	return time.Now()
}

// A gateway stopped for the longest pause the default lease rides out is
// never shown down: its clients stay online on every other gateway, and
// it shows theirs online after it resumes.
func TestPausedPeerIsNeverShownExpired(t *testing.T) {
	clk := newPauseClock()
	offline := &offlineCounter{watch: map[int]string{0: "alice", 1: "alice", 2: "bob"}}
	tc := pausedCluster(t, clk, offline)

	resumed := pause(tc, clk, dissem.DefaultMaxPause)
	waitFor(t, 30*time.Second, "n0 and n1 to hear n2 after its pause", func() bool {
		return tc.heardSince(0, "n2", resumed) && tc.heardSince(1, "n2", resumed)
	})
	waitFor(t, 30*time.Second, "n2 to hear n0 after its pause", func() bool { return tc.heardSince(2, "n0", resumed) })
	if tc.nodes[2].stalled.Load() == 0 {
		t.Fatal("n2 saw no stall of its own: the pause was not one")
	}
	for i, user := range offline.watch {
		if k := offline.n[i].Load(); k > 0 {
			t.Errorf("n%d showed %s offline %d times during a %v pause of n2", i, user, k, dissem.DefaultMaxPause)
		}
	}
	for _, i := range []int{0, 1} {
		tc.nodes[i].mu.Lock()
		p, _ := tc.nodes[i].core.Peer("n2")
		tc.nodes[i].mu.Unlock()
		if p.ShownDown {
			t.Errorf("n%d shows n2 down after its pause", i)
		}
	}
}

// The same pause, longer than the lease: the test's pause is one that
// leases see. n2's clients are shown offline, and online again once it is
// heard.
func TestPauseLongerThanTheLeaseIsShown(t *testing.T) {
	clk := newPauseClock()
	offline := &offlineCounter{watch: map[int]string{0: "alice"}}
	tc := pausedCluster(t, clk, offline)

	pause(tc, clk, dissem.CrashBound(DefaultConfig().LeaseTimeout)+time.Second)
	if offline.n[0].Load() == 0 {
		t.Fatal("n0 never showed alice offline while n2 was stopped for longer than the lease")
	}
	waitFor(t, 30*time.Second, "alice online on n0 again", func() bool { return tc.hosts[0].presence("alice").Online })
}

// A gateway that dies is shown down on every other within the lease bound
// (dissem.CrashBound: the default lease and a lease tick), with no help
// from memberlist. The bound is checked with a margin for a loaded machine.
func TestCrashShownWithinTheLeaseBound(t *testing.T) {
	const margin = 2 * time.Second
	tc := newTestCluster(t, 3, leasesOnly)
	tc.waitMembers(3)
	tc.hosts[2].connect(t, "alice", "phone")
	waitFor(t, 30*time.Second, "alice online on n0 and n1", func() bool {
		return tc.hosts[0].presence("alice").Online && tc.hosts[1].presence("alice").Online
	})
	killed := time.Now()
	tc.crash(2)
	waitFor(t, 30*time.Second, "alice offline on n0 and n1", func() bool {
		return !tc.hosts[0].presence("alice").Online && !tc.hosts[1].presence("alice").Online
	})
	bound := dissem.CrashBound(DefaultConfig().LeaseTimeout)
	if bound > 4*time.Second {
		t.Errorf("the default lease shows a crash within %v, past the 4s promised", bound)
	}
	if took := time.Since(killed); took > bound+margin {
		t.Fatalf("n2's sessions shown offline %v after it died; the bound is %v (+%v margin)", took, bound, margin)
	}
}

// gateHost blocks ApplyDeltas while its gate is shut: a loop busy with
// something else while announcements queue up behind it.
type gateHost struct {
	*fakeHost
	shut    atomic.Bool
	blocked chan struct{} // one token per blocked call
	open    chan struct{} // one token lets one blocked call go
}

func (h *gateHost) ApplyDeltas(ds []crdt.Delta) error {
	if h.shut.CompareAndSwap(true, false) {
		h.blocked <- struct{}{}
		<-h.open
	}
	return h.fakeHost.ApplyDeltas(ds)
}

// busyClock is a node's clock that the test moves forward while its loop
// is busy (not stalled: the stall detector's reading does not move).
type busyClock struct {
	start time.Time
	ahead atomic.Int64 // how far now is ahead of the real time
	held  atomic.Int64 // real time the stall detector must not see
}

func (b *busyClock) now() time.Time { return time.Now().Add(time.Duration(b.ahead.Load())) }
func (b *busyClock) elapsed() time.Duration {
	return time.Since(b.start) - time.Duration(b.held.Load())
}

// A gateway whose loop is busy while a peer's announcements wait in its
// queue reads them before it checks that peer's lease: its own slowness
// never shows a live peer down. Each round holds n0's loop in a delta,
// lets an announcement of n1 queue up, moves n0's clock past the lease
// and lets the loop go; its next lease check must find n1 heard.
func TestLeaseCheckReadsQueuedAnnouncementsFirst(t *testing.T) {
	clk := &busyClock{start: time.Now()}
	var gate *gateHost
	tc := &testCluster{t: t, net: NewFaultNetwork(1), opts: []func(*Config){leasesOnly, func(c *Config) {
		if c.Name == "n0" {
			c.Now, c.elapsed = clk.now, clk.elapsed
		}
	}}}
	tc.wrapHost = func(i int, h *fakeHost) Host {
		if i != 0 {
			return h
		}
		gate = &gateHost{fakeHost: h, blocked: make(chan struct{}), open: make(chan struct{})}
		return gate
	}
	tc.run(2)
	tc.waitMembers(2)
	tc.hosts[1].connect(t, "alice", "phone")
	waitFor(t, 30*time.Second, "alice online on n0", func() bool { return tc.hosts[0].presence("alice").Online })
	lease := DefaultConfig().LeaseTimeout
	for round := range 8 {
		gate.shut.Store(true)
		tc.hosts[1].write(t, "alice", "phone", crdt.StateActive, []crdt.Status{crdt.StatusAway, crdt.StatusAvailable}[round%2], nil)
		var since time.Time
		select {
		case <-gate.blocked:
			since = time.Now()
		case <-time.After(30 * time.Second):
			t.Fatal("n0 never applied n1's delta")
		}
		alives := tc.alivesReceived(0)
		waitFor(t, 30*time.Second, "an announcement of n1 queued at n0", func() bool { return tc.alivesReceived(0) > alives })
		clk.ahead.Add(int64(lease))
		clk.held.Add(int64(time.Since(since)))
		gate.open <- struct{}{}
		waitFor(t, 30*time.Second, "n0 to hear n1 after the jump", func() bool {
			tc.nodes[0].mu.Lock()
			defer tc.nodes[0].mu.Unlock()
			last, _ := tc.nodes[0].core.LastHeard("n1")
			return last > clk.now().Add(-lease/2).UnixNano()
		})
		if n := tc.nodes[0].Stats().LeasesExpired.Load(); n > 0 {
			t.Fatalf("round %d: n0 expired n1's lease with its announcement waiting in the queue (%d expiries)", round, n)
		}
	}
}

// alivesReceived counts the alive announcements node i received (queued
// for its loop, handled or not).
func (tc *testCluster) alivesReceived(i int) uint64 {
	for _, r := range tc.nodes[i].Stats().Received() {
		if r.Type == dissem.TypeAlive.String() {
			return r.Messages
		}
	}
	return 0
}
