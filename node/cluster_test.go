package node

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// remote is a peer gateway's replica, writing as n2.
type remote struct {
	t *testing.T
	r *crdt.Replica
}

func newRemote(t *testing.T, name string) *remote {
	r, err := crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: name, Incarnation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return &remote{t: t, r: r}
}

func (rm *remote) put(user, device string, epoch uint64, st crdt.State, status crdt.Status, groups ...string) crdt.Delta {
	rm.t.Helper()
	d, err := rm.r.PutLocal(crdt.Session{User: user, Device: device, ID: "ses_" + user + device + utoa(epoch),
		Epoch: epoch, State: st, Status: status, Groups: groups, ExpiresAt: time.Now().Add(time.Minute).UnixNano()},
		time.Now().UnixNano())
	if err != nil {
		rm.t.Fatal(err)
	}
	return d
}

func TestPublishOwnedWritesNotHeartbeats(t *testing.T) {
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc })
	a, _ := connect(t, n, "alice", "phone")
	count := func() int { return len(fc.published()) }
	if count() != 1 {
		t.Fatalf("hello published %d deltas", count())
	}
	for range 50 {
		a.sendRaw(`{"op":"hb"}`)
	}
	a.call(map[string]any{"op": "hb"})
	a.call(map[string]any{"op": "get", "users": []string{"alice"}})
	a.call(map[string]any{"op": "locate", "user": "alice"})
	a.ok(map[string]any{"op": "sub", "users": []string{"bob"}})
	if count() != 1 {
		t.Fatalf("heartbeats and reads published: %d deltas", count())
	}
	a.ok(map[string]any{"op": "status", "status": "busy"})
	a.ok(map[string]any{"op": "join", "group": "g"})
	a.ok(map[string]any{"op": "leave", "group": "g"})
	a.ok(map[string]any{"op": "account", "override": "away"})
	a.ok(map[string]any{"op": "status", "status": "busy"}) // no-op: no write
	a.ok(map[string]any{"op": "bye"})
	ds := fc.published()
	if len(ds) != 7 {
		t.Fatalf("published %d deltas, want 7", len(ds))
	}
	// In write order, each stamped by this node's origin, versions 1..7.
	for i, d := range ds {
		if d.Origin() != n.Origin() || d.Version() != uint64(i+1) || d.Since != uint64(i) {
			t.Fatalf("delta %d: origin %v version %d since %d", i, d.Origin(), d.Version(), d.Since)
		}
	}
	if ds[4].Account == nil || ds[4].Account.Override != crdt.OverrideAway {
		t.Fatalf("account delta %+v", ds[4])
	}
	if s := ds[5].Session; s == nil || s.State != crdt.StateDisconnected {
		t.Fatalf("bye delta %+v", ds[5])
	}
	if ls := ds[6].LastSeen; ls == nil || ls.User != "alice" || ls.At != ds[5].Session.Updated {
		t.Fatalf("last seen delta %+v", ds[6])
	}
	// A peer replica applying them converges with ours.
	peer := newRemote(t, "n2")
	for _, d := range ds {
		if _, _, err := peer.r.Apply(d, time.Now().UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	if p := peer.r.Presence("alice", 0); p.Online {
		t.Fatalf("peer sees %+v", p)
	}
}

func TestRemoteDeltasEmitEventsAndSupersede(t *testing.T) {
	fc := &fakeCluster{}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc })
	w, _ := connect(t, n, "watcher", "w")
	local, wl := connect(t, n, "alice", "phone")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice", "bob"}})
	w.expectEvent("alice")
	w.expectEvent("bob")
	w.ok(map[string]any{"op": "sub", "group": "team"})

	rm := newRemote(t, "n2")
	// bob connects on n2, in team.
	if err := n.ApplyDeltas([]crdt.Delta{rm.put("bob", "phone", 1, crdt.StateActive, crdt.StatusBusy, "team")}); err != nil {
		t.Fatal(err)
	}
	var sawUser, sawGroup bool
	for !sawUser || !sawGroup {
		e := w.expectEvent("bob")
		if e["online"] != true || e["sessions"].([]any)[0].(map[string]any)["gateway"] != "n2" {
			t.Fatalf("event %v", e)
		}
		if e.str("group") == "team" {
			sawGroup = true
		} else {
			sawUser = true
		}
	}
	// Locate shows the remote session.
	loc := w.call(map[string]any{"op": "locate", "user": "bob"})
	if ss := loc["sessions"].([]any); len(ss) != 1 || ss[0].(map[string]any)["gateway"] != "n2" {
		t.Fatalf("locate %v", loc)
	}

	// alice reconnects on n2 with a newer epoch: the local connection is
	// superseded, and nothing is written for it here.
	before := len(fc.published())
	d := rm.put("alice", "phone", uint64(wl.num("epoch"))+1, crdt.StateActive, crdt.StatusAway)
	if err := n.ApplyDeltas([]crdt.Delta{d}); err != nil {
		t.Fatal(err)
	}
	local.expectError(protocol.CodeSuperseded)
	local.expectClosed()
	e := w.expectEvent("alice")
	if ss := e["sessions"].([]any); e["status"] != "away" || len(ss) != 1 || ss[0].(map[string]any)["gateway"] != "n2" {
		t.Fatalf("event %v", e)
	}
	if n.SessionCount() != 1 || len(fc.published()) != before {
		t.Fatalf("sessions %d, published %d after remote supersede", n.SessionCount(), len(fc.published())-before)
	}
	// Replaying the same delta changes nothing; an invalid one is an error
	// and does not stop the valid ones in the batch.
	bad := crdt.Delta{Since: 5, Session: &crdt.Session{User: "x"}}
	err := n.ApplyDeltas([]crdt.Delta{d, bad, rm.put("bob", "phone", 1, crdt.StateActive, crdt.StatusAvailable, "team")})
	if err == nil || !errors.Is(err, crdt.ErrInvalidDelta) {
		t.Fatalf("ApplyDeltas error %v", err)
	}
	if e := w.expectEvent("bob"); e["status"] != "available" {
		t.Fatalf("event %v", e)
	}

	// n2 fails: its sessions are shown expired, with events; then it heals.
	n.MarkNodeDown("n2")
	offline := map[string]bool{}
	for len(offline) < 2 {
		e := w.recv()
		if e.str("op") == protocol.OpEvent && e["online"] == false {
			offline[e.str("user")] = true
		}
	}
	if !offline["alice"] || !offline["bob"] {
		t.Fatalf("offline %v", offline)
	}
	if f := w.call(map[string]any{"op": "group", "group": "team"}); f.num("online") != 0 {
		t.Fatalf("group %v", f)
	}
	n.MarkNodeUp("n2")
	if e := w.expectEvent("alice"); e["online"] != true {
		t.Fatalf("event %v", e)
	}
	checkInvariants(t, n)
}

