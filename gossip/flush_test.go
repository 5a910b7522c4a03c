package gossip

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/crdt"
)

// holdLoop keeps the cluster's loop busy in a function of its own (where
// it neither holds the core nor executes a Ready) until the test ends.
func holdLoop(t *testing.T, c *Cluster) {
	held, release := make(chan struct{}), make(chan struct{})
	c.queueEvent(func() { close(held); <-release })
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop never ran the held event")
	}
	// Registered after the cluster's own cleanup, so it runs first: the
	// loop is let go before Shutdown waits for it.
	t.Cleanup(func() { close(release) })
}

// A change published while the link is idle is sent by Flush itself: it
// does not wait for the loop's goroutine to be scheduled.
func TestFlushSendsOnTheCallersGoroutine(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.waitMembers(2)
	c, h := tc.nodes[0], tc.hosts[0]
	holdLoop(t, c)

	before := c.Stats().DeltaCopies.Load()
	h.connect(t, "alice", "phone") // Publish
	c.Flush()
	if got := c.Stats().DeltaCopies.Load(); got != before+1 {
		t.Fatalf("delta copies sent when Flush returned = %d, want %d (one to the other member)", got-before, 1)
	}
	waitFor(t, 5*time.Second, "alice online on n1, n0's loop still held", func() bool {
		return tc.hosts[1].presence("alice").Online
	})
}

// heldApplyHost blocks in ApplyDeltas, once armed, until released: the
// loop is then executing a Ready with the core's mutex released.
type heldApplyHost struct {
	*fakeHost
	mu       sync.Mutex
	armed    bool
	entered  chan struct{}
	released chan struct{}
}

func (h *heldApplyHost) ApplyDeltas(ds []crdt.Delta) error {
	h.mu.Lock()
	armed := h.armed
	h.armed = false
	h.mu.Unlock()
	if armed {
		close(h.entered)
		<-h.released
	}
	return h.fakeHost.ApplyDeltas(ds)
}

// While the loop is executing a Ready (the core between Ready and
// Advance), Flush leaves the deltas to the loop, which sends them once it
// is done: exactly once, and not lost.
func TestFlushLeavesTheDeltasToABusyLoop(t *testing.T) {
	var held *heldApplyHost
	tc := &testCluster{t: t, net: NewFaultNetwork(1)}
	tc.wrapHost = func(i int, h *fakeHost) Host {
		if i != 0 {
			return h
		}
		held = &heldApplyHost{fakeHost: h, entered: make(chan struct{}), released: make(chan struct{})}
		return held
	}
	tc.run(2)
	tc.waitMembers(2)
	c := tc.nodes[0]

	held.mu.Lock()
	held.armed = true
	held.mu.Unlock()
	tc.hosts[1].connect(t, "bob", "phone") // n0's loop applies it, and is held there
	select {
	case <-held.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("n0 never applied bob's session")
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(held.released)
		}
	}
	t.Cleanup(release)

	before := c.Stats().DeltaCopies.Load()
	tc.hosts[0].connect(t, "alice", "phone")
	c.Flush()
	if got := c.Stats().DeltaCopies.Load(); got != before {
		t.Fatalf("Flush sent %d delta copies while the loop was executing a Ready; want it to leave them to the loop", got-before)
	}
	release()
	waitFor(t, 5*time.Second, "alice online on n1", func() bool { return tc.hosts[1].presence("alice").Online })
	waitFor(t, 5*time.Second, "bob online on n0", func() bool { return tc.hosts[0].presence("bob").Online })
	time.Sleep(100 * time.Millisecond) // a second copy, if any, would be counted by now
	if got := c.Stats().DeltaCopies.Load(); got != before+1 {
		t.Fatalf("delta copies of alice's write = %d, want 1", got-before)
	}
}

// Writers that publish and flush concurrently with the loop, as the
// gateway's pollers do, lose nothing and reorder nothing: every member
// ends with every writer's last write without a gap to repair (push/pull
// is off, and a gap found through the alive announcements' watermarks
// would be pulled and counted).
func TestConcurrentFlushesLoseNothing(t *testing.T) {
	tc := newTestCluster(t, 3, func(c *Config) {
		c.Memberlist = func(m *memberlist.Config) { fastMemberlist(m); m.PushPullInterval = time.Hour }
	})
	tc.waitMembers(3)
	const writers, writes = 8, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, c := tc.hosts[w%3], tc.nodes[w%3]
			user := "u" + string(rune('a'+w))
			for i := range writes {
				st := crdt.StatusAvailable
				if i%2 == 1 { // the last write (writes is even) is busy
					st = crdt.StatusBusy
				}
				h.write(t, user, "d", crdt.StateActive, st, nil)
				c.Flush()
			}
		}()
	}
	wg.Wait()
	waitFor(t, 10*time.Second, "every member to hold every writer's last write", func() bool {
		for _, h := range tc.hosts {
			for w := range writers {
				p := h.presence("u" + string(rune('a'+w)))
				if len(p.Sessions) != 1 || p.Sessions[0].Status != crdt.StatusBusy {
					return false
				}
			}
		}
		return true
	})
	waitFor(t, 5*time.Second, "identical projections", tc.converged)
	for i, c := range tc.nodes {
		if n := c.Stats().GapPulls.Load(); n != 0 {
			t.Errorf("n%d pulled %d times to repair gaps; want every delta delivered in order", i, n)
		}
	}
}
