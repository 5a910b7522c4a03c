package node

import (
	"testing"
	"time"
)

func TestSubUser(t *testing.T) {
	n := newTestNode(t, nil)
	w, _ := connect(t, n, "watcher", "w")
	a, wa := connect(t, n, "alice", "phone")

	w.send(map[string]any{"op": "sub", "users": []string{"alice", "bob", "alice"}, "id": "s"})
	if f := w.recv(); f.str("op") != OpOK || f.str("id") != "s" {
		t.Fatalf("sub reply %v", f)
	}
	// One event per current subject, at once.
	got := map[string]frame{}
	for range 2 {
		f := w.recv()
		if f.str("op") != OpEvent {
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
	if e := w.recv(); e.str("op") != OpEvent || e.str("user") != "bob" {
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

func TestEventVersionsIncreaseAndCoalesce(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.EventCoalesce = 50 * time.Millisecond })
	w, _ := connect(t, n, "watcher", "w")
	a, _ := connect(t, n, "alice", "phone")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	last := w.expectEvent("alice").num("version")
	// A burst of flapping inside the coalescing window: one event with the
	// final state (or none, if it ends where it started).
	// One write, so the burst lands well inside the window.
	a.sendRaw(joinLines(`{"op":"status","status":"away"}`, `{"op":"status","status":"busy"}`,
		`{"op":"status","status":"available"}`, `{"op":"status","status":"away"}`))
	for range 4 {
		a.expect(OpOK)
	}
	e := w.expectEvent("alice")
	if e["status"] != "away" || e.num("version") <= last {
		t.Fatalf("event %v", e)
	}
	w.expectQuiet(100 * time.Millisecond)
	last = e.num("version")
	a.sendRaw(joinLines(`{"op":"status","status":"available"}`, `{"op":"status","status":"away"}`))
	a.expect(OpOK)
	a.expect(OpOK)
	w.expectQuiet(150 * time.Millisecond)
	// Versions keep increasing across many changes.
	a2, _ := connect(t, n, "alice", "desktop")
	for i := range 20 {
		st := []string{"away", "available"}[i%2]
		a2.ok(map[string]any{"op": "status", "status": st})
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
	users := make([]string, MaxUsersPerRequest+1)
	for i := range users {
		users[i] = "u" + utoa(uint64(i))
	}
	if f := w.call(map[string]any{"op": "sub", "users": users}); f.str("code") != string(CodeBadRequest) {
		t.Fatalf("over-long sub: %v", f)
	}
	if f := w.call(map[string]any{"op": "get", "users": users}); f.str("code") != string(CodeBadRequest) {
		t.Fatalf("over-long get: %v", f)
	}
}