func TestApplySyncSupersedesAndDigest(t *testing.T) {
	n := newTestNode(t, nil)
	w, _ := connect(t, n, "watcher", "w")
	local, wl := connect(t, n, "alice", "phone")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	w.expectEvent("alice")
	rm := newRemote(t, "n2")
	newer := wl.num("epoch") + 5
	rm.put("alice", "phone", uint64(newer), crdt.StateActive, crdt.StatusBusy)
	rm.put("carol", "x", 1, crdt.StateActive, crdt.StatusAvailable)
	// Anti-entropy: the node's digest, the peer's diff.
	sync := rm.r.Diff(n.Digest())
	if err := n.ApplySync(sync); err != nil {
		t.Fatal(err)
	}
	local.expectError(protocol.CodeSuperseded)
	if e := w.expectEvent("alice"); e.num("sessions") != 0 && e["sessions"].([]any)[0].(map[string]any)["epoch"] != newer {
		t.Fatalf("event %v", e)
	}
	if !presenceOf(n, "carol").Online {
		t.Fatal("carol missing after sync")
	}
	// And the other way: the peer catches up from our diff.
	if _, err := rm.r.ApplySync(n.Diff(rm.r.Digest()), time.Now().UnixNano()); err != nil {
		t.Fatal(err)
	}
	if !rm.r.Presence("watcher", 0).Online {
		t.Fatal("peer did not learn watcher")
	}
	if err := n.ApplySync(crdt.Sync{{Origin: crdt.Origin{}}}); err == nil {
		t.Fatal("invalid sync accepted")
	}
	checkInvariants(t, n)
}

