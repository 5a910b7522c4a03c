package node

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// The disconnect grace (grace.go): a session whose client drops the
// connection without bye stays online for Config.DisconnectGrace; a
// reconnect within it takes over without an offline event, otherwise the
// session is written disconnected when it ends. Time is the node's fake
// clock; the sweeper runs on a real ticker and reads it.

const testGrace = 5 * time.Second

// graceNode is a test node with the disconnect grace on, a fake clock, a
// Timeout long enough not to interfere, and a fake cluster that records
// what it publishes.
func graceNode(t *testing.T, grace time.Duration) (*Node, *fakeClock, *fakeCluster) {
	clock := newFakeClock()
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) {
		c.Clock = clock
		c.Heartbeat = 10 * time.Second
		c.Timeout = time.Minute
		c.DisconnectGrace = grace
		c.Cluster = fc
	})
	return n, clock, fc
}

// inGrace reports whether (user, device)'s local session is held for the
// grace: its connection dropped and the session is still registered.
func inGrace(n *Node, user, device string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.local[user][device]
	return c != nil && c.graceDeadline.Load() != 0
}

// endsPublished returns the states of user's sessions that n published other than
// active.
func endsPublished(fc *fakeCluster, user string) []crdt.State {
	var out []crdt.State
	for _, d := range fc.published() {
		if d.Session != nil && d.Session.User == user && d.Session.State != crdt.StateActive {
			out = append(out, d.Session.State)
		}
	}
	return out
}

// watch connects a subscriber to user and reads the first event.
func watch(t *testing.T, n *Node, user string) *client {
	w, _ := connect(t, n, "watcher", "w")
	w.ok(map[string]any{"op": "sub", "users": []string{user}})
	w.expectEvent(user)
	return w
}

// noOffline reads w's events until the reply to an hb and fails on an
// offline event for user.
func noOffline(t *testing.T, w *client, user string) {
	t.Helper()
	_, events := w.callEvents(map[string]any{"op": "hb"})
	for _, e := range events {
		if e.str("user") == user && e["online"] != true {
			t.Fatalf("subscriber saw %s offline: %v", user, e)
		}
	}
}

// A connection cut without bye that reconnects (with last_epoch) within
// the grace never shows the user offline, and the old session is never
// written ended; a reconnect without last_epoch takes over the same way.
func TestDisconnectGraceReconnectNeverShowsOffline(t *testing.T) {
	for _, withLast := range []bool{true, false} {
		name := "last_epoch"
		if !withLast {
			name = "no_last_epoch"
		}
		t.Run(name, func(t *testing.T) {
			n, clock, fc := graceNode(t, testGrace)
			w := watch(t, n, "alice")
			alice, welcome := connect(t, n, "alice", "phone")
			if e := w.expectEvent("alice"); e["online"] != true {
				t.Fatalf("event %v", e)
			}
			alice.nc.Close() // the network drops it: no bye
			waitFor(t, "the dropped session held", func() bool { return inGrace(n, "alice", "phone") })
			clock.Advance(testGrace - time.Second)
			waitSweeps(t, n)
			if p := presenceOf(n, "alice"); !p.Online {
				t.Fatalf("alice offline within the grace: %+v", p)
			}
			var extra map[string]any
			if withLast {
				extra = map[string]any{"last_epoch": welcome["epoch"]}
			}
			_, w2 := connect(t, n, "alice", "phone", extra)
			if w2.num("epoch") <= welcome.num("epoch") {
				t.Fatalf("reconnect epoch %v not above %v", w2["epoch"], welcome["epoch"])
			}
			// Well past the first connection's grace.
			clock.Advance(2 * testGrace)
			waitSweeps(t, n)
			noOffline(t, w, "alice")
			if ends := endsPublished(fc, "alice"); len(ends) != 0 {
				t.Fatalf("the taken-over session was written %v", ends)
			}
			if s, _ := sessionOf(n, crdt.Key{User: "alice", Device: "phone"}); s.State != crdt.StateActive || s.Epoch != uint64(w2.num("epoch")) {
				t.Fatalf("alice's record %+v", s)
			}
			checkInvariants(t, n)
		})
	}
}

