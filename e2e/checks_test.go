package e2e

// The drills' checks against hand-made states, without Docker: each check
// must flag what breaks the promise it stands for and nothing else. These
// run in `make test`.

import (
	"slices"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// connected makes an actor that is connected to gw with a live client.
func connected(w *world, user, device, gw, status string, epoch uint64) *actor {
	a := w.addActor(user, device, false)
	a.c = &client{done: make(chan struct{})}
	a.gw, a.status, a.epoch = gw, status, epoch
	return a
}

func TestExpectedPresence(t *testing.T) {
	w := &world{}
	connected(w, "ann", "phone", "gw1", "away", 10)
	connected(w, "ann", "laptop", "gw2", "away", 20)
	connected(w, "bob", "phone", "gw2", "busy", 30)
	gone := connected(w, "cid", "phone", "gw3", "available", 40)
	gone.c.endCode = "eof" // its connection ended: offline

	for _, tc := range []struct {
		cut, viewer, user string
		sessions          []string
		status            string
	}{
		{"", "gw3", "ann", []string{"laptop@gw2 away 20", "phone@gw1 away 10"}, "away"},
		// busy from a device that is not authoritative counts as available
		{"", "gw1", "bob", []string{"phone@gw2 busy 30"}, "available"},
		{"", "gw1", "cid", nil, "offline"},
		// gw2 cut off: gw1 sees only ann's gw1 device, gw2 only her gw2 one
		{"gw2", "gw1", "ann", []string{"phone@gw1 away 10"}, "away"},
		{"gw2", "gw2", "ann", []string{"laptop@gw2 away 20"}, "away"},
		{"gw2", "gw3", "bob", nil, "offline"},
		{"gw2", "gw2", "bob", []string{"phone@gw2 busy 30"}, "available"},
	} {
		w.cut = tc.cut
		sessions, status := w.expected(tc.viewer, tc.user)
		if status != tc.status || !slices.Equal(sessions, tc.sessions) {
			t.Errorf("cut %q, %s's view of %s: %s %q, want %s %q", tc.cut, tc.viewer, tc.user, status, sessions, tc.status, tc.sessions)
		}
	}
	if users := w.drillUsers(); !slices.Equal(users, []string{"ann", "bob", "cid"}) {
		t.Errorf("drill users %q", users)
	}
	only := w.usersOnlyOn("gw2")
	if !only["bob"] || only["ann"] || len(only) != 1 {
		t.Errorf("users only on gw2: %v (ann has a device on gw1 too)", only)
	}
}

func TestShownMatchesExpected(t *testing.T) {
	p := protocol.Presence{User: "ann", Online: true, Status: "away", Sessions: []protocol.SessionInfo{
		{Device: "phone", Gateway: "gw1", Status: "away", Epoch: 10},
		{Device: "laptop", Gateway: "gw2", Status: "away", Epoch: 20},
	}}
	sessions, status := shown(p)
	if status != "away" || !slices.Equal(sessions, []string{"laptop@gw2 away 20", "phone@gw1 away 10"}) {
		t.Fatalf("shown %s %q", status, sessions)
	}
}

func TestOfflinesAndOrder(t *testing.T) {
	t0 := time.Now()
	obs := []observation{
		{at: t0, watcher: "watch1", gateway: "gw1", stream: 1, p: protocol.Presence{User: "ann", Online: true, Version: 5}},
		{at: t0, watcher: "watch1", gateway: "gw1", stream: 1, p: protocol.Presence{User: "ann", Online: false, Version: 6}},
		{at: t0, watcher: "watch1", gateway: "gw1", stream: 1, p: protocol.Presence{User: "bob", Online: false, Version: 2}},
		// a new stream (a reconnect) starts its own version sequence
		{at: t0, watcher: "watch1", gateway: "gw2", stream: 2, p: protocol.Presence{User: "ann", Online: true, Version: 3}},
	}
	if bad := offlines(obs, func(o observation) bool { return o.p.User == "bob" }); len(bad) != 1 {
		t.Errorf("ann's offline not flagged, or bob's flagged: %q", bad)
	}
	if bad := orderBroken(obs); len(bad) != 0 {
		t.Errorf("order flagged across streams: %q", bad)
	}
	obs = append(obs, observation{at: t0, watcher: "watch1", gateway: "gw2", stream: 2, p: protocol.Presence{User: "ann", Online: true, Version: 3}})
	if bad := orderBroken(obs); len(bad) != 1 {
		t.Errorf("a repeated version in one stream not flagged: %q", bad)
	}
	first := firstOffline(obs)
	if _, ok := first[[2]string{"gw1", "ann"}]; !ok || len(first) != 2 {
		t.Errorf("first offline: %v", first)
	}
}
