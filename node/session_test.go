package node

import (
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

func TestHelloWelcome(t *testing.T) {
	n := newTestNode(t, nil)
	start := time.Now()
	c := dial(t, n)
	c.send(map[string]any{"op": "hello", "id": 7, "user": "user_142", "device": "phone",
		"status": "away", "groups": []string{"team-7", "team-7", "ops"}})
	w := c.expect(protocol.OpWelcome)
	if w.num("id") != 7 || w.str("user") != "user_142" || w.str("device") != "phone" ||
		!clockEpoch(w.num("epoch"), start) || w.str("gateway") != "n1" || w.num("heartbeat_ms") != 5000 ||
		w.num("timeout_ms") != 15000 || !strings.HasPrefix(w.str("session"), "ses_") {
		t.Fatalf("welcome %v", w)
	}
	if _, err := time.Parse(time.RFC3339, w.str("expires_at")); err != nil {
		t.Fatalf("expires_at: %v", err)
	}
	s, ok := sessionOf(n, crdt.Key{User: "user_142", Device: "phone"})
	if !ok || s.State != crdt.StateActive || s.Status != crdt.StatusAway || strings.Join(s.Groups, ",") != "ops,team-7" {
		t.Fatalf("record %+v", s)
	}
	// hello twice is a bad request; the session stays.
	c.send(map[string]any{"op": "hello", "user": "user_142"})
	c.expectError(protocol.CodeBadRequest)
	if n.SessionCount() != 1 {
		t.Fatal("session lost")
	}
	checkInvariants(t, n)
}

func TestHelloAssignsDeviceAndEpochs(t *testing.T) {
	n := newTestNode(t, nil)
	_, w1 := connect(t, n, "alice", "")
	_, w2 := connect(t, n, "alice", "")
	d1, d2 := w1.str("device"), w2.str("device")
	if d1 == "" || d1 == d2 {
		t.Fatalf("devices %q %q", d1, d2)
	}
	if n.SessionCount() != 2 {
		t.Fatalf("sessions %d", n.SessionCount())
	}
	// last_epoch moves the epoch forward (past the clock's floor, here by
	// 1000s); a reconnect moves past the node's.
	base := float64(crdt.ClockEpochFloor(time.Now().Add(1000 * time.Second).UnixNano()))
	c, w := connect(t, n, "bob", "phone", map[string]any{"last_epoch": base + 16})
	if w.num("epoch") != base+17 {
		t.Fatalf("epoch %v", w["epoch"])
	}
	c.ok(map[string]any{"op": "bye"})
	_, w = connect(t, n, "bob", "phone", map[string]any{"last_epoch": 3})
	if w.num("epoch") != base+18 {
		t.Fatalf("reconnect epoch %v", w["epoch"])
	}
}

func TestStatusAccountGetLocate(t *testing.T) {
	n := newTestNode(t, nil)
	a, wa := connect(t, n, "alice", "phone")
	_, _ = connect(t, n, "alice", "desktop")
	b, _ := connect(t, n, "bob", "phone")

	get := func(user string) frame {
		t.Helper()
		f := b.call(map[string]any{"op": "get", "users": []string{user}})
		if f.str("op") != protocol.OpPresence {
			t.Fatalf("get: %v", f)
		}
		return f["users"].([]any)[0].(map[string]any)
	}
	p := get("alice")
	if p["online"] != true || p["status"] != "available" || len(p["sessions"].([]any)) != 2 {
		t.Fatalf("presence %v", p)
	}
	a.ok(map[string]any{"op": "status", "status": "busy"})
	// busy from a device that is not authoritative counts as available
	if p := get("alice"); p["status"] != "available" {
		t.Fatalf("presence %v", p)
	}
	a.ok(map[string]any{"op": "account", "authoritative_device": "phone"})
	if p := get("alice"); p["status"] != "busy" {
		t.Fatalf("presence %v", p)
	}
	a.ok(map[string]any{"op": "account", "override": "dnd"})
	if p := get("alice"); p["status"] != "dnd" {
		t.Fatalf("presence %v", p)
	}
	a.ok(map[string]any{"op": "account", "override": "none", "authoritative_device": ""})
	if p := get("alice"); p["status"] != "available" {
		t.Fatalf("presence %v", p)
	}
	if p := get("nobody"); p["online"] != false || p["status"] != "offline" || len(p["sessions"].([]any)) != 0 {
		t.Fatalf("presence %v", p)
	}
	v1 := get("alice")["version"].(float64)
	v2 := get("alice")["version"].(float64)
	if v2 <= v1 {
		t.Fatalf("versions %v then %v", v1, v2)
	}

	loc := b.call(map[string]any{"op": "locate", "user": "alice"})
	ss := loc["sessions"].([]any)
	if loc.str("op") != protocol.OpLocate || loc.str("user") != "alice" || len(ss) != 2 {
		t.Fatalf("locate %v", loc)
	}
	first := ss[1].(map[string]any) // sorted by device: desktop, phone
	if first["session"] != wa.str("session") || first["gateway"] != "n1" || first["status"] != "busy" || first["epoch"] != wa.num("epoch") {
		t.Fatalf("locate session %v", first)
	}
	// Bad requests.
	for _, req := range []map[string]any{
		{"op": "status", "status": "sleepy"},
		{"op": "status"},
		{"op": "account"},
		{"op": "account", "override": "maybe"},
		{"op": "get"},
		{"op": "get", "users": []string{""}},
		{"op": "locate"},
		{"op": "group"},
		{"op": "join"},
		{"op": "join", "group": strings.Repeat("g", protocol.MaxNameLen+1)},
		{"op": "send", "to": "bob"},
		{"op": "sub"},
		{"op": "unsub"},
	} {
		if f := a.call(req); f.str("op") != protocol.OpError || f.str("code") != string(protocol.CodeBadRequest) {
			t.Fatalf("%v: want bad_request, got %v", req, f)
		}
	}
	checkInvariants(t, n)
}

func TestJoinLeaveGroup(t *testing.T) {
	n := newTestNode(t, nil)
	a, _ := connect(t, n, "alice", "phone", map[string]any{"groups": []string{"team"}})
	b, _ := connect(t, n, "bob", "phone")
	group := func() frame {
		t.Helper()
		f := b.call(map[string]any{"op": "group", "group": "team"})
		if f.str("op") != protocol.OpGroup || f.str("group") != "team" {
			t.Fatalf("group %v", f)
		}
		return f
	}
	if f := group(); f.num("online") != 1 || f["members"].([]any)[0].(map[string]any)["user"] != "alice" {
		t.Fatalf("group %v", f)
	}
	b.ok(map[string]any{"op": "join", "group": "team"})
	b.ok(map[string]any{"op": "join", "group": "team"}) // idempotent
	if f := group(); f.num("online") != 2 {
		t.Fatalf("group %v", f)
	}
	a.ok(map[string]any{"op": "leave", "group": "team"})
	if f := group(); f.num("online") != 1 || f["members"].([]any)[0].(map[string]any)["user"] != "bob" {
		t.Fatalf("group %v", f)
	}
	b.ok(map[string]any{"op": "bye"})
	b.expectClosed()
	c, _ := connect(t, n, "carol", "x")
	if f := c.call(map[string]any{"op": "group", "group": "team"}); f.num("online") != 0 || len(f["members"].([]any)) != 0 {
		t.Fatalf("group %v", f)
	}
	checkInvariants(t, n)
}

func TestHeartbeat(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock })
	c, _ := connect(t, n, "alice", "phone")
	c.sendRaw(`{"op":"hb"}`)
	c.sendRaw(` { "op" : "hb" } `)
	f := c.call(map[string]any{"op": "hb"})
	if f.str("op") != protocol.OpHB {
		t.Fatalf("hb reply %v", f)
	}
	want := clock.Now().Add(15 * time.Second)
	if got, err := time.Parse(time.RFC3339, f.str("expires_at")); err != nil || !got.Equal(want) {
		t.Fatalf("expires_at %v (%v), want %v", f.str("expires_at"), err, want)
	}
	c.sendRaw(`{"op":"hb","id":9}`)
	if f := c.recv(); f.str("op") != protocol.OpHB || f.num("id") != 9 {
		t.Fatalf("hb reply %v", f)
	}
	c.expectQuiet(50 * time.Millisecond) // plain heartbeats got no reply
}