// A cut connection with no reconnect is online until the grace ends and
// offline after it, written disconnected.
func TestDisconnectGraceEndsUnclaimedSession(t *testing.T) {
	n, clock, fc := graceNode(t, testGrace)
	w := watch(t, n, "bob")
	bob, _ := connect(t, n, "bob", "phone")
	w.expectEvent("bob")
	bob.nc.Close()
	waitFor(t, "the dropped session held", func() bool { return inGrace(n, "bob", "phone") })
	clock.Advance(testGrace - time.Second)
	waitSweeps(t, n)
	noOffline(t, w, "bob")
	if p := presenceOf(n, "bob"); !p.Online {
		t.Fatalf("bob offline within the grace: %+v", p)
	}
	clock.Advance(2 * time.Second)
	if e := w.expectEvent("bob"); e["online"] != false {
		t.Fatalf("after the grace: %v", e)
	}
	if s, _ := sessionOf(n, crdt.Key{User: "bob", Device: "phone"}); s.State != crdt.StateDisconnected {
		t.Fatalf("bob's record %+v", s)
	}
	if ends := endsPublished(fc, "bob"); len(ends) != 1 || ends[0] != crdt.StateDisconnected {
		t.Fatalf("published ends %v", ends)
	}
	checkInvariants(t, n)
}

// bye ends the session at once, grace or not; a grace of zero ends a cut
// connection's session at once. The clock never moves here.
func TestDisconnectGraceByeAndZeroAreImmediate(t *testing.T) {
	t.Run("bye", func(t *testing.T) {
		n, _, _ := graceNode(t, testGrace)
		w := watch(t, n, "carol")
		carol, _ := connect(t, n, "carol", "phone")
		w.expectEvent("carol")
		carol.ok(map[string]any{"op": "bye"})
		if e := w.expectEvent("carol"); e["online"] != false {
			t.Fatalf("after bye: %v", e)
		}
		if s, _ := sessionOf(n, crdt.Key{User: "carol", Device: "phone"}); s.State != crdt.StateDisconnected {
			t.Fatalf("carol's record %+v", s)
		}
	})
	t.Run("zero", func(t *testing.T) {
		n, _, _ := graceNode(t, 0)
		w := watch(t, n, "dave")
		dave, _ := connect(t, n, "dave", "phone")
		w.expectEvent("dave")
		dave.nc.Close()
		if e := w.expectEvent("dave"); e["online"] != false {
			t.Fatalf("after the cut: %v", e)
		}
		if s, _ := sessionOf(n, crdt.Key{User: "dave", Device: "phone"}); s.State != crdt.StateDisconnected {
			t.Fatalf("dave's record %+v", s)
		}
	})
	t.Run("closed_by_the_gateway", func(t *testing.T) {
		// A close the gateway decides (here a line over the limit) is not
		// a dropped connection: no grace.
		clock := newFakeClock()
		n := newTestNode(t, func(c *Config) {
			c.Clock = clock
			c.Timeout = time.Minute
			c.DisconnectGrace = testGrace
			c.MaxLineBytes = 1024
		})
		w := watch(t, n, "erin")
		erin, _ := connect(t, n, "erin", "phone")
		w.expectEvent("erin")
		erin.sendRaw(`{"op":"hb","pad":"` + strings.Repeat("x", 2048) + `"}`)
		if e := w.expectEvent("erin"); e["online"] != false {
			t.Fatalf("after line_too_long: %v", e)
		}
	})
}

