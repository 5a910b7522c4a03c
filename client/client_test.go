package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

func TestConnectStatusGet(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	c := dialT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice", Device: "laptop", Status: "away"})
	sess, ok := c.Session()
	if !ok || sess.Gateway != "g0" || sess.Device != "laptop" || sess.Epoch == 0 {
		t.Fatalf("session %+v %v", sess, ok)
	}
	p, err := c.Get(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Online || p.Status != "away" || len(p.Sessions) != 1 || p.Sessions[0].Device != "laptop" {
		t.Fatalf("presence after hello: %+v", p)
	}
	if err := c.Status(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	p, err = c.Get(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if p.Sessions[0].Status != "busy" {
		t.Fatalf("device status after Status(busy): %+v", p)
	}
	err = c.Status(ctx, "sleepy")
	if !HasCode(err, protocol.CodeBadRequest) || !errors.Is(err, &Error{Code: protocol.CodeBadRequest}) {
		t.Fatalf("Status(sleepy) = %v, want a bad_request *Error", err)
	}
	locs, err := c.Locate(ctx, "alice")
	if err != nil || len(locs) != 1 || locs[0].Gateway != "g0" {
		t.Fatalf("Locate = %+v, %v", locs, err)
	}
}

func TestGroupAndJoin(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	a := dialT(t, Config{Addrs: addr, User: "alice", Groups: []string{"team"}})
	b := dialT(t, Config{Addrs: addr, User: "bob"})
	if err := b.Join(ctx, "team"); err != nil {
		t.Fatal(err)
	}
	g, err := a.Group(ctx, "team")
	if err != nil {
		t.Fatal(err)
	}
	if g.Group != "team" || g.Online != 2 || len(g.Members) != 2 {
		t.Fatalf("group: %+v", g)
	}
}

func TestSubscribeAndSend(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	watcher := dialT(t, Config{Addrs: addr, User: "watcher"})
	sub, err := watcher.Subscribe(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{}
	if ev := eventUntil(t, sub, last, func(Event) bool { return true }); ev.User != "bob" || ev.Online {
		t.Fatalf("initial event: %+v", ev)
	}
	bob := dialT(t, Config{Addrs: addr, User: "bob", Device: "phone"})
	eventUntil(t, sub, last, func(ev Event) bool { return ev.Online })
	if err := bob.Status(ctx, "away"); err != nil {
		t.Fatal(err)
	}
	eventUntil(t, sub, last, func(ev Event) bool { return ev.Status == "away" })

	n, err := watcher.Send(ctx, "bob", map[string]string{"text": "hi"})
	if err != nil || n != 1 {
		t.Fatalf("Send = %d, %v", n, err)
	}
	select {
	case m := <-bob.Messages():
		var body map[string]string
		if m.From != "watcher" || json.Unmarshal(m.Body, &body) != nil || body["text"] != "hi" {
			t.Fatalf("message %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-sub.Events(); ok {
		// events queued before Close may drain; the channel must close
		for range sub.Events() {
		}
	}
}

// TestReconnectKeepsState: the connection is cut under the client; it
// comes back with a newer epoch, its status and its subscriptions.
func TestReconnectKeepsState(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	var cut cutter
	states := make(chan State, 16)
	c := dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop", Groups: []string{"team"}, Dial: cut.dial,
		Backoff: Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnState: func(s State) { states <- s }})
	<-states // the first connect
	if err := c.Status(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{}
	eventUntil(t, sub, last, func(Event) bool { return true })
	before, _ := c.Session()

	cut.cut()
	if s := <-states; s.Connected {
		t.Fatalf("first state after the cut: %+v", s)
	}
	if s := <-states; !s.Connected || s.Epoch <= before.Epoch {
		t.Fatalf("state after reconnect: %+v (epoch before %d)", s, before.Epoch)
	}
	p, err := c.Get(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Online || len(p.Sessions) != 1 || p.Sessions[0].Status != "busy" {
		t.Fatalf("presence after reconnect: %+v", p)
	}
	g, err := c.Group(ctx, "team")
	if err != nil || g.Online != 1 {
		t.Fatalf("group after reconnect: %+v, %v", g, err)
	}
	// the subscription is back: bob's arrival is seen
	dialT(t, Config{Addrs: addr, User: "bob"})
	eventUntil(t, sub, last, func(ev Event) bool { return ev.Online })
}

// TestFailover: the gateway the client is on dies; the client is back on
// the other one with its status and subscription, and no event older than
// one delivered reaches it.
func TestFailover(t *testing.T) {
	ms := startCluster(t, 2)
	ctx := ctxT(t)
	addrs := []string{ms[0].GW.ClientAddr().String(), ms[1].GW.ClientAddr().String()}
	states := make(chan State, 16)
	c := dialT(t, Config{Addrs: addrs, User: "alice", Device: "laptop",
		Backoff: Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		OnState: func(s State) { states <- s }})
	if s := <-states; s.Gateway != "g0" {
		t.Fatalf("first connect: %+v", s)
	}
	if err := c.Status(ctx, "away"); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Subscribe(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	bob := dialT(t, Config{Addrs: addrs[1:], User: "bob"})
	last := map[string]uint64{}
	eventUntil(t, sub, last, func(ev Event) bool { return ev.Online })

	ms[0].Kill()
	for s := range states {
		if s.Connected {
			if s.Gateway != "g1" {
				t.Fatalf("reconnected to %+v", s)
			}
			break
		}
	}
	if err := bob.Status(ctx, "away"); err != nil {
		t.Fatal(err)
	}
	eventUntil(t, sub, last, func(ev Event) bool { return ev.Status == "away" })
	waitFor(t, "alice away on g1", func() bool {
		p, err := bob.Get(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		return p.Online && len(p.Sessions) == 1 && p.Sessions[0].Gateway == "g1" && p.Sessions[0].Status == "away"
	})
}

// TestCloseShowsOffline: Close says bye; a watcher sees the user offline
// without waiting for the session timeout.
func TestCloseShowsOffline(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	watcher := dialT(t, Config{Addrs: addr, User: "watcher"})
	c := dialT(t, Config{Addrs: addr, User: "alice"})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	if c.Err() != nil {
		t.Fatalf("Err after Close = %v", c.Err())
	}
	// offline at once: the gateway's record is disconnected by the time
	// Close returns (the bye was acknowledged)
	p, err := watcher.Get(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if p.Online {
		t.Fatalf("alice online after Close: %+v", p)
	}
	if _, err := c.Get(ctx, "alice"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close = %v", err)
	}
}

// TestSuperseded: another connection of the same (user, device) takes the
// session; the client stops and reports it instead of fighting back.
func TestSuperseded(t *testing.T) {
	gw := startNode(t, "g0")
	addr := []string{gw.ClientAddr().String()}
	c := dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop"})
	other := dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop"})
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("superseded client did not stop")
	}
	if !HasCode(c.Err(), protocol.CodeSuperseded) {
		t.Fatalf("Err = %v, want superseded", c.Err())
	}
	ctx := ctxT(t)
	p, err := other.Get(ctx, "alice")
	if err != nil || !p.Online {
		t.Fatalf("the newer session: %+v, %v", p, err)
	}
}

// TestKicked: the app's backend ends the session (POST
// /v1/users/{user}/disconnect); the client stops and reports kicked
// instead of reconnecting, and the user stays offline.
func TestKicked(t *testing.T) {
	gw := startNodeHTTP(t, "g0")
	addr := []string{gw.ClientAddr().String()}
	c := dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop"})
	watcher := dialT(t, Config{Addrs: addr, User: "watcher"})
	resp, err := http.Post("http://"+gw.HTTPAddr().String()+"/v1/users/alice/disconnect", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("disconnect: %s", resp.Status)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("kicked client did not stop")
	}
	if !HasCode(c.Err(), protocol.CodeKicked) {
		t.Fatalf("Err = %v, want kicked", c.Err())
	}
	p, err := watcher.Get(ctxT(t), "alice")
	if err != nil || p.Online {
		t.Fatalf("alice after the kick: %+v, %v", p, err)
	}
}

func TestDialRefused(t *testing.T) {
	gw := startNode(t, "g0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, Config{Addrs: []string{gw.ClientAddr().String()}, User: "alice", Status: "sleepy"})
	if !HasCode(err, protocol.CodeBadRequest) {
		t.Fatalf("Dial with a bad status = %v, want bad_request", err)
	}
}

// TestStaleEventDropped: an event whose version is not newer than the last
// delivered for its subject never reaches a subscription.
func TestStaleEventDropped(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	c := dialT(t, Config{Addrs: []string{gw.ClientAddr().String()}, User: "watcher"})
	sub, err := c.Subscribe(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	first := nextEvent(t, sub)
	c.dispatch(&protocol.Event{Presence: protocol.Presence{User: "bob", Online: true, Status: "busy", Version: first.Version}})
	c.dispatch(&protocol.Event{Presence: protocol.Presence{User: "bob", Online: true, Status: "away", Version: first.Version - 1}})
	c.dispatch(&protocol.Event{Presence: protocol.Presence{User: "bob", Online: true, Status: "available", Version: first.Version + 1}})
	if ev := nextEvent(t, sub); ev.Version != first.Version+1 || ev.Status != "available" {
		t.Fatalf("after two stale events and a newer one, got %+v", ev)
	}
}

// TestDrainHints: a draining gateway names the others in shutting_down; a
// client configured with the draining gateway alone follows the hint.
func TestDrainHints(t *testing.T) {
	ms := startCluster(t, 2)
	ctx := ctxT(t)
	states := make(chan State, 16)
	c := dialT(t, Config{Addrs: []string{ms[0].GW.ClientAddr().String()}, User: "alice", Device: "laptop",
		OnState: func(s State) { states <- s }})
	<-states
	sub, err := c.Subscribe(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{}
	eventUntil(t, sub, last, func(ev Event) bool { return ev.Online })
	waitFor(t, "g0 to know g1's client address", func() bool {
		for _, m := range ms[0].CL.Members() {
			if m.Name == "g1" && m.ClientAddr != "" {
				return true
			}
		}
		return false
	})
	go func() { _ = ms[0].GW.Drain(context.Background()) }()
	for s := range states {
		if s.Connected {
			if s.Gateway != "g1" || !HasCode(s.Err, protocol.CodeShuttingDown) {
				t.Fatalf("after the drain: %+v", s)
			}
			break
		}
	}
	p, err := c.Get(ctx, "alice")
	if err != nil || !p.Online || len(p.Sessions) != 1 || p.Sessions[0].Gateway != "g1" {
		t.Fatalf("after the drain: %+v, %v", p, err)
	}
}

// The same session over WebSocket: a ws:// address dials the gateway's
// /ws endpoint, and the client works as over TCP.
func TestOverWebSocket(t *testing.T) {
	gw := startNodeHTTP(t, "g0")
	ctx := ctxT(t)
	url := "ws://" + gw.HTTPAddr().String() + "/ws"
	c := dialT(t, Config{Addrs: []string{url}, User: "wendy", Device: "browser", Status: "away"})
	watcher := dialT(t, Config{Addrs: []string{url}, User: "walt", Device: "browser"})
	sub, err := watcher.Subscribe(ctx, "wendy")
	if err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, sub, "wendy online and away", func(ev Event) bool { return ev.Online && ev.Status == "away" })
	if err := c.Status(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	awaitEvent(t, sub, "wendy's device busy", func(ev Event) bool {
		return len(ev.Sessions) == 1 && ev.Sessions[0].Status == "busy"
	})
	c.Close()
	// The closed socket is a clean close: offline at once.
	awaitEvent(t, sub, "wendy offline", func(ev Event) bool { return !ev.Online })
}

func awaitEvent(t *testing.T, sub *Subscription, what string, ok func(Event) bool) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev := <-sub.Events():
			if ok(ev) {
				return
			}
		case <-timeout:
			t.Fatalf("no event: %s", what)
		}
	}
}