func TestExpiryAfterSilence(t *testing.T) {
	clock := newFakeClock()
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) {
		c.Clock = clock
		c.Heartbeat = time.Second
		c.Timeout = 3 * time.Second
		c.Cluster = fc
	})
	watcher, _ := connect(t, n, "watcher", "w")
	a, _ := connect(t, n, "alice", "phone")
	b, _ := connect(t, n, "bob", "phone")
	watcher.ok(map[string]any{"op": "sub", "users": []string{"alice", "bob"}})
	watcher.expectEvent("alice")
	watcher.expectEvent("bob")

	// alice and the watcher keep heartbeating, bob falls silent. The
	// sweeper runs on a real ticker, so bob may expire as soon as the clock
	// passes his deadline (3s), and his event may reach the watcher before
	// the reply to one of its heartbeats: keep the events read on the way.
	var bobGone frame
	for range 4 {
		clock.Advance(time.Second)
		a.ok(map[string]any{"op": "status", "status": "available"}) // any request refreshes
		_, events := watcher.callEvents(map[string]any{"op": "hb"})
		for _, e := range events {
			if e.str("user") == "bob" && bobGone == nil {
				bobGone = e
			}
		}
		a.sendRaw(`{"op":"hb"}`)
	}
	a.call(map[string]any{"op": "hb"})
	if bobGone == nil {
		bobGone = watcher.expectEvent("bob")
	}
	if bobGone["online"] != false || bobGone["status"] != "offline" {
		t.Fatalf("event %v", bobGone)
	}
	b.expectError(protocol.CodeExpired)
	b.expectClosed()
	s, _ := sessionOf(n, crdt.Key{User: "bob", Device: "phone"})
	if s.State != crdt.StateExpired {
		t.Fatalf("bob's record %+v", s)
	}
	if p := presenceOf(n, "alice"); !p.Online {
		t.Fatal("alice expired though she heartbeated")
	}
	// The expiry was published as bob's write, then his last seen.
	ds := fc.published()
	last := ds[len(ds)-2]
	if last.Session == nil || last.Session.User != "bob" || last.Session.State != crdt.StateExpired {
		t.Fatalf("last session delta %+v", last)
	}
	if ls := ds[len(ds)-1].LastSeen; ls == nil || ls.User != "bob" {
		t.Fatalf("last delta %+v, want bob's last seen", ds[len(ds)-1])
	}
	checkInvariants(t, n)
}

