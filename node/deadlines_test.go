package node

import (
	"testing"
	"time"
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
// nothing.
func TestHeartbeatAllocs(t *testing.T) {
	n := newTestNode(t, nil)
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
