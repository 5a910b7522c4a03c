package node

import (
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// TestWheel drives the timer wheel by hand: a session is found due only
// once its real deadline has passed, however its activity moved, and a
// long stall processes every slot once.
func TestWheel(t *testing.T) {
	const ms = int64(time.Millisecond)
	tick, timeout := 10*ms, 100*ms
	w := newWheel(tick, timeout, 0)
	mk := func(last int64) *conn {
		c := &conn{}
		c.state.Store(stateActive)
		c.lastActive.Store(last)
		return c
	}
	a, b, closed := mk(0), mk(0), mk(0)
	w.add(a, timeout)
	w.add(b, timeout)
	w.add(closed, timeout)
	closed.state.Store(stateClosing)

	if due := w.advance(99*ms, timeout, nil); len(due) != 0 {
		t.Fatalf("due early: %d", len(due))
	}
	b.lastActive.Store(60 * ms) // b heartbeats: deadline 160ms
	due := w.advance(105*ms, timeout, nil)
	if len(due) != 1 || due[0] != a {
		t.Fatalf("due at 105ms: %v", due)
	}
	if w.len() != 1 {
		t.Fatalf("wheel holds %d, want b only (closed dropped)", w.len())
	}
	if due := w.advance(155*ms, timeout, nil); len(due) != 0 {
		t.Fatalf("b due early")
	}
	if due := w.advance(165*ms, timeout, nil); len(due) != 1 || due[0] != b {
		t.Fatalf("b not due at 165ms: %v", due)
	}
	// A stall far longer than the wheel's span.
	c := mk(200 * ms)
	w.add(c, 300*ms)
	d := mk(10_000 * ms)
	w.add(d, 10_100*ms) // clamped to the wheel's range, re-placed later
	due = w.advance(10_050*ms, timeout, nil)
	if len(due) != 1 || due[0] != c {
		t.Fatalf("after stall: %v", due)
	}
	if due := w.advance(10_110*ms, timeout, nil); len(due) != 1 || due[0] != d {
		t.Fatalf("d: %v", due)
	}
	if w.len() != 0 {
		t.Fatalf("wheel holds %d", w.len())
	}
}

// TestHeartbeatAllocs checks the steady-state heartbeat path allocates
// nothing. The request rate is one that never bites (the loop heartbeats
// far faster than any client), so its bucket's arithmetic is measured too.
func TestHeartbeatAllocs(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.RequestRate = 1e9 })
	c := &conn{n: n}
	c.state.Store(stateActive)
	line := []byte(`{"op":"hb"}`)
	if allocs := testing.AllocsPerRun(1000, func() { c.handleLine(line) }); allocs != 0 {
		t.Fatalf("heartbeat allocates %v times", allocs)
	}
	if c.lastActive.Load() == 0 && n.mono() != 0 {
		t.Fatal("heartbeat did not refresh")
	}
}

// hb is a heartbeat with an id, so the reply says the node has read it.
var hb = map[string]any{"op": "hb"}

// checkActive fails unless user's phone session is active on n.
func checkActive(t *testing.T, n *Node, user string) {
	t.Helper()
	if s, ok := sessionOf(n, crdt.Key{User: user, Device: "phone"}); !ok || s.State != crdt.StateActive {
		t.Fatalf("%s's session is %v, want active", user, s.State)
	}
}

// checkExpired reads bob's expiry on his connection and checks his record
// says he expired at want.
func checkExpired(t *testing.T, n *Node, bob *client, want time.Time) {
	t.Helper()
	bob.expectError(protocol.CodeExpired)
	bob.expectClosed()
	s, _ := sessionOf(n, crdt.Key{User: "bob", Device: "phone"})
	if s.State != crdt.StateExpired || s.ExpiresAt != want.UnixNano() {
		t.Fatalf("bob's record %v expiring at %v, want expired at %v",
			s.State, time.Unix(0, s.ExpiresAt).UTC(), want)
	}
}

// newStallPair starts a node with a 3s timeout and two clients, alice (who
// will heartbeat) and bob (who stays silent), and waits for the sweeper to
// take its first reading of the stall clock.
func newStallPair(t *testing.T, mut func(*Config)) (n *Node, clock *fakeClock, stalls *fakeStallClock, alice, bob *client) {
	clock = newFakeClock()
	n, stalls = newStallTestNode(t, func(c *Config) {
		c.Clock = clock
		c.Heartbeat = time.Second
		c.Timeout = 3 * time.Second
		if mut != nil {
			mut(c)
		}
	})
	alice, _ = connect(t, n, "alice", "phone")
	bob, _ = connect(t, n, "bob", "phone")
	waitSweeps(t, n)
	return n, clock, stalls, alice, bob
}

