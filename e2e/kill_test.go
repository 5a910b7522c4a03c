package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
)

// drillKill: docker kill one gateway. Its sessions must be shown offline
// (expired) on the others within the crash bound, no other user may be
// shown offline, and once it is started again it serves its clients again.
func (w *world) drillKill(ctx context.Context, t *testing.T, victim string) {
	survivors := others(victim)
	lost := w.usersOnlyOn(victim)
	victims := w.actorsOn(victim)
	m := w.mark()
	id := w.c.id(victim)
	t0 := time.Now()
	if _, err := w.c.docker(ctx, "kill", id); err != nil {
		t.Fatal(err)
	}
	for _, a := range victims {
		<-a.conn().done
		if code := a.conn().end(); code != "eof" {
			t.Errorf("%s/%s on the killed gateway: connection ended %q, want a plain close", a.user, a.device, code)
		}
	}
	bound := w.bounds.CrashExpiry
	took, err := waitFor(ctx, t0, bound+5*time.Second, func() error { return w.checkViews(ctx, survivors...) })
	if err != nil {
		t.Fatalf("after docker kill %s: %v", victim, err)
	}
	// When each watcher saw each of the victim's users offline: the
	// crash-detection time.
	var worst time.Duration
	seen := firstOffline(w.since(m))
	for _, s := range survivors {
		for u := range lost {
			at, ok := seen[[2]string{s, u}]
			if !ok {
				t.Errorf("the watcher on %s never saw %s offline", s, u)
				continue
			}
			worst = max(worst, at.Sub(t0))
		}
		if err := w.downAt(ctx, s, victim); err != nil {
			t.Errorf("after the kill: %v", err)
		}
	}
	// The bound is checked on the watchers' event times; the views are
	// polled, so they are only required to agree in the end.
	t.Logf("docker kill %s: its users offline at the survivors' watchers after %v at most (views polled correct after %v); crash bound %v",
		victim, worst.Round(time.Millisecond), took.Round(time.Millisecond), bound)
	if worst > bound {
		t.Errorf("crash detection took %v, over the crash bound %v", worst, bound)
	}
	if bad := offlines(w.since(m), func(o observation) bool { return lost[o.p.User] }); len(bad) > 0 {
		t.Errorf("users still connected to a live gateway shown offline: %s", strings.Join(first(bad, 10), "; "))
	}

	// Start it again: the new incarnation rejoins, its clients come back.
	if _, err := w.c.docker(ctx, "start", id); err != nil {
		t.Fatal(err)
	}
	w.waitHealthy(ctx, t, victim)
	for _, a := range victims {
		must(t, a.connectRetry(ctx, victim))
	}
	if _, err := waitFor(ctx, time.Now(), w.bounds.Convergence, func() error {
		if err := w.allAlive(ctx); err != nil {
			return err
		}
		return w.checkViews(ctx, gatewayNames()...)
	}); err != nil {
		t.Fatalf("after %s restarted: %v", victim, err)
	}
}
