package client

import (
	"testing"
	"time"
)

// deviceStatus is the status of an event's only session: the device
// status the client set (busy counts in the aggregate only from an
// authoritative device).
func deviceStatus(ev Event) string {
	if !ev.Online || len(ev.Sessions) != 1 {
		return ""
	}
	return ev.Sessions[0].Status
}

// awaitStatus reads sub's events until user's device status is want.
func awaitStatus(t *testing.T, sub *Subscription, last map[string]uint64, user, want string) {
	t.Helper()
	eventUntil(t, sub, last, func(ev Event) bool { return ev.User == user && deviceStatus(ev) == want })
}

// sessionStatus is the status of user's only session, as the gateway
// holds it.
func sessionStatus(t *testing.T, c *Client, user string) string {
	t.Helper()
	p, err := c.Get(ctxT(t), user)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Online || len(p.Sessions) != 1 {
		t.Fatalf("presence of %s: %+v", user, p)
	}
	return p.Sessions[0].Status
}

// TestSetIdleAwayAndBack: SetIdle(true) shows the user away to another
// subscriber; SetIdle(false) brings back the status the application set,
// not available.
func TestSetIdleAwayAndBack(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	bob := dialT(t, Config{Addrs: addr, User: "bob"})
	sub, err := bob.Subscribe(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{}
	alice := dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop"})
	if err := alice.Status(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, sub, last, "alice", "busy")

	if err := alice.SetIdle(ctx, true); err != nil {
		t.Fatal(err)
	}
	if !alice.Idle() {
		t.Fatal("Idle() is false after SetIdle(true)")
	}
	awaitStatus(t, sub, last, "alice", "away")
	if err := alice.SetIdle(ctx, true); err != nil { // already idle: nothing changes
		t.Fatal(err)
	}
	if err := alice.SetIdle(ctx, false); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, sub)
	if ev.User != "alice" || deviceStatus(ev) != "busy" || alice.Idle() {
		t.Fatalf("after SetIdle(false): %+v (idle %v), want alice busy again", ev, alice.Idle())
	}
}

// TestStatusWhileIdle: a status the application sets while idle does not
// end the away; it is what SetIdle(false) restores.
func TestStatusWhileIdle(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	bob := dialT(t, Config{Addrs: addr, User: "bob"})
	sub, err := bob.Subscribe(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{}
	alice := dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop"})
	awaitStatus(t, sub, last, "alice", "available")
	if err := alice.SetIdle(ctx, true); err != nil {
		t.Fatal(err)
	}
	awaitStatus(t, sub, last, "alice", "away")

	if err := alice.Status(ctx, "busy"); err != nil {
		t.Fatal(err)
	}
	if s := sessionStatus(t, bob, "alice"); s != "away" {
		t.Fatalf("alice's session after Status(busy) while idle: %s, want still away", s)
	}
	if err := alice.SetIdle(ctx, false); err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, sub)
	if ev.User != "alice" || deviceStatus(ev) != "busy" {
		t.Fatalf("after SetIdle(false): %+v, want the status set while idle (busy)", ev)
	}
}

// TestIdleSurvivesReconnect: an idle client's session is away again after
// its connection is cut and it reconnects, and SetIdle(false) then
// restores the application's status.
func TestIdleSurvivesReconnect(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	var cut cutter
	states := make(chan State, 16)
	alice := dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop", Status: "busy", Dial: cut.dial,
		Backoff: Backoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnState: func(s State) { states <- s }})
	<-states // the first connect
	bob := dialT(t, Config{Addrs: addr, User: "bob"})
	if err := alice.SetIdle(ctx, true); err != nil {
		t.Fatal(err)
	}
	before, _ := alice.Session()

	cut.cut()
	if s := <-states; s.Connected {
		t.Fatalf("first state after the cut: %+v", s)
	}
	if s := <-states; !s.Connected || s.Epoch <= before.Epoch {
		t.Fatalf("state after reconnect: %+v (epoch before %d)", s, before.Epoch)
	}
	sub, err := bob.Subscribe(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	ev := nextEvent(t, sub)
	if ev.User != "alice" || deviceStatus(ev) != "away" || ev.Status != "away" {
		t.Fatalf("alice after the reconnect: %+v, want away", ev)
	}
	if s := sessionStatus(t, bob, "alice"); s != "away" || !alice.Idle() {
		t.Fatalf("alice's session after the reconnect: %s (idle %v), want away", s, alice.Idle())
	}
	if err := alice.SetIdle(ctx, false); err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{"alice": ev.Version}
	awaitStatus(t, sub, last, "alice", "busy")
}
