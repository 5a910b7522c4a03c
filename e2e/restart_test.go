package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// drainGraceEnv turns on the check that waits on the lame-duck drain grace
// whatever the gateways say: a user whose every session was on a draining
// gateway, and who reconnects elsewhere at once, is never shown offline. A
// gateway with the lame-duck drain lists the other gateways in
// shutting_down, and the check is on whenever one does. A gateway without
// it writes a drained session disconnected before it tells the client
// shutting_down, so subscribers elsewhere see the user offline for the
// moment between the two; there those flaps are counted and logged, not
// failed.
const drainGraceEnv = "ROLLCALL_E2E_DRAIN_GRACE"

// reconnectDelay is how long a client of a draining gateway waits after
// shutting_down before it says hello to the next gateway.
const reconnectDelay = 200 * time.Millisecond

// drillRollingRestart: docker restart each gateway in turn, waiting for
// its health check and for it to show everyone before the next. Clients of
// the restarted gateway get shutting_down and reconnect at once to the
// next gateway with last_epoch; nobody is shown offline meanwhile.
func (w *world) drillRollingRestart(ctx context.Context, t *testing.T) {
	m := w.mark()
	type step struct {
		gw         string
		from, to   time.Time
		drainedAll map[string]bool // users whose every session was on gw
	}
	var steps []step
	names := gatewayNames()
	var handoverMu sync.Mutex
	handover := false // some shutting_down listed the other gateways
	for i, gw := range names {
		target := names[(i+1)%len(names)]
		movers := w.actorsOn(gw)
		st := step{gw: gw, from: time.Now(), drainedAll: w.usersOnlyOn(gw)}
		id := w.c.id(gw)
		var wg sync.WaitGroup
		errs := make([]error, len(movers))
		dest := make([]string, len(movers))
		for j, a := range movers {
			c, old := a.conn(), a.lastEpoch()
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-c.done
				if code := c.end(); code != string(protocol.CodeShuttingDown) {
					errs[j] = fmt.Errorf("%s/%s on %s: connection ended %q, want %s", a.user, a.device, gw, code, protocol.CodeShuttingDown)
				}
				target := target
				if offered := c.gatewaysOffered(); len(offered) > 0 {
					handoverMu.Lock()
					handover = true
					handoverMu.Unlock()
					// Go where the gateway says, as a client would.
					var err error
					if target, err = w.gatewayAt(offered[0]); err != nil || target == gw {
						errs[j] = errors.Join(errs[j], fmt.Errorf("%s/%s: shutting_down from %s offered %q: %q, %v", a.user, a.device, gw, offered, target, err))
						return
					}
				}
				// A real client's reconnect takes a round trip or two
				// over a WAN, or a backoff: well inside the drain grace.
				time.Sleep(reconnectDelay)
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				if err := a.connectRetry(rctx, target); err != nil {
					errs[j] = errors.Join(errs[j], err)
					return
				}
				dest[j] = target
				if e := a.lastEpoch(); e <= old {
					errs[j] = errors.Join(errs[j], fmt.Errorf("%s/%s: epoch %d on %s after %d", a.user, a.device, e, target, old))
				}
			}()
		}
		t0 := time.Now()
		if _, err := w.c.docker(ctx, "restart", id); err != nil {
			t.Fatal(err)
		}
		restarted := time.Since(t0)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Error(err)
		}
		healthy := w.waitHealthy(ctx, t, gw)
		synced, err := waitFor(ctx, time.Now(), w.bounds.Convergence, func() error {
			if err := w.allAlive(ctx); err != nil {
				return err
			}
			return w.checkViews(ctx, names...)
		})
		if err != nil {
			t.Fatalf("after restarting %s: %v", gw, err)
		}
		st.to = time.Now()
		steps = append(steps, st)
		moved := map[string]int{}
		for _, d := range dest {
			moved[d]++
		}
		t.Logf("docker restart %s: %v; healthy %v later, every view correct %v after that; its %d clients moved: %v",
			gw, restarted.Round(time.Millisecond), healthy.Round(time.Millisecond), synced.Round(time.Millisecond), len(movers), moved)
	}
	if err := w.checkWatchers(); err != nil {
		t.Error(err)
	}
	var drainFlaps []string
	bad := offlines(w.since(m), func(o observation) bool {
		for _, st := range steps {
			if !o.at.Before(st.from) && !o.at.After(st.to) && st.drainedAll[o.p.User] {
				drainFlaps = append(drainFlaps, fmt.Sprintf("%s (watching on %s) saw %s offline at %s while %s drained",
					o.watcher, o.gateway, o.p.User, o.at.Format("15:04:05.000"), st.gw))
				return true
			}
		}
		return false
	})
	if len(bad) > 0 {
		t.Errorf("users with a session on a running gateway shown offline during the rolling restart: %s", strings.Join(first(bad, 10), "; "))
	}
	if len(drainFlaps) > 0 {
		msg := fmt.Sprintf("%d offline flaps of users whose gateway drained and who reconnected at once elsewhere: %s",
			len(drainFlaps), strings.Join(first(drainFlaps, 6), "; "))
		if handover || os.Getenv(drainGraceEnv) == "1" {
			t.Error(msg)
		} else {
			t.Logf("%s\n(not failed: this check waits on the lame-duck drain grace, which these gateways do not have: their shutting_down lists no other gateways; set %s=1 to enforce it)", msg, drainGraceEnv)
		}
	}
}
