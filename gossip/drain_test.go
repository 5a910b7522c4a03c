package gossip

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/node"
)

// next returns the client's next frame, whatever its op.
func (c *client) next(d time.Duration) map[string]any {
	c.t.Helper()
	select {
	case m, ok := <-c.in:
		if !ok {
			c.t.Fatalf("%s: connection closed", c.user)
		}
		return m
	case <-time.After(d):
		c.t.Fatalf("%s: nothing within %v", c.user, d)
	}
	return nil
}

// quiet fails if the client receives anything within d.
func (c *client) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case m, ok := <-c.in:
		if ok {
			c.t.Fatalf("%s: unexpected %v", c.user, m)
		}
	case <-time.After(d):
	}
}

// eventOf checks that m is an event for user, online at gateway gw (or
// offline for gw ""), and returns when it arrived.
func eventOf(t *testing.T, m map[string]any, user, gw string) time.Time {
	t.Helper()
	if m["op"] != "event" || m["user"] != user {
		t.Fatalf("want an event for %s, got %v", user, m)
	}
	ss, _ := m["sessions"].([]any)
	switch {
	case gw == "" && (m["online"] != false || len(ss) != 0):
		t.Fatalf("want %s offline, got %v", user, m)
	case gw != "" && (m["online"] != true || len(ss) != 1 || ss[0].(map[string]any)["gateway"] != gw):
		t.Fatalf("want %s online on %s only, got %v", user, gw, m)
	}
	return m["_at"].(time.Time)
}

// drainAndLeave drains node i and leaves the cluster, as the agent does on
// SIGTERM, in the background; the returned channel yields Drain's error.
func (s *stack) drainAndLeave(i int) <-chan error {
	sn := s.nodes[i]
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), sn.gw.Config().DrainTimeout)
		defer cancel()
		err := sn.gw.Drain(ctx)
		_ = sn.cluster.Leave(2 * time.Second)
		done <- err
	}()
	return done
}

// A rolling restart of g0: its clients are told where the other gateways
// are; one that reconnects to g1 within the grace is never shown offline
// at a subscriber on g2 (its newer session replaces the old one there),
// and one that does not is shown offline once the grace ends.
func TestStackDrainHandsSessionsOver(t *testing.T) {
	s := newStack(t, 3, 2*time.Second)
	s.waitMembers(3)
	grace := s.nodes[0].gw.Config().DrainGrace

	sub := s.dial(2, "watcher", "w", nil)
	sub.heartbeat(300 * time.Millisecond)
	sub.send(map[string]any{"op": "sub", "users": []string{"alice"}, "id": 1})
	sub.expect("ok", 5*time.Second)
	eventOf(t, sub.next(5*time.Second), "alice", "")
	alice := s.dial(0, "alice", "phone", nil)
	alice.heartbeat(300 * time.Millisecond)
	eventOf(t, sub.next(5*time.Second), "alice", "g0")
	bob := s.dial(0, "bob", "phone", nil)
	bob.heartbeat(300 * time.Millisecond)
	waitFor(t, 5*time.Second, "bob online on g2", func() bool { return s.online(2, "bob") })
	sub.send(map[string]any{"op": "sub", "users": []string{"bob"}, "id": 2})
	sub.expect("ok", 5*time.Second)
	eventOf(t, sub.next(5*time.Second), "bob", "g0")

	drained := s.drainAndLeave(0)
	e := alice.expect("error", 5*time.Second)
	drainAt := time.Now()
	if e["code"] != "shutting_down" {
		t.Fatalf("alice got %v, want shutting_down", e)
	}
	var hint []string
	for _, g := range e["gateways"].([]any) {
		hint = append(hint, g.(string))
	}
	slices.Sort(hint)
	want := []string{s.nodes[1].gw.ClientAddr().String(), s.nodes[2].gw.ClientAddr().String()}
	slices.Sort(want)
	if !slices.Equal(hint, want) {
		t.Fatalf("shutting_down lists %v, want g1 and g2's client addresses %v (and not g0's %v)",
			hint, want, s.nodes[0].gw.ClientAddr())
	}
	if e := bob.expect("error", 5*time.Second); e["code"] != "shutting_down" {
		t.Fatalf("bob got %v", e)
	}
	// The others stop listing g0 as a place to send their own clients.
	g2 := s.nodes[2].gw.ClientAddr().String()
	waitFor(t, 5*time.Second, "g1 no longer lists the draining g0", func() bool {
		return slices.Equal(s.nodes[1].cluster.OtherGateways(), []string{g2})
	})
	if s.nodes[0].gw.SessionCount() == 0 {
		t.Fatal("g1 left g0 out only after g0's grace, not from the start of its drain")
	}
	alice.close()
	bob.close() // bob does not come back

	// alice reconnects to the first gateway of the hint, with her epoch,
	// after a moment (longer than the subscriber's event coalescing, so an
	// offline in between could not hide in one coalesced event).
	time.Sleep(300 * time.Millisecond)
	i := slices.IndexFunc(s.nodes, func(sn *stackNode) bool { return sn.gw.ClientAddr().String() == hint[0] })
	alice2 := s.dial(i, "alice", "phone", map[string]any{"last_epoch": alice.welcome["epoch"]})
	alice2.heartbeat(300 * time.Millisecond)

	// The subscriber's next events: alice on her new gateway (never
	// offline), then bob offline once the grace is over, then nothing.
	eventOf(t, sub.next(5*time.Second), "alice", s.nodes[i].gw.Name())
	offAt := eventOf(t, sub.next(grace+5*time.Second), "bob", "")
	if took := offAt.Sub(drainAt); took < grace-50*time.Millisecond || took > grace+2*time.Second {
		t.Errorf("bob shown offline %v after shutting_down; want the grace %v plus propagation", took, grace)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
	sub.quiet(500 * time.Millisecond)
}

// A gateway whose sessions are all taken over ends its drain without
// waiting out the grace, and never writes them disconnected.
func TestStackDrainEndsWhenEverySessionIsTakenOver(t *testing.T) {
	s := &stack{t: t, net: NewFaultNetwork(7), timeout: 2 * time.Second, nodeConfig: func(c *node.Config) {
		c.DrainGrace, c.DrainTimeout = time.Minute, 2*time.Minute
	}}
	s.start("g0")
	s.start("g1")
	t.Cleanup(func() {
		for _, sn := range s.nodes {
			_ = sn.cluster.Shutdown()
			_ = sn.gw.Close()
		}
	})
	s.waitMembers(2)
	alice := s.dial(0, "alice", "phone", nil)
	alice.heartbeat(300 * time.Millisecond)
	waitFor(t, 5*time.Second, "alice online on g1", func() bool { return s.online(1, "alice") })
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- s.nodes[0].gw.Drain(t.Context()) }()
	if e := alice.expect("error", 5*time.Second); e["code"] != "shutting_down" {
		t.Fatalf("alice got %v", e)
	}
	alice.close()
	s.dial(1, "alice", "phone", map[string]any{"last_epoch": alice.welcome["epoch"]}).heartbeat(300 * time.Millisecond)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // far below the grace
		t.Fatalf("Drain still waiting %v after every session was taken over", time.Since(start))
	}
	if !s.online(1, "alice") {
		t.Fatal("alice offline on g1 after her takeover")
	}
}
