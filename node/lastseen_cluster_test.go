package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/testcluster"
)

// TestLastSeenAcrossGateways: on three gateways joined by gossip, a
// subscriber on g2 (over WebSocket) sees last_seen in its events once
// alice's last session ends, her sessions on g0 and g1 ending one after
// the other: the time the later one ended. When g1, which owns bob's
// session, fails, g2 shows bob offline and last seen when it started
// showing him so, with no write of g1's.
func TestLastSeenAcrossGateways(t *testing.T) {
	gs := testcluster.Start(t, 3, testcluster.Options{HTTP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(addr, user, device string) *client.Client {
		c, err := client.Dial(ctx, client.Config{Addrs: []string{addr}, User: user, Device: device})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	watcher := dial(gs[2].WS(), "watcher", "d")
	sub, err := watcher.Subscribe(ctx, "alice", "bob")
	if err != nil {
		t.Fatal(err)
	}
	await := func(what string, ok func(client.Event) bool) client.Event {
		t.Helper()
		for {
			select {
			case e := <-sub.Events():
				if ok(e) {
					return e
				}
			case <-ctx.Done():
				t.Fatalf("no event with %s", what)
			}
		}
	}
	laptop := dial(gs[0].GW.ClientAddr().String(), "alice", "laptop")
	phone := dial(gs[1].GW.ClientAddr().String(), "alice", "phone")
	await("alice on two gateways", func(e client.Event) bool { return e.User == "alice" && len(e.Sessions) == 2 })
	if err := laptop.Close(); err != nil {
		t.Fatal(err)
	}
	e := await("alice on one gateway", func(e client.Event) bool { return e.User == "alice" && len(e.Sessions) == 1 })
	if e.LastSeen != "" {
		t.Fatalf("last_seen while online: %+v", e.Presence)
	}
	before := time.Now()
	if err := phone.Close(); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	e = await("alice offline with last_seen", func(e client.Event) bool {
		return e.User == "alice" && !e.Online && e.LastSeen != ""
	})
	seen, ok := client.LastSeen(e.Presence)
	if !ok {
		t.Fatalf("last_seen %q is not a time", e.LastSeen)
	}
	if seen.Before(before.Add(-time.Millisecond)) || seen.After(after) {
		t.Fatalf("last_seen %v, the session ended between %v and %v", seen, before, after)
	}
	// A get on g0 agrees, once the end of the phone's session, written by
	// g1, has reached g0 too: g2's event says nothing of when it does.
	reader := dial(gs[0].GW.ClientAddr().String(), "reader", "d")
	for {
		p, err := reader.Get(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if p.LastSeen == e.LastSeen {
			break
		}
		if p.LastSeen != "" || ctx.Err() != nil {
			t.Fatalf("get on g0: %+v, want last_seen %s", p, e.LastSeen)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// g1 fails with bob's session on it.
	dial(gs[1].GW.ClientAddr().String(), "bob", "phone")
	await("bob online", func(e client.Event) bool { return e.User == "bob" && e.Online })
	killed := time.Now()
	gs[1].Kill()
	e = await("bob offline with last_seen", func(e client.Event) bool {
		return e.User == "bob" && !e.Online && e.LastSeen != ""
	})
	if seen, err := time.Parse(time.RFC3339, e.LastSeen); err != nil || seen.Before(killed.Add(-time.Millisecond)) {
		t.Fatalf("bob last_seen %q (%v), g1 killed at %v", e.LastSeen, err, killed)
	}
}
