package node_test

import (
	"testing"

	"github.com/rollcall/rollcall/client"
)

// TestJSClientInvisible: the JavaScript client's setInvisible hides alice
// from a subscriber on another gateway, while her own group subscription
// shows her with invisible; setInvisible(false) brings her back.
func TestJSClientInvisible(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: the JavaScript client test starts Node.js and a gossip cluster")
	}
	a, await := jsAliceWatchedByBob(t)

	a.send("invisible on") // its ok and her event come in either order: an error line fails waitLine
	a.waitLine("her own view", map[string]any{"user": "alice", "status": "available", "invisible": true})
	await("alice offline", func(e client.Event) bool { return !e.Online && !e.Invisible && len(e.Sessions) == 0 })
	a.send("invisible off")
	await("alice back", func(e client.Event) bool { return e.Online && !e.Invisible })
	a.waitLine("her own view", map[string]any{"user": "alice", "status": "available", "invisible": false})
}