// TestStallExtendsDeadlines: a gateway stopped for
// longer than the timeout (SIGSTOP) must not expire its clients on resume,
// since their heartbeats wait unread in its socket buffers. The stall
// extends every deadline by its length: a heartbeat after it keeps a
// client alive, and a client that stays silent expires later by the stall.
func TestStallExtendsDeadlines(t *testing.T) {
	n, clock, stalls, alice, bob := newStallPair(t, nil)
	start := clock.Now()

	// The gateway is stopped for 5s: both clocks move, nothing is read.
	clock.Advance(5 * time.Second)
	stalls.Advance(5 * time.Second)
	waitSweeps(t, n)
	checkActive(t, n, "alice")
	checkActive(t, n, "bob")
	// The stall counted is the sweeper's lateness: 5s less one interval.
	stall := 5*time.Second - n.Config().SweepInterval

	// alice's heartbeat is read; her deadline is the usual one from now.
	f := alice.call(hb)
	if got, want := f.str("expires_at"), n.formatTime(clock.Now().Add(3*time.Second)); got != want {
		t.Fatalf("hb expires_at %s, want %s", got, want)
	}
	// Without the stall bob would have expired 3s after start. The fake
	// clock jumping between sweeps is not a stall.
	clock.Advance(2 * time.Second)
	alice.call(hb)
	waitSweeps(t, n)
	checkActive(t, n, "bob")

	clock.Advance(time.Second)
	waitSweeps(t, n)
	checkExpired(t, n, bob, start.Add(3*time.Second+stall))
	checkActive(t, n, "alice")
	alice.call(hb)
	checkInvariants(t, n)
}

// TestNoStallExpiresOnTime: without a stall, a silent client expires at
// its deadline while the fake clock moves by whole seconds.
func TestNoStallExpiresOnTime(t *testing.T) {
	n, clock, _, alice, bob := newStallPair(t, nil)
	start := clock.Now()
	for range 2 {
		clock.Advance(time.Second)
		alice.call(hb)
	}
	waitSweeps(t, n)
	checkActive(t, n, "bob")
	clock.Advance(time.Second)
	waitSweeps(t, n)
	checkExpired(t, n, bob, start.Add(3*time.Second))
	checkActive(t, n, "alice")
	checkInvariants(t, n)
}

// TestStallDetectionDisabled: with a negative StallThreshold a stall
// counts as the clients' silence, as it did before stalls were detected.
func TestStallDetectionDisabled(t *testing.T) {
	n, clock, stalls, alice, bob := newStallPair(t, func(c *Config) { c.StallThreshold = -1 })
	start := clock.Now()
	clock.Advance(5 * time.Second)
	stalls.Advance(5 * time.Second)
	waitSweeps(t, n)
	checkExpired(t, n, bob, start.Add(3*time.Second))
	alice.expectError(protocol.CodeExpired)
}

// TestStallThresholdConfig checks the default and its bounds.
func TestStallThresholdConfig(t *testing.T) {
	for _, tc := range []struct {
		timeout, sweep, want time.Duration
	}{
		{15 * time.Second, 0, 3750 * time.Millisecond}, // Timeout/4
		{2 * time.Second, 0, 500 * time.Millisecond},
		{time.Second, 200 * time.Millisecond, 400 * time.Millisecond}, // 2*SweepInterval
		{time.Second, 900 * time.Millisecond, 500 * time.Millisecond}, // at most Timeout/2
	} {
		c := DefaultConfig()
		c.Dev = true
		c.Heartbeat = tc.timeout / 3
		c.Timeout = tc.timeout
		c.SweepInterval = tc.sweep
		if err := c.Validate(); err != nil || c.StallThreshold != tc.want {
			t.Errorf("timeout %v sweep %v: stall threshold %v (%v), want %v", tc.timeout, tc.sweep, c.StallThreshold, err, tc.want)
		}
	}
	c := DefaultConfig()
	c.Dev = true
	c.StallThreshold = c.Timeout
	if err := c.Validate(); err == nil {
		t.Error("a stall threshold of the whole timeout accepted")
	}
}
