package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testcluster"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// TestDisconnectGraceOverGossip: three gateways joined by gossip, a
// subscriber on each (reading every event: nothing coalesced on the
// client's side). alice and bob are on g0; both TCP connections are cut
// without bye. alice reconnects to g1 with last_epoch within the grace:
// no subscriber ever sees her offline. bob does not: every subscriber
// sees him offline once g0's grace ends, with his last_seen.
func TestDisconnectGraceOverGossip(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: -short: a gossip cluster and a disconnect grace of real time")
	}
	// Long enough that a reconnect a few requests after the cut lands
	// within it on a loaded machine; the test waits it out for bob.
	const grace = 5 * time.Second
	gs := testcluster.Start(t, 3, testcluster.Options{HTTP: true, Timeout: time.Minute, Heartbeat: 20 * time.Second,
		Configure: func(c *node.Config) { c.DisconnectGrace = grace }})
	addr := func(i int) string { return gs[i].GW.ClientAddr().String() }
	const wait = 30 * time.Second // a hang guard

	var watchers []*testkit.LineClient
	for i := range gs {
		w := testkit.DialLine(t, addr(i), "watcher", fmt.Sprintf("w%d", i), nil)
		w.Send(map[string]any{"op": protocol.OpSub, "users": []string{"alice", "bob"}})
		watchers = append(watchers, w)
	}
	// await reads w's events until one of user passes ok, failing on an
	// offline event of any user in never meanwhile.
	await := func(w *testkit.LineClient, user string, ok func(map[string]any) bool, never ...string) map[string]any {
		t.Helper()
		for {
			e := w.Expect(protocol.OpEvent, wait)
			if e["user"] == user && ok(e) {
				return e
			}
			for _, u := range never {
				if e["user"] == u && e["online"] != true {
					t.Fatalf("a subscriber saw %s offline: %v", u, e)
				}
			}
		}
	}
	on := func(gw string) func(map[string]any) bool {
		return func(e map[string]any) bool {
			ss, _ := e["sessions"].([]any)
			return e["online"] == true && len(ss) == 1 && ss[0].(map[string]any)["gateway"] == gw
		}
	}

	alice := testkit.DialLine(t, addr(0), "alice", "phone", nil)
	bob := testkit.DialLine(t, addr(0), "bob", "phone", nil)
	for _, w := range watchers {
		await(w, "alice", on("g0"))
		await(w, "bob", on("g0"))
	}
	alice.Close()
	bob.Close()
	testkit.DialLine(t, addr(1), "alice", "phone", map[string]any{"last_epoch": alice.Welcome["epoch"]})
	for _, w := range watchers {
		await(w, "alice", on("g1"), "alice", "bob")
	}
	for _, w := range watchers {
		e := await(w, "bob", func(e map[string]any) bool { return e["online"] == false }, "alice")
		if e["last_seen"] == nil {
			t.Fatalf("bob offline without last_seen: %v", e)
		}
	}
	for _, g := range gs {
		if !online(t, g.GW, "alice", "g1") {
			t.Fatalf("%s does not show alice online on g1", g.GW.Name())
		}
	}
}