func TestSendLocalAndRouted(t *testing.T) {
	fc := &fakeCluster{}
	var (
		routedMu sync.Mutex
		routed   []Message
	)
	fc.routeFn = func(_ context.Context, gw string, msg Message) (int, error) {
		routedMu.Lock()
		routed = append(routed, msg)
		routedMu.Unlock()
		switch gw {
		case "n2":
			return 2, nil
		case "n3":
			return 0, errors.New("unreachable")
		}
		return 0, nil
	}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc })
	a, _ := connect(t, n, "alice", "phone")
	b1, _ := connect(t, n, "bob", "phone")
	b2, _ := connect(t, n, "bob", "desktop")

	f := a.ok(map[string]any{"op": "send", "to": "bob", "body": map[string]any{"text": "hi", "n": 1}})
	if f.num("delivered") != 2 {
		t.Fatalf("send %v", f)
	}
	for _, b := range []*client{b1, b2} {
		m := b.expect(protocol.OpMessage)
		body, _ := json.Marshal(m["body"])
		if m.str("from") != "alice" || m.str("from_device") != "phone" || string(body) != `{"n":1,"text":"hi"}` {
			t.Fatalf("message %v", m)
		}
	}
	if len(fc.routes) != 0 {
		t.Fatalf("routed %v for local-only recipient", fc.routes)
	}
	// Nobody online: delivered 0.
	if f := a.ok(map[string]any{"op": "send", "to": "nobody", "body": "x"}); f.num("delivered") != 0 {
		t.Fatalf("send %v", f)
	}
	// bob also on n2 (two sessions there) and n3 (unreachable): one Route
	// per gateway, counts summed, failures count zero.
	rm2, rm3 := newRemote(t, "n2"), newRemote(t, "n3")
	n.ApplyDeltas([]crdt.Delta{
		rm2.put("bob", "tablet", 1, crdt.StateActive, crdt.StatusAvailable),
		rm2.put("bob", "watch", 1, crdt.StateActive, crdt.StatusAvailable),
		rm3.put("bob", "tv", 1, crdt.StateActive, crdt.StatusAvailable),
	})
	if f := a.ok(map[string]any{"op": "send", "to": "bob", "body": "yo"}); f.num("delivered") != 4 {
		t.Fatalf("send %v", f)
	}
	fc.mu.Lock()
	routes := append([]string(nil), fc.routes...)
	fc.mu.Unlock()
	if len(routes) != 2 {
		t.Fatalf("routes %v", routes)
	}
	routedMu.Lock()
	defer routedMu.Unlock()
	if m := routed[0]; m.To != "bob" || m.From != "alice" || string(m.Body) != `"yo"` {
		t.Fatalf("routed %+v", m)
	}
	// A routed message delivered here.
	if k := n.DeliverLocal(Message{To: "alice", From: "zed", FromDevice: "d", Body: json.RawMessage(`[1]`)}); k != 1 {
		t.Fatalf("DeliverLocal %d", k)
	}
	if m := a.expect(protocol.OpMessage); m.str("from") != "zed" {
		t.Fatalf("message %v", m)
	}
	if k := n.DeliverLocal(Message{To: "alice", Body: json.RawMessage(`{bad`)}); k != 0 {
		t.Fatalf("DeliverLocal of a bad body: %d", k)
	}
}

func TestRouteTimeout(t *testing.T) {
	fc := &fakeCluster{routeFn: func(ctx context.Context, _ string, _ Message) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc; c.RouteTimeout = 50 * time.Millisecond })
	a, _ := connect(t, n, "alice", "phone")
	n.ApplyDeltas([]crdt.Delta{newRemote(t, "n2").put("bob", "x", 1, crdt.StateActive, crdt.StatusAvailable)})
	start := time.Now()
	if f := a.ok(map[string]any{"op": "send", "to": "bob", "body": 1}); f.num("delivered") != 0 {
		t.Fatalf("send %v", f)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatal("route timeout not applied")
	}
	if n.Stats().RouteFailures != 1 {
		t.Fatalf("stats %+v", n.Stats())
	}
}