func TestByeAndTCPClose(t *testing.T) {
	n := newTestNode(t, nil)
	w, _ := connect(t, n, "watcher", "w")
	a, _ := connect(t, n, "alice", "phone")
	b, _ := connect(t, n, "bob", "phone")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice", "bob"}})
	w.expectEvent("alice")
	w.expectEvent("bob")

	a.send(map[string]any{"op": "bye", "id": "x"})
	if f := a.recv(); f.str("op") != protocol.OpOK || f.str("id") != "x" {
		t.Fatalf("bye reply %v", f)
	}
	a.expectClosed()
	if e := w.expectEvent("alice"); e["online"] != false {
		t.Fatalf("event %v", e)
	}
	s, _ := sessionOf(n, crdt.Key{User: "alice", Device: "phone"})
	if s.State != crdt.StateDisconnected {
		t.Fatalf("alice's record %+v", s)
	}

	b.nc.Close()
	if e := w.expectEvent("bob"); e["online"] != false {
		t.Fatalf("event %v", e)
	}
	s, _ = sessionOf(n, crdt.Key{User: "bob", Device: "phone"})
	if s.State != crdt.StateDisconnected {
		t.Fatalf("bob's record %+v", s)
	}
	waitFor(t, "connections to close", func() bool { return n.Stats().Connections == 1 })
	if n.SessionCount() != 1 {
		t.Fatalf("sessions %d", n.SessionCount())
	}
	checkInvariants(t, n)
}

func TestSupersede(t *testing.T) {
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc })
	old, w1 := connect(t, n, "alice", "phone")
	// A request in flight on the old connection races the new hello.
	old.sendRaw(`{"op":"status","status":"busy","id":1}`)
	nu, w2 := connect(t, n, "alice", "phone")
	if w2.num("epoch") <= w1.num("epoch") { // +1, or the clock's floor if later
		t.Fatalf("epochs %v %v", w1["epoch"], w2["epoch"])
	}
	old.sendRaw(`{"op":"status","status":"away","id":2}`)
	old.sendRaw(`{"op":"join","group":"late","id":3}`)
	// The old connection gets superseded (maybe after the ok of request 1
	// if it won the race) and is closed.
	for {
		f := old.recv()
		if f.str("op") == protocol.OpError {
			if f.str("code") != string(protocol.CodeSuperseded) {
				t.Fatalf("old got %v", f)
			}
			break
		}
		if f.str("op") != protocol.OpOK || f.num("id") != 1 {
			t.Fatalf("old got %v", f)
		}
	}
	old.expectClosed()
	p := presenceOf(n, "alice")
	if len(p.Sessions) != 1 || p.Sessions[0].Session != w2.str("session") || p.Sessions[0].Status != crdt.StatusAvailable {
		t.Fatalf("presence %+v", p)
	}
	s, _ := sessionOf(n, crdt.Key{User: "alice", Device: "phone"})
	if len(s.Groups) != 0 || s.Epoch != uint64(w2.num("epoch")) {
		t.Fatalf("record %+v", s)
	}
	for _, d := range fc.published() {
		if d.Session != nil && d.Session.Epoch == uint64(w1.num("epoch")) && d.Session.Status == crdt.StatusAway {
			t.Fatalf("a request on the superseded connection was written: %+v", d.Session)
		}
	}
	nu.ok(map[string]any{"op": "status", "status": "away"})
	if p := presenceOf(n, "alice"); p.Status != crdt.UserAway {
		t.Fatalf("presence %+v", p)
	}
	if n.SessionCount() != 1 {
		t.Fatalf("sessions %d", n.SessionCount())
	}
	checkInvariants(t, n)
}
