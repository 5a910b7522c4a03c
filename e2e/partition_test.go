package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// drillPartition: docker network disconnect one gateway from the gossip
// network (its clients stay connected on the clients network). While cut
// off, each side shows the other side's sessions expired, and changes on
// each side are seen on that side; once connected again every gateway
// shows every session that stayed connected and every change made during
// the cut.
func (w *world) drillPartition(ctx context.Context, t *testing.T, cut string, byGW map[string][]*actor, late *actor) {
	id := w.c.id(cut)
	ins, err := w.c.inspect(ctx, cut)
	must(t, err)
	gossipNet := networkName(ins, "gossip")
	ip := ins.NetworkSettings.Networks[gossipNet].IPAddress
	if gossipNet == "" || ip == "" {
		t.Fatalf("%s is on no gossip network: %+v", cut, ins.NetworkSettings.Networks)
	}
	sides := w.gatewaysOf()
	m := w.mark()
	t0 := time.Now()
	if _, err := w.c.docker(ctx, "network", "disconnect", gossipNet, id); err != nil {
		t.Fatal(err)
	}
	reconnected := false
	defer func() {
		if !reconnected { // leave the cluster whole for the next drill or the logs
			w.c.docker(context.Background(), "network", "connect", "--ip", ip, gossipNet, id)
		}
	}()
	w.mu.Lock()
	w.cut = cut
	w.mu.Unlock()
	bound := w.bounds.CrashExpiry
	took, err := waitFor(ctx, t0, bound+5*time.Second, func() error {
		for _, g := range others(cut) {
			if err := w.downAt(ctx, g, cut); err != nil {
				return err
			}
			if err := w.downAt(ctx, cut, g); err != nil {
				return err
			}
		}
		return w.checkViews(ctx, gatewayNames()...)
	})
	if err != nil {
		t.Fatalf("cut off %s: %v", cut, err)
	}
	// When each watcher saw each user with no session on its side of the
	// cut offline.
	var worst time.Duration
	seen := firstOffline(w.since(m))
	for _, g := range gatewayNames() {
		for u, gws := range sides {
			if slices.ContainsFunc(gws, func(x string) bool { return (x == cut) == (g == cut) }) {
				continue // has a session on g's side
			}
			at, ok := seen[[2]string{g, u}]
			if !ok {
				t.Errorf("the watcher on %s never saw %s offline", g, u)
				continue
			}
			worst = max(worst, at.Sub(t0))
		}
	}
	t.Logf("network disconnect %s: the other side's users offline at every watcher after %v at most (views and members polled correct after %v); bound: the lease, %v",
		cut, worst.Round(time.Millisecond), took.Round(time.Millisecond), bound)
	if worst > bound {
		t.Errorf("the cut showed after %v, over the bound %v", worst, bound)
	}

	// Hold the cut until memberlist, too, has given up on the other side
	// (declared it dead), so the heal needs the reconnect round rather than
	// the next probe: the longer way back.
	dead, err := waitFor(ctx, t0, 30*time.Second, func() error {
		for _, g := range others(cut) {
			if err := w.memberState(ctx, g, cut, "dead"); err != nil {
				return err
			}
			if err := w.memberState(ctx, cut, g, "dead"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("memberlist never declared the cut-off side dead: %v", err)
	}
	t.Logf("memberlist declared both sides dead %v after the cut", dead.Round(time.Millisecond))

	// Changes on both sides while cut off.
	must(t, byGW["gw1"][0].setStatus("away"))
	must(t, byGW["gw1"][1].setStatus("busy"))
	must(t, byGW[cut][0].setStatus("away"))
	must(t, byGW["gw3"][1].sayBye())
	must(t, late.connect(ctx, cut))
	sides[late.user] = []string{cut}
	tc := time.Now()
	if _, err := waitFor(ctx, tc, w.bounds.Propagation, func() error { return w.checkViews(ctx, gatewayNames()...) }); err != nil {
		t.Fatalf("changes during the cut: %v", err)
	}

	th := time.Now()
	if _, err := w.c.docker(ctx, "network", "connect", "--ip", ip, gossipNet, id); err != nil {
		t.Fatal(err)
	}
	reconnected = true
	w.mu.Lock()
	w.cut = ""
	w.mu.Unlock()
	heal := w.bounds.Rejoin
	took, err = waitFor(ctx, th, heal+5*time.Second, func() error {
		if err := w.allAlive(ctx); err != nil {
			return err
		}
		return w.checkViews(ctx, gatewayNames()...)
	})
	if err != nil {
		t.Fatalf("after the heal: %v", err)
	}
	t.Logf("network connect %s: healed, every session and change shown everywhere after %v (bound: reconnect round + recovery, %v)",
		cut, took.Round(time.Millisecond), heal)
	if took > heal {
		t.Errorf("the heal took %v, over the bound %v", took, heal)
	}
	// The watchers' last events agree with the views: nothing was lost on
	// the event streams either.
	if err := w.checkWatchers(); err != nil {
		t.Error(err)
	}
	// Who may have been shown offline: a user with no session on the
	// watcher's side of the cut, and the one who said bye.
	bye := byGW["gw3"][1].user
	if bad := offlines(w.since(m), func(o observation) bool {
		if o.p.User == bye {
			return true
		}
		for _, g := range sides[o.p.User] {
			if (g == cut) == (o.gateway == cut) {
				return false
			}
		}
		return true
	}); len(bad) > 0 {
		t.Errorf("users connected on the watcher's side of the cut shown offline: %s", strings.Join(first(bad, 10), "; "))
	}
	// The user who said bye comes back for the next drill.
	must(t, byGW["gw3"][1].connect(ctx, "gw3"))
	if _, err := waitFor(ctx, time.Now(), w.bounds.Propagation, func() error { return w.checkViews(ctx, gatewayNames()...) }); err != nil {
		t.Fatal(err)
	}
}

// checkWatchers compares each watcher's latest event per user with what
// its gateway must show.
func (w *world) checkWatchers() error {
	latest := map[[2]string]protocol.Presence{}
	streamOf := map[string]int{}
	for _, o := range w.since(0) {
		if o.stream >= streamOf[o.watcher] {
			streamOf[o.watcher] = o.stream
			latest[[2]string{o.watcher, o.p.User}] = o.p
		}
	}
	var bad []string
	w.mu.Lock()
	var ws []*actor
	for _, a := range w.actors {
		if a.watcher {
			ws = append(ws, a)
		}
	}
	w.mu.Unlock()
	for _, a := range ws {
		gw := a.at()
		for _, u := range w.drillUsers() {
			wantS, wantSt := w.expected(gw, u)
			gotS, gotSt := shown(latest[[2]string{a.user, u}])
			if gotSt != wantSt || strings.Join(gotS, ",") != strings.Join(wantS, ",") {
				bad = append(bad, fmt.Sprintf("%s on %s: %s %s %q, want %s %q", a.user, gw, u, gotSt, gotS, wantSt, wantS))
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("watchers' latest events differ: %s", strings.Join(bad, "; "))
	}
	return nil
}