// Messages are not queued for a session in grace: a send counts only the
// connections it reached.
func TestDisconnectGraceSendNotDelivered(t *testing.T) {
	n, _, _ := graceNode(t, testGrace)
	sender, _ := connect(t, n, "sam", "phone")
	rx, _ := connect(t, n, "rita", "phone")
	rx.nc.Close()
	waitFor(t, "the dropped session held, its connection dead", func() bool {
		if !inGrace(n, "rita", "phone") {
			return false
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		c := n.local["rita"]["phone"]
		c.q.mu.Lock()
		defer c.q.mu.Unlock()
		return c.q.dead
	})
	f := sender.call(map[string]any{"op": "send", "to": "rita", "body": map[string]any{"x": 1}})
	if f.str("op") != protocol.OpOK || f.num("delivered") != 0 {
		t.Fatalf("send to a session in grace: %v", f)
	}
}

// awaitUser reads w's events until one of user passes ok, failing on an
// event that shows user offline, or any user in offline, meanwhile.
func awaitUser(t *testing.T, w *client, user string, ok func(frame) bool, neverOffline ...string) frame {
	t.Helper()
	for {
		e := nextEvent(w)
		if e.str("user") == user && ok(e) {
			return e
		}
		if e["online"] != true && slices.Contains(neverOffline, e.str("user")) {
			t.Fatalf("a subscriber saw %s offline: %v", e.str("user"), e)
		}
	}
}

// onlineOn returns a check that an event shows its user online with one
// session, on gateway gw; offline, one that shows it offline.
func onlineOn(gw string) func(frame) bool {
	return func(e frame) bool {
		ss, _ := e["sessions"].([]any)
		return e["online"] == true && len(ss) == 1 && ss[0].(map[string]any)["gateway"] == gw
	}
}

func offline(e frame) bool { return e["online"] == false }

// Across three gateways, with a subscriber on each: a client cut from A
// that reconnects to B within the grace is never shown offline at any of
// them, and A never writes its old session ended; one cut from A that does
// not come back is online at each until the grace ends on A, and offline
// at each once it has (A's clock at exactly the grace: the sweep after it).
func TestDisconnectGraceAcrossGateways(t *testing.T) {
	clocks := map[string]*fakeClock{}
	m, ns := newMesh(t, func(c *Config) {
		clock := newFakeClock()
		clocks[c.Name] = clock
		c.Clock = clock
		c.Timeout = time.Minute
		c.DisconnectGrace = testGrace
	}, "A", "B", "C")
	a, b := ns[0], ns[1]
	var watchers []*client
	for _, n := range ns {
		w, _ := connect(t, n, "watcher", n.cfg.Name)
		w.ok(map[string]any{"op": "sub", "users": []string{"alice", "bob"}})
		expectPresence(t, w.expectEvent("alice"), "alice", "")
		expectPresence(t, w.expectEvent("bob"), "bob", "")
		watchers = append(watchers, w)
	}
	alice, welcome := connect(t, a, "alice", "phone")
	bob, _ := connect(t, a, "bob", "phone")
	for _, w := range watchers {
		awaitUser(t, w, "alice", onlineOn("A"))
		awaitUser(t, w, "bob", onlineOn("A"))
	}

	alice.nc.Close()
	bob.nc.Close()
	waitFor(t, "both held on A", func() bool { return inGrace(a, "alice", "phone") && inGrace(a, "bob", "phone") })
	connect(t, b, "alice", "phone", map[string]any{"last_epoch": welcome["epoch"]})
	for _, w := range watchers {
		awaitUser(t, w, "alice", onlineOn("B"), "alice", "bob")
	}
	waitFor(t, "A forgets alice's held session", func() bool { return !inGrace(a, "alice", "phone") })

	clocks["A"].Advance(testGrace - time.Millisecond)
	waitSweeps(t, a)
	for _, w := range watchers {
		noOffline(t, w, "alice")
		noOffline(t, w, "bob")
	}
	clocks["A"].Advance(time.Millisecond)
	for _, w := range watchers {
		awaitUser(t, w, "bob", offline, "alice")
		noOffline(t, w, "alice")
	}
	for _, d := range m.published("A") {
		if d.Session != nil && d.Session.User == "alice" && d.Session.State != crdt.StateActive {
			t.Fatalf("A wrote alice's taken-over session %v", d.Session.State)
		}
	}
	for _, n := range ns {
		if p := presenceOf(n, "alice"); !p.Online {
			t.Fatalf("%s shows %+v", n.cfg.Name, p)
		}
		checkInvariants(t, n)
	}
}

// A drain does not wait for a session in its disconnect grace: a
// standalone gateway's drain writes it disconnected at once, like every
// other session (the clock never moves here).
func TestDisconnectGraceDrainEndsHeldSession(t *testing.T) {
	n, _, fc := graceNode(t, testGrace)
	w := watch(t, n, "fay")
	fay, _ := connect(t, n, "fay", "phone")
	w.expectEvent("fay")
	fay.nc.Close()
	waitFor(t, "the dropped session held", func() bool { return inGrace(n, "fay", "phone") })
	if err := n.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s, _ := sessionOf(n, crdt.Key{User: "fay", Device: "phone"}); s.State != crdt.StateDisconnected {
		t.Fatalf("fay's record after the drain %+v", s)
	}
	if ends := endsPublished(fc, "fay"); len(ends) != 1 || ends[0] != crdt.StateDisconnected {
		t.Fatalf("published ends %v", ends)
	}
}

// A held session still expires timeout after its client's last request:
// the grace never outlasts the session's timeout.
func TestDisconnectGraceNeverOutlastsTimeout(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) {
		c.Clock = clock
		c.Heartbeat = time.Second
		c.Timeout = 3 * time.Second
		c.DisconnectGrace = time.Minute
	})
	w := watch(t, n, "gus")
	gus, _ := connect(t, n, "gus", "phone")
	w.expectEvent("gus")
	gus.nc.Close()
	waitFor(t, "the dropped session held", func() bool { return inGrace(n, "gus", "phone") })
	// The watcher keeps its own session alive; the sweeper may end gus's
	// before a reply, so keep the events read on the way.
	var gone frame
	for range 4 {
		clock.Advance(time.Second)
		_, events := w.callEvents(map[string]any{"op": "hb"})
		for _, e := range events {
			if e.str("user") == "gus" && gone == nil {
				gone = e
			}
		}
	}
	if gone == nil {
		gone = w.expectEvent("gus")
	}
	if gone["online"] != false {
		t.Fatalf("after the timeout: %v", gone)
	}
	if s, _ := sessionOf(n, crdt.Key{User: "gus", Device: "phone"}); s.State != crdt.StateExpired {
		t.Fatalf("gus's record %+v", s)
	}
}

