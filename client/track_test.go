package client

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// TestTrack: Track splits more sessions than one request holds (and more
// bytes than one line holds) into requests, waits out the gateway's
// allowance, and returns the results in order; a session the gateway
// refuses alone carries its error; Untrack ends sessions, over TCP and
// WebSocket.
func TestTrack(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			cfg := node.DefaultConfig()
			cfg.Name, cfg.ClientAddr, cfg.HTTPAddr, cfg.Dev = "n1", "127.0.0.1:0", "127.0.0.1:0", true
			cfg.TrackRate, cfg.TrackBurst = 2000, 1000 // 2,500 sessions wait about a second
			cfg.MaxSessionsPerUser = 1
			gw, err := node.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := gw.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = gw.Close() })
			addr := gw.ClientAddr().String()
			if transport == "ws" {
				addr = "ws://" + gw.HTTPAddr().String() + "/ws"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := Dial(ctx, Config{Addrs: []string{addr}, User: "backend", Device: "b"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			const users = 2500
			sessions := make([]Tracked, users)
			for i := range sessions {
				sessions[i] = Tracked{User: "u" + strconv.Itoa(i), Device: "web", Meta: map[string]string{"pad": strings.Repeat("x", 40)}}
			}
			sessions[users-1].User, sessions[users-1].Device = "u0", "tv" // a second session of u0: past MaxSessionsPerUser
			rs, err := c.Track(ctx, sessions)
			if err != nil {
				t.Fatal(err)
			}
			if len(rs) != users {
				t.Fatalf("%d results", len(rs))
			}
			for i, r := range rs[:users-1] {
				if TrackErr(r) != nil || r.User != sessions[i].User || r.Session == "" || r.Epoch == 0 {
					t.Fatalf("result %d: %+v", i, r)
				}
			}
			if err := TrackErr(rs[users-1]); !HasCode(err, protocol.CodeTooManySessions) {
				t.Fatalf("u0's second session: %v", err)
			}
			if got := gw.TrackedCount(); got != users-1 {
				t.Fatalf("gateway tracks %d", got)
			}
			un, err := c.Untrack(ctx, sessions[:10])
			if err != nil {
				t.Fatal(err)
			}
			if un[3].Session != rs[3].Session || gw.TrackedCount() != users-11 {
				t.Fatalf("untrack: %+v, %d tracked", un[3], gw.TrackedCount())
			}
			if _, err := c.Track(ctx, []Tracked{{User: "x", Device: ""}}); !HasCode(err, protocol.CodeBadRequest) {
				t.Fatalf("a session without a device: %v", err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "tracked sessions ended", func() bool { return gw.TrackedCount() == 0 })
		})
	}
}

// TestTrackedSessionsReturnAfterAReconnect: when the backend's connection
// is cut (and its tracked sessions end with it), the client reconnects and
// tracks its sessions again by itself, with the status, groups and meta
// they were tracked with: the users come back online as new sessions
// without the application calling Track. A session it untracked stays
// gone.
func TestTrackedSessionsReturnAfterAReconnect(t *testing.T) {
	gw := startNode(t, "g0")
	ctx := ctxT(t)
	addr := []string{gw.ClientAddr().String()}
	cut := &cutter{}
	backend := dialT(t, Config{Addrs: addr, User: "backend", Device: "b", Dial: cut.dial})
	watcher := dialT(t, Config{Addrs: addr, User: "watcher"})
	rs, err := backend.Track(ctx, []Tracked{
		{User: "alice", Device: "web", Status: "away", Groups: []string{"team"}, Meta: map[string]string{"tab": "inbox"}},
		{User: "bob", Device: "web"},
		{User: "carol", Device: "web"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := backend.Untrack(ctx, []Tracked{{User: "bob", Device: "web"}}); err != nil {
		t.Fatal(err)
	}
	cut.cut()
	var ps []protocol.Presence
	waitFor(t, "alice and carol tracked again as new sessions", func() bool {
		ps, err = watcher.GetMany(ctx, "alice", "bob", "carol")
		return err == nil && ps[0].Online && ps[2].Online &&
			ps[0].Sessions[0].Session != rs[0].Session && ps[2].Sessions[0].Session != rs[2].Session
	})
	if s := ps[0].Sessions[0]; s.Device != "web" || s.Status != "away" || string(s.Meta) != `{"tab":"inbox"}` {
		t.Fatalf("alice's session after the reconnect: %+v", s)
	}
	if ps[1].Online {
		t.Fatalf("bob, untracked before the cut, is online: %+v", ps[1])
	}
	g, err := watcher.Group(ctx, "team")
	if err != nil || g.Online != 1 || g.Members[0].User != "alice" {
		t.Fatalf("group team after the reconnect: %+v, %v", g, err)
	}
	if n := gw.TrackedCount(); n != 2 {
		t.Fatalf("the gateway tracks %d sessions, want alice's and carol's", n)
	}
	cut.mu.Lock()
	dials := cut.dials
	cut.mu.Unlock()
	if dials < 2 {
		t.Fatalf("%d dials: the backend did not reconnect", dials)
	}
}
