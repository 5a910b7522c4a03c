package node

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/internal/stall"
)

// Session deadlines. The heartbeat path must be O(1) and allocation-free, so
// a heartbeat never touches a timer, a heap or a lock: it stores the time in
// conn.lastActive (one atomic store). Expiry is found lazily by a timer
// wheel (Varghese & Lauck, "Hashed and Hierarchical Timing Wheels", 1987):
//
//   - each live session sits in exactly one slot, the one for the deadline it
//     had when it was last placed;
//   - every SweepInterval the sweeper empties the slots whose time has come;
//     for each session there it reads lastActive: if the real deadline
//     (lastActive + Timeout) has passed the session expires, otherwise it is
//     placed again in the slot of its real deadline.
//
// So a session is examined about once per Timeout however often it
// heartbeats, the sweep costs O(sessions due), and expiry is late by at most
// one SweepInterval. Closed connections are dropped when their slot comes up.
//
// Deadlines run on Node.mono, a clock that stops while the gateway itself is
// stalled (SIGSTOP, a paused VM, a long scheduler pause): the heartbeats its
// clients sent meanwhile wait unread in socket buffers, so that silence is
// the gateway's, not theirs. Only the sweeper expires
// sessions, so the sweeper detects stalls: before each sweep it feeds a
// stall.Detector a reading of the real monotonic clock, and a tick later
// than SweepInterval by more than Config.StallThreshold adds its lateness to
// Node.stalled, which mono subtracts. The detector reads the real clock, not
// Config.Clock, so a test that moves a fake clock between ticks is not
// taken for a stall.
//
// A request handled after the stall but before the sweeper's next tick
// stores a lastActive the stall has not yet been subtracted from: that
// session's deadline is extended by the stall once more, until its next
// request. Expiring a dead client up to one stall late is the price of
// keeping the heartbeat path a single atomic store.

// wheel is a hashed timer wheel of connections keyed by deadline. Times are
// Node.mono() nanoseconds. Safe for concurrent use; add is called on hello,
// on a refresh that brings the token deadline closer, and by the sweeper,
// never on the heartbeat path.
//
// A connection's deadline is the earlier of its silence deadline
// (lastActive + Timeout) and its token's (conn.tokenDeadline, when set):
// the sweeper ends a session whose token expired without a refresh as it
// ends a silent one (expireSession). A refresh can move the token deadline
// earlier than the slot a connection sits in, so add may place a
// connection already in the wheel; each placement by add bumps
// conn.wheelGen and only the latest placement counts, so a connection is
// never examined twice for one deadline.
type wheel struct {
	mu     sync.Mutex
	tick   int64 // slot width, ns
	slots  [][]wheelEntry
	spare  []wheelEntry
	cursor int64 // last tick processed
}

// wheelEntry is one placement of a connection; it is stale once gen is
// not the connection's wheelGen.
type wheelEntry struct {
	c   *conn
	gen uint64
}

// deadline returns c's deadline: the earlier of its silence deadline and
// its token's.
func (c *conn) deadline(timeout int64) int64 {
	d := crdt.ExpiryDeadline(c.lastActive.Load(), time.Duration(timeout))
	if td := c.tokenDeadline.Load(); td != 0 && td < d {
		d = td
	}
	if gd := c.graceDeadline.Load(); gd != 0 && gd < d {
		d = gd
	}
	return d
}

// newWheel returns a wheel with slots of width tick covering span (the
// longest deadline from now) and the cursor at now.
func newWheel(tick, span, now int64) *wheel {
	if tick <= 0 {
		tick = int64(time.Millisecond)
	}
	return &wheel{
		tick:   tick,
		slots:  make([][]wheelEntry, span/tick+3),
		cursor: now / tick,
	}
}

// add places c in the slot of deadline, clamped to the wheel's range. An
// earlier placement of c becomes stale.
func (w *wheel) add(c *conn, deadline int64) {
	w.mu.Lock()
	c.wheelGen++
	w.addLocked(c, deadline)
	w.mu.Unlock()
}

func (w *wheel) addLocked(c *conn, deadline int64) {
	t := crdt.FirstSweepAt(deadline, 0, w.tick) / w.tick // the first tick at or after deadline
	last := w.cursor + int64(len(w.slots)) - 1
	t = min(max(t, w.cursor+1), last)
	i := t % int64(len(w.slots))
	w.slots[i] = append(w.slots[i], wheelEntry{c: c, gen: c.wheelGen})
}

// advance processes the slots up to now. Each connection whose deadline
// (conn.deadline) has passed is appended to due (and leaves the wheel);
// live ones are placed again; closed ones and stale placements are
// dropped.
func (w *wheel) advance(now, timeout int64, due []*conn) []*conn {
	w.mu.Lock()
	defer w.mu.Unlock()
	target := now / w.tick
	if target <= w.cursor {
		return due
	}
	if n := int64(len(w.slots)); target-w.cursor > n {
		w.cursor = target - n // a long stall: every slot once
	}
	for w.cursor < target {
		w.cursor++
		i := w.cursor % int64(len(w.slots))
		items := w.slots[i]
		// Swap in an empty slice first: re-placed connections may land in
		// this very slot, a full turn later.
		w.slots[i] = w.spare
		for _, e := range items {
			c := e.c
			if e.gen != c.wheelGen || (c.state.Load() == stateClosing && c.graceDeadline.Load() == 0) {
				continue
			}
			deadline := c.deadline(timeout)
			if crdt.Expired(deadline, now) {
				if c.routing.Load() > 0 {
					// Its reader waits on a routed send: look again next tick.
					w.addLocked(c, now+w.tick)
					continue
				}
				due = append(due, c)
				continue
			}
			w.addLocked(c, deadline)
		}
		clear(items)
		w.spare = items[:0]
	}
	return due
}

// len returns the number of connections in the wheel (for tests).
func (w *wheel) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.slots {
		for _, e := range s {
			if e.gen == e.c.wheelGen {
				n++
			}
		}
	}
	return n
}

// sweepLoop expires silent sessions every SweepInterval, after counting a
// stall of the gateway revealed by a late tick (see the comment at the top).
func (n *Node) sweepLoop() {
	defer n.loops.Done()
	t := time.NewTicker(n.cfg.SweepInterval)
	defer t.Stop()
	var stalls *stall.Detector
	if n.cfg.StallThreshold >= 0 {
		stalls = stall.NewDetector(n.cfg.SweepInterval, n.cfg.StallThreshold)
		stalls.Observe(n.stallNow())
	}
	var due []*conn
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		// The deadline clock is read before the stall detector's: a stop
		// between the two readings then counts as a stall, extending
		// deadlines, instead of reaching the sweep unsubtracted and
		// expiring every session it covers.
		at := n.clock.Now()
		if stalls != nil {
			if d := stalls.Observe(n.stallNow()); d > 0 {
				n.stalled.Store(int64(stalls.Total()))
				n.log.Warn("the gateway was stalled; session deadlines extended by the stall",
					zap.Duration("stall", d), zap.Duration("total", stalls.Total()))
			}
		}
		now := n.monoAt(at)
		due = n.wheel.advance(now, int64(n.cfg.Timeout), due[:0])
		for _, c := range due {
			if c.graceDeadline.Load() != 0 {
				n.graceOver(c, now)
				continue
			}
			n.expireSession(c, now)
		}
		clear(due)
		n.lapseDue(n.clock.Now().UnixNano())
		n.sweeps.Add(1)
	}
}