// Metrics.SessionsInGrace counts the sessions held for the grace: one per
// dropped connection, none once a reconnect took it over or the grace
// ended.
func TestDisconnectGraceMetric(t *testing.T) {
	n, clock, _ := graceNode(t, testGrace)
	inGraceNow := func() int { return n.Metrics().SessionsInGrace }
	alice, welcome := connect(t, n, "alice", "phone")
	bob, _ := connect(t, n, "bob", "phone")
	if k := inGraceNow(); k != 0 {
		t.Fatalf("%d in grace with every connection open", k)
	}
	alice.nc.Close()
	bob.nc.Close()
	waitFor(t, "both held", func() bool { return inGrace(n, "alice", "phone") && inGrace(n, "bob", "phone") })
	if m := n.Metrics(); m.SessionsInGrace != 2 || m.LocalSessions != 2 {
		t.Fatalf("%d in grace of %d local sessions, want 2 of 2", m.SessionsInGrace, m.LocalSessions)
	}
	connect(t, n, "alice", "phone", map[string]any{"last_epoch": welcome["epoch"]})
	if k := inGraceNow(); k != 1 {
		t.Fatalf("%d in grace after alice's reconnect, want 1", k)
	}
	clock.Advance(testGrace + time.Second)
	waitFor(t, "bob's grace over", func() bool { return !inGrace(n, "bob", "phone") })
	if m := n.Metrics(); m.SessionsInGrace != 0 || m.LocalSessions != 1 {
		t.Fatalf("%d in grace of %d local sessions, want 0 of 1", m.SessionsInGrace, m.LocalSessions)
	}
}
