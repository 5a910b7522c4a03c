package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// The workload: one actor per (user, device), each with its own random
// stream derived from the seed. An actor connects to a random gateway
// (hello with the last epoch it was given), heartbeats, changes its
// status, joins and leaves groups and sends to other users, and after a
// while ends the session in one of these ways:
//
//	bye         clean end, answered ok
//	close       the socket is closed without a word
//	silent      heartbeats and reads stop, the socket stays open a while
//	            (the gateway must expire the session after the timeout)
//	reconnect   a new connection elsewhere with last_epoch while the old
//	            one is left open (the old one is superseded)
//	move        close, then at once a new connection elsewhere
//
// When the gateway ends a connection, half the actors reconnect within a
// second and the others stay away for two to three crash bounds.
//
// From the settle time on, actors change nothing: a connected actor keeps
// heartbeating, a disconnected one stays away.

// workloadStatuses are the device statuses a client may set.
var workloadStatuses = [...]string{"available", "away", "busy"}

// Users names n workload users.
func Users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("u%02d", i+1)
	}
	return out
}

// actor drives one (user, device).
type actor struct {
	e         *env
	rng       *rand.Rand
	user, dev string
	lastEpoch uint64
	status    string
	groups    map[string]bool
	leftOpen  sync.WaitGroup // old connections left silent or open
}

// runWorkload runs every actor until ctx ends.
func (e *env) runWorkload(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x776f726b))
	var wg sync.WaitGroup
	i := 0
	for _, u := range e.users {
		devs := []string{"phone"}
		if rng.IntN(2) == 0 {
			devs = append(devs, "laptop")
		}
		for _, d := range devs {
			i++
			a := &actor{e: e, rng: rand.New(rand.NewPCG(seed, uint64(i))), user: u, dev: d, groups: map[string]bool{}}
			wg.Go(func() { a.run(ctx) })
		}
	}
	wg.Wait()
}

func (a *actor) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(a.rng.Int64N(int64(hi-lo)+1))
}

func (a *actor) settled() bool { return a.e.rec.Now() >= a.e.settleAt }

func (a *actor) run(ctx context.Context) {
	defer a.leftOpen.Wait()
	_ = sleepCtx(ctx, a.dur(0, 2*time.Second))
	var cur *session
	defer func() {
		if cur != nil {
			cur.close(false)
		}
	}()
	var sessionEnd time.Time
	for ctx.Err() == nil {
		if cur != nil && !cur.alive() {
			// The gateway ended it (killed, shut down, superseded, expired).
			// Half the actors come back at once; the others stay away past
			// the crash bound, so a dead gateway's sessions are left for the
			// leases to end, not for newer epochs to supersede.
			cur.close(false)
			cur = nil
			back := a.dur(50*time.Millisecond, time.Second)
			if a.rng.IntN(2) == 0 {
				back = a.dur(2*a.e.bounds.CrashExpiry, 3*a.e.bounds.CrashExpiry)
			}
			_ = sleepCtx(ctx, back)
			continue
		}
		if a.settled() {
			if cur == nil {
				<-ctx.Done()
				return
			}
			select {
			case <-ctx.Done():
			case <-cur.conn.done:
			}
			continue
		}
		if cur == nil {
			cur = a.connect(ctx, nil, 0)
			if cur == nil {
				_ = sleepCtx(ctx, 200*time.Millisecond)
				continue
			}
			sessionEnd = time.Now().Add(a.dur(3*time.Second, 15*time.Second))
		}
		_ = sleepCtx(ctx, a.dur(300*time.Millisecond, 2500*time.Millisecond))
		if ctx.Err() != nil || a.settled() || !cur.alive() {
			continue
		}
		if time.Now().Before(sessionEnd) {
			a.act(ctx, cur)
			continue
		}
		cur = a.end(ctx, cur)
	}
}

// connect says hello on a random running gateway other than avoid; nil
// if none answered.
func (a *actor) connect(ctx context.Context, avoid *Gateway, prev int) *session {
	gws := a.e.cl.GWs
	order := a.rng.Perm(len(gws))
	for pass := range 2 {
		for _, i := range order {
			g := gws[i]
			if g == avoid && pass == 0 {
				continue
			}
			a.status = workloadStatuses[a.rng.IntN(len(workloadStatuses))]
			var groups []string
			if a.rng.IntN(3) == 0 {
				groups = []string{fmt.Sprintf("team-%d", a.rng.IntN(4)+1)}
			}
			s, err := a.e.connect(ctx, g, "actor", a.user, a.dev, a.status, a.lastEpoch, groups, prev, nil)
			if err != nil {
				continue
			}
			a.lastEpoch = max(a.lastEpoch, s.epoch)
			clear(a.groups)
			for _, gr := range groups {
				a.groups[gr] = true
			}
			return s
		}
	}
	return nil
}

// act does one random thing on s.
func (a *actor) act(ctx context.Context, s *session) {
	switch r := a.rng.IntN(10); {
	case r < 5:
		st := workloadStatuses[a.rng.IntN(len(workloadStatuses))]
		if _, err := s.op(ctx, Record{Op: "status", Status: st}, map[string]any{"op": protocol.OpStatus, "status": st}); err == nil {
			a.status = st
		}
	case r < 7:
		gr := fmt.Sprintf("team-%d", a.rng.IntN(4)+1)
		op := protocol.OpJoin
		if a.groups[gr] {
			op = protocol.OpLeave
		}
		if _, err := s.op(ctx, Record{Op: op, Group: gr}, map[string]any{"op": op, "group": gr}); err == nil {
			a.groups[gr] = op == protocol.OpJoin
		}
	default:
		to := a.e.users[a.rng.IntN(len(a.e.users))]
		_, _ = s.op(ctx, Record{Op: "send", To: to}, map[string]any{"op": protocol.OpSend, "to": to, "body": map[string]any{"from": a.user, "n": a.rng.IntN(1000)}})
	}
}

// end ends s in a random way and returns the actor's connection after it
// (nil, or the new one of a reconnect).
func (a *actor) end(ctx context.Context, s *session) *session {
	switch r := a.rng.IntN(100); {
	case r < 30: // bye
		_, _ = s.op(ctx, Record{Op: "bye"}, map[string]any{"op": protocol.OpBye})
		s.close(false)
	case r < 45: // close
		s.close(true)
	case r < 65: // silent
		a.silence(ctx, s, a.dur(time.Second, 3*a.e.bounds.Timeout), true)
	case r < 85: // reconnect elsewhere, the old connection left open
		a.silence(ctx, s, helloTimeout+a.e.bounds.Timeout, false)
		_ = sleepCtx(ctx, a.dur(0, 300*time.Millisecond))
		return a.connect(ctx, s.gw, s.conn.id)
	default: // move: close, then reconnect elsewhere at once
		s.close(true)
		return a.connect(ctx, s.gw, s.conn.id)
	}
	_ = sleepCtx(ctx, a.dur(300*time.Millisecond, 4*time.Second))
	return nil
}

// silence makes s silent: no more requests, and with mute no more reads
// either (the client froze). The socket is closed after hold, or, if s
// still reads, as soon as the gateway closes it (superseded, expired).
func (a *actor) silence(ctx context.Context, s *session, hold time.Duration, mute bool) {
	s.stopHeartbeat()
	a.e.rec.Write(Record{K: KindOp, C: s.conn.id, Op: "silent"})
	if mute {
		s.conn.silence()
	}
	a.leftOpen.Go(func() {
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-s.conn.done:
		}
		s.close(ctx.Err() == nil)
	})
}
