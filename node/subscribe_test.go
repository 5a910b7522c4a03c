package node

import (
	"fmt"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

func TestSubUser(t *testing.T) {
	n := newTestNode(t, nil)
	w, _ := connect(t, n, "watcher", "w")
	a, wa := connect(t, n, "alice", "phone")

	w.send(map[string]any{"op": "sub", "users": []string{"alice", "bob", "alice"}, "id": "s"})
	if f := w.recv(); f.str("op") != protocol.OpOK || f.str("id") != "s" {
		t.Fatalf("sub reply %v", f)
	}
	// One event per current subject, at once.
	got := map[string]frame{}
	for range 2 {
		f := w.recv()
		if f.str("op") != protocol.OpEvent {
			t.Fatalf("want event, got %v", f)
		}
		got[f.str("user")] = f
	}
	if got["alice"]["online"] != true || got["alice"]["status"] != "available" || got["bob"]["online"] != false {
		t.Fatalf("initial events %v", got)
	}
	ss := got["alice"]["sessions"].([]any)
	if len(ss) != 1 || ss[0].(map[string]any)["session"] != wa.str("session") {
		t.Fatalf("sessions %v", ss)
	}
	last := got["alice"].num("version")

	a.ok(map[string]any{"op": "status", "status": "away"})
	e := w.expectEvent("alice")
	if e["status"] != "away" || e.num("version") <= last {
		t.Fatalf("event %v (last version %v)", e, last)
	}
	last = e.num("version")

	// bob comes online on two devices.
	b1, _ := connect(t, n, "bob", "phone")
	e = w.expectEvent("bob")
	if e["online"] != true {
		t.Fatalf("event %v", e)
	}
	_, _ = connect(t, n, "bob", "desktop")
	e = w.expectEvent("bob")
	if len(e["sessions"].([]any)) != 2 {
		t.Fatalf("event %v", e)
	}
	// A no-op write and heartbeats make no event.
	a.ok(map[string]any{"op": "status", "status": "away"})
	a.sendRaw(`{"op":"hb"}`)
	w.expectQuiet(50 * time.Millisecond)

	// Account changes are events too.
	a.ok(map[string]any{"op": "account", "override": "dnd"})
	e = w.expectEvent("alice")
	if e["status"] != "dnd" || e.num("version") <= last {
		t.Fatalf("event %v", e)
	}

	w.ok(map[string]any{"op": "unsub", "users": []string{"alice", "nobody"}})
	a.ok(map[string]any{"op": "account", "override": "none"})
	b1.ok(map[string]any{"op": "status", "status": "away"})
	// Only bob's event arrives.
	if e := w.recv(); e.str("op") != protocol.OpEvent || e.str("user") != "bob" {
		t.Fatalf("after unsub: %v", e)
	}
	w.expectQuiet(50 * time.Millisecond)
}

func TestSubGroup(t *testing.T) {
	n := newTestNode(t, nil)
	a, _ := connect(t, n, "alice", "phone", map[string]any{"groups": []string{"team"}})
	w, _ := connect(t, n, "watcher", "w")
	w.ok(map[string]any{"op": "sub", "group": "team"})
	e := w.expectEvent("alice")
	if e.str("group") != "team" || e["member"] != true || e["online"] != true {
		t.Fatalf("initial %v", e)
	}
	// bob joins the group: a member event.
	b, _ := connect(t, n, "bob", "phone")
	b.ok(map[string]any{"op": "join", "group": "team"})
	e = w.expectEvent("bob")
	if e.str("group") != "team" || e["member"] != true {
		t.Fatalf("join %v", e)
	}
	// A member's status change.
	a.ok(map[string]any{"op": "status", "status": "away"})
	e = w.expectEvent("alice")
	if e["status"] != "away" || e["member"] != true {
		t.Fatalf("status %v", e)
	}
	// Leaving the group while online: member false, still online.
	b.ok(map[string]any{"op": "leave", "group": "team"})
	e = w.expectEvent("bob")
	if e["member"] != false || e["online"] != true {
		t.Fatalf("leave %v", e)
	}
	// bob's changes outside the group are not the group's business.
	b.ok(map[string]any{"op": "status", "status": "busy"})
	w.expectQuiet(50 * time.Millisecond)
	// Going offline: member false.
	a.ok(map[string]any{"op": "bye"})
	e = w.expectEvent("alice")
	if e["member"] != false || e["online"] != false {
		t.Fatalf("offline %v", e)
	}
	// A second subscriber of the same group gets a snapshot, and both get
	// later events.
	w2, _ := connect(t, n, "watcher2", "w")
	w2.ok(map[string]any{"op": "sub", "group": "team"})
	w2.expectQuiet(30 * time.Millisecond) // nobody online in team
	c, _ := connect(t, n, "carol", "x", map[string]any{"groups": []string{"team"}})
	w.expectEvent("carol")
	w2.expectEvent("carol")
	w.ok(map[string]any{"op": "unsub", "group": "team"})
	c.ok(map[string]any{"op": "status", "status": "away"})
	w2.expectEvent("carol")
	w.expectQuiet(50 * time.Millisecond)
	// A user and group subscription on one connection.
	w2.ok(map[string]any{"op": "sub", "users": []string{"bob"}, "group": "other"})
	if e := w2.expectEvent("bob"); e.str("group") != "" {
		t.Fatalf("user event with a group: %v", e)
	}
	checkInvariants(t, n)
}

// Changes within an event window give one event with the newest state, a
// flap within one that returns to the state last sent gives none, and
// versions increase. The window (an hour) ends only when the test says so.
func TestEventVersionsIncreaseAndCoalesce(t *testing.T) {
	ends := make(chan time.Time)
	n, _ := newHookedTestNode(t, func(c *Config) { c.EventCoalesce = time.Hour },
		func(n *Node) { n.eventAfter = func(time.Duration) <-chan time.Time { return ends } })
	// endWindow ends the open window and returns once its flush has taken
	// the changes made so far (cleared the dirty set, under mu): a change
	// the test makes after it falls in the window that flush opens. The
	// notifier waits for a window's end only with changes dirty, and only
	// a flush clears them. Returning when the notifier took the end would
	// not do: its flush may run later, after the test's next writes, and
	// take them too.
	endWindow := func() {
		t.Helper()
		ends <- time.Now()
		waitFor(t, "the flush to take the changes", func() bool { return !n.hasDirty() })
	}
	w, _ := connect(t, n, "watcher", "w") // flushed at once: opens a window
	// Alice's connect must find that window open: made before the
	// notifier took the watcher's change, it would be flushed with it, no
	// window would wait for endWindow, and the test would hang until the
	// sessions expired.
	waitFor(t, "the notifier to take the watcher's change", func() bool { return !n.hasDirty() })
	a, _ := connect(t, n, "alice", "phone")
	endWindow()
	w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	last := w.expectEvent("alice").num("version")
	// A burst of flapping inside the window: one event with the final state.
	a.sendRaw(joinLines(`{"op":"status","status":"away"}`, `{"op":"status","status":"busy"}`,
		`{"op":"status","status":"available"}`, `{"op":"status","status":"away"}`))
	for range 4 {
		a.expect(protocol.OpOK)
	}
	w.expectQuiet(50 * time.Millisecond) // the window is open
	endWindow()
	e := w.expectEvent("alice")
	if e["status"] != "away" || e.num("version") <= last {
		t.Fatalf("event %v", e)
	}
	w.expectQuiet(100 * time.Millisecond)
	last = e.num("version")
	// A flap that ends where it started: none.
	a.sendRaw(joinLines(`{"op":"status","status":"available"}`, `{"op":"status","status":"away"}`))
	a.expect(protocol.OpOK)
	a.expect(protocol.OpOK)
	endWindow()
	w.expectQuiet(150 * time.Millisecond)
	// Versions keep increasing across many changes.
	a2, _ := connect(t, n, "alice", "desktop")
	endWindow()
	if v := w.expectEvent("alice").num("version"); v <= last {
		t.Fatalf("version %v after %v", v, last)
	} else {
		last = v
	}
	for i := range 20 {
		st := []string{"away", "available"}[i%2]
		a2.ok(map[string]any{"op": "status", "status": st})
		endWindow()
		e := w.expectEvent("alice")
		if v := e.num("version"); v <= last {
			t.Fatalf("version %v after %v", v, last)
		} else {
			last = v
		}
	}
}

func TestSubLimits(t *testing.T) {
	n := newTestNode(t, nil)
	w, _ := connect(t, n, "watcher", "w")
	users := make([]string, protocol.MaxUsersPerRequest+1)
	for i := range users {
		users[i] = "u" + utoa(uint64(i))
	}
	if f := w.call(map[string]any{"op": "sub", "users": users}); f.str("code") != string(protocol.CodeBadRequest) {
		t.Fatalf("over-long sub: %v", f)
	}
	if f := w.call(map[string]any{"op": "get", "users": users}); f.str("code") != string(protocol.CodeBadRequest) {
		t.Fatalf("over-long get: %v", f)
	}
}

// The event window is Nagle-style: a change with no flush in the last
// EventCoalesce is fanned out at once, without waiting for the window; the
// changes that follow within a window of a flush wait for its end and give
// one event with the newest state. Time is the node's fake Clock, and a
// window ends only when the test says so.
func TestEventWindowSendsAnIsolatedChangeAtOnce(t *testing.T) {
	const window = 10 * time.Second
	clock := newFakeClock()
	waits := make(chan time.Duration, 16) // what the notifier waited for
	ends := make(chan time.Time)          // a window ends when the test sends
	n, _ := newHookedTestNode(t, func(c *Config) {
		c.Clock, c.EventCoalesce, c.Timeout = clock, window, time.Hour
	}, func(n *Node) {
		n.eventAfter = func(d time.Duration) <-chan time.Time { waits <- d; return ends }
	})
	noWait := func(what string) {
		t.Helper()
		select {
		case d := <-waits:
			t.Fatalf("%s waited %v for the window", what, d)
		default:
		}
	}
	// flushed waits until the notifier has taken every change made so far,
	// so the window its flush opened starts before the clock moves on.
	flushed := func() {
		t.Helper()
		waitFor(t, "the notifier to take the changes", func() bool { return !n.hasDirty() })
	}
	w, _ := connect(t, n, "watcher", "w")
	flushed()
	clock.Advance(2 * window)
	a, _ := connect(t, n, "alice", "phone")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	w.expectEvent("alice")
	flushed()

	// Isolated: the change is delivered at once, with no wait (the window
	// never ends here, so a change that waited would never come).
	clock.Advance(2 * window)
	a.ok(map[string]any{"op": "status", "status": "away"})
	if e := w.expectEvent("alice"); deviceStatus(e) != "away" {
		t.Fatalf("isolated change: %v", e)
	}
	noWait("an isolated change")

	// A burst 1s into the window that flush opened waits for the window's
	// end, then gives one event with the newest state.
	clock.Advance(time.Second)
	a.ok(map[string]any{"op": "status", "status": "busy"})
	if d := <-waits; d != window-time.Second {
		t.Fatalf("a change 1s into the window waited %v, want %v", d, window-time.Second)
	}
	a.ok(map[string]any{"op": "status", "status": "available"})
	w.expectQuiet(50 * time.Millisecond) // nothing before the window's end
	clock.Advance(window - time.Second)
	ends <- clock.Now()
	if e := w.expectEvent("alice"); deviceStatus(e) != "available" {
		t.Fatalf("burst: %v, want one event with the newest state", e)
	}
	w.expectQuiet(50 * time.Millisecond)
	noWait("the burst's flush")

	// That flush opened a window too: a flap within it back to the state
	// last sent gives no event at the window's end.
	clock.Advance(time.Second)
	a.ok(map[string]any{"op": "status", "status": "away"})
	<-waits
	a.ok(map[string]any{"op": "status", "status": "available"})
	clock.Advance(window)
	ends <- clock.Now()
	w.expectQuiet(50 * time.Millisecond)
	flushed()

	// Quiet past the window: the next change goes at once again.
	clock.Advance(2 * window)
	a.ok(map[string]any{"op": "status", "status": "busy"})
	if e := w.expectEvent("alice"); deviceStatus(e) != "busy" {
		t.Fatalf("change after a quiet window: %v", e)
	}
	noWait("a change after a quiet window")
}

func TestEventWindowWait(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := eventWindow{length: 10 * time.Millisecond}
	for _, c := range []struct {
		flushed bool
		at      time.Duration // after t0
		want    time.Duration
	}{
		{false, 0, 0},                    // no flush yet: at once
		{true, 0, 10 * time.Millisecond}, // just flushed: the whole window
		{true, 3 * time.Millisecond, 7 * time.Millisecond},
		{true, 10 * time.Millisecond, 0},          // the window's end
		{true, time.Second, 0},                    // long quiet
		{true, -time.Hour, 10 * time.Millisecond}, // the clock stepped back: one window at most
	} {
		w.quietAt = time.Time{}
		if c.flushed {
			w.flushed(t0)
		}
		if got := w.wait(t0.Add(c.at)); got != c.want {
			t.Errorf("flushed %v, change at +%v: wait %v, want %v", c.flushed, c.at, got, c.want)
		}
	}
	if got := (&eventWindow{length: -1}).wait(t0); got != 0 {
		t.Errorf("no window: wait %v", got)
	}
}

// deviceStatus is the status of an event's one session.
func deviceStatus(e frame) string {
	ss, _ := e["sessions"].([]any)
	if len(ss) != 1 {
		return fmt.Sprintf("%d sessions", len(ss))
	}
	m, _ := ss[0].(map[string]any)
	st, _ := m["status"].(string)
	return st
}
