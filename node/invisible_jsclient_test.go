package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/rollcall/rollcall/client"
)

// TestJSClientInvisible: the JavaScript client's setInvisible hides alice
// from a subscriber on another gateway, while her own group subscription
// shows her with invisible; setInvisible(false) brings her back.
func TestJSClientInvisible(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the JavaScript client test starts Node.js and a gossip cluster")
	}
	nodeExe, module := jsModule(t)
	gs := startJSCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bob, err := client.Dial(ctx, client.Config{Addrs: []string{gs[1].GW.ClientAddr().String()}, User: "bob", Device: "d"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bob.Close() })
	sub, err := bob.Subscribe(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	await := func(what string, ok func(client.Event) bool) {
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
	a := startJSTab(t, nodeExe, module, "alice", "team", gs[0].WS())
	a.waitLine("connected to g0", map[string]any{"state": "connected", "gateway": "g0"})
	await("alice online", func(e client.Event) bool { return e.Online })

	a.send("invisible on") // its ok and her event come in either order: an error line fails waitLine
	a.waitLine("her own view", map[string]any{"user": "alice", "status": "available", "invisible": true})
	await("alice offline", func(e client.Event) bool { return !e.Online && !e.Invisible && len(e.Sessions) == 0 })
	a.send("invisible off")
	await("alice back", func(e client.Event) bool { return e.Online && !e.Invisible })
	a.waitLine("her own view", map[string]any{"user": "alice", "status": "available", "invisible": false})
}
