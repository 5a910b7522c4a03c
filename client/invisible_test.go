package client

import "testing"

// SetInvisible: another user's Get and subscription see the user offline,
// the user's own Get sees the truth with Invisible; SetInvisible(false)
// brings the user back.
func TestSetInvisible(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	alice := dialT(t, Config{Addrs: addr, User: "alice", Device: "laptop", Status: "away"})
	bob := dialT(t, Config{Addrs: addr, User: "bob", Device: "phone"})
	sub, err := bob.Subscribe(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, sub); !e.Online {
		t.Fatalf("snapshot %+v", e.Presence)
	}
	if err := alice.SetInvisible(ctx, true); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, sub); e.Online || e.Invisible || len(e.Sessions) != 0 {
		t.Fatalf("bob's event %+v", e.Presence)
	}
	if p, err := bob.Get(ctx, "alice"); err != nil || p.Online || p.Invisible {
		t.Fatalf("bob's get %+v, %v", p, err)
	}
	if p, err := alice.Get(ctx, "alice"); err != nil || !p.Online || !p.Invisible || p.Status != "away" {
		t.Fatalf("alice's get %+v, %v", p, err)
	}
	if err := alice.SetInvisible(ctx, false); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, sub); !e.Online || e.Invisible || e.Status != "away" {
		t.Fatalf("bob's event %+v", e.Presence)
	}
}
