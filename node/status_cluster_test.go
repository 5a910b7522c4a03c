package node_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rollcall/rollcall/auth"
	"github.com/rollcall/rollcall/client"
	"github.com/rollcall/rollcall/internal/testcluster"
	"github.com/rollcall/rollcall/node"
)

// TestStatusAcrossGateways: on three gateways joined by gossip, a
// subscriber on g2 (over WebSocket; alice's sessions are on TCP) sees the
// status text, emoji and until alice sets on g0,
// the meta her session on g1 sets, and the info her token vouches for, in
// its events; and the override and text lapse at their until on g2 too.
func TestStatusAcrossGateways(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	gs := testcluster.Start(t, 3, testcluster.Options{HTTP: true, Configure: func(c *node.Config) {
		c.Dev = false
		c.Secret = secret
	}})
	signer, err := auth.NewSecretSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	token := func(user, info string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			return signer.Sign(auth.TokenSpec{User: user, TTL: time.Hour,
				Grants: &auth.GrantsClaim{Read: []string{"*"}, Info: json.RawMessage(info)}}, time.Now())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dial := func(addr, user, device, info string, meta any) *client.Client {
		c, err := client.Dial(ctx, client.Config{Addrs: []string{addr}, User: user,
			Device: device, Token: token(user, info), Meta: meta})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	watcher := dial(gs[2].WS(), "watcher", "d", "", nil)
	sub, err := watcher.Subscribe(ctx, "alice")
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
	laptop := dial(gs[0].GW.ClientAddr().String(), "alice", "laptop", `{"name":"Alice"}`, nil)
	phone := dial(gs[1].GW.ClientAddr().String(), "alice", "phone", `{"name":"Alice"}`, map[string]any{"screen": "chat"})
	await("two sessions with info and meta", func(e client.Event) bool {
		if len(e.Sessions) != 2 {
			return false
		}
		l, p := e.Sessions[0], e.Sessions[1] // sorted by device
		return string(l.Info) == `{"name":"Alice"}` && string(p.Info) == `{"name":"Alice"}` &&
			l.Meta == nil && string(p.Meta) == `{"screen":"chat"}`
	})

	until := time.Now().Add(3 * time.Second)
	if err := laptop.Account(ctx, client.AccountUpdate{Override: statusPtr("dnd"), Text: statusPtr("presenting"), Emoji: statusPtr("📽"), Until: &until}); err != nil {
		t.Fatal(err)
	}
	e := await("text, emoji and until", func(e client.Event) bool { return e.Text == "presenting" })
	if e.Status != "dnd" || e.Emoji != "📽" || e.Until == "" {
		t.Fatalf("event: %+v", e.Presence)
	}
	if err := phone.SetMeta(ctx, map[string]any{"screen": "call"}); err != nil {
		t.Fatal(err)
	}
	await("the new meta", func(e client.Event) bool {
		return len(e.Sessions) == 2 && string(e.Sessions[1].Meta) == `{"screen":"call"}` && e.Text == "presenting"
	})
	// The lapse, computed on g2 from the replicated until.
	e = await("the lapse", func(e client.Event) bool { return e.Text == "" })
	if lapsedAt := time.Now(); e.Status != "available" || e.Emoji != "" || e.Until != "" || lapsedAt.Before(until) {
		t.Fatalf("lapse event %+v at %v, until %v", e.Presence, lapsedAt, until)
	}
}

func statusPtr[T any](v T) *T { return &v }

// TestJSClientStatusTextAndMeta: the JavaScript client's setStatusText and
// setMeta reach a subscriber on another gateway.
func TestJSClientStatusTextAndMeta(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the JavaScript client test starts Node.js and a gossip cluster")
	}
	a, await := jsAliceWatchedByBob(t)

	a.send("text on a call")
	a.waitLine("the text ok", map[string]any{"ok": "text"})
	await("alice's text", func(e client.Event) bool { return e.Text == "on a call" && e.Until != "" })
	a.send(`meta {"tab": "inbox"}`)
	a.waitLine("the meta ok", map[string]any{"ok": "meta"})
	await("alice's meta", func(e client.Event) bool {
		return len(e.Sessions) == 1 && string(e.Sessions[0].Meta) == `{"tab":"inbox"}`
	})
}

// jsAliceWatchedByBob starts two gateways, bob on g1 subscribed to alice
// (a Go client), and alice in a JavaScript tab on g0, once bob has seen her
// online. await reads bob's events until one about alice passes ok.
func jsAliceWatchedByBob(t *testing.T) (a *jsTab, await func(what string, ok func(client.Event) bool)) {
	t.Helper()
	nodeExe, module := jsModule(t)
	gs := startJSCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	bob, err := client.Dial(ctx, client.Config{Addrs: []string{gs[1].GW.ClientAddr().String()}, User: "bob", Device: "d"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bob.Close() })
	sub, err := bob.Subscribe(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	await = func(what string, ok func(client.Event) bool) {
		t.Helper()
		for {
			select {
			case e := <-sub.Events():
				if ok(e) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("no event with %s", what)
			}
		}
	}
	a = startJSTab(t, nodeExe, module, "alice", "team", gs[0].WS())
	a.waitLine("connected to g0", map[string]any{"state": "connected", "gateway": "g0"})
	await("alice online", func(e client.Event) bool { return e.Online })
	return a, await
}
