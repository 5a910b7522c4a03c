package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"
)

// Fault kinds.
const (
	FaultPause        = "pause"          // SIGSTOP some gateways, SIGCONT after hold
	FaultKill         = "kill"           // kill -9 some gateways, restart them after hold
	FaultTerm         = "term"           // SIGTERM some gateways at once, restart them after hold
	FaultKillRestart  = "kill-restart"   // kill -9 one, restart it, kill -9 another right after it is ready
	FaultGarbageConn  = "garbage-client" // garbage on a gateway's client port
	FaultGarbageGossp = "garbage-gossip" // garbage on a gateway's gossip port, UDP and TCP
)

// Fault is one entry of the schedule.
type Fault struct {
	ID   int
	Kind string
	At   time.Duration // from the start of the fault window
	GWs  []int         // indexes into Cluster.GWs; kill-restart: the restarted one, then the killed one
	Hold time.Duration // pause length, or how long killed gateways stay down
	Gap  time.Duration // kill-restart: from the first one ready to the second kill
	// Hold2 is how long the second victim of a kill-restart stays down:
	// longer than the crash bound, so its sessions must be shown offline by
	// the lease of a gateway that only just started (issue 13, fault 2).
	Hold2 time.Duration
}

// length is how long the fault takes, about (restarts take about a second).
func (f Fault) length() time.Duration {
	switch f.Kind {
	case FaultPause:
		return f.Hold
	case FaultKill, FaultTerm:
		return f.Hold + 1500*time.Millisecond
	case FaultKillRestart:
		return f.Hold + f.Hold2 + 3*time.Second + f.Gap
	}
	return 200 * time.Millisecond
}

func (f Fault) String() string {
	names := make([]string, len(f.GWs))
	for i, g := range f.GWs {
		names[i] = fmt.Sprintf("gw%d", g+1)
	}
	return fmt.Sprintf("#%d %s %s at +%v hold %v", f.ID, f.Kind, strings.Join(names, ","), f.At.Round(time.Millisecond), f.Hold.Round(time.Millisecond))
}

// Schedule draws a fault schedule for n gateways over window: faults one
// after another with 0.5–3s between them, each over at most n-1
// gateways, so one always runs. The same seed gives the same schedule.
func Schedule(seed uint64, n int, window time.Duration) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x6661756c74))
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	some := func() []int {
		k := 1
		if n >= 3 && rng.IntN(10) < 3 {
			k = 2 + rng.IntN(n-2)
		}
		return rng.Perm(n)[:k]
	}
	var out []Fault
	at := dur(0, time.Second)
	for {
		f := Fault{ID: len(out) + 1, At: at}
		switch r := rng.IntN(100); {
		case r < 30:
			f.Kind, f.GWs, f.Hold = FaultPause, some(), dur(time.Second, 5*time.Second)
		case r < 50:
			f.Kind, f.GWs, f.Hold = FaultKill, some(), dur(200*time.Millisecond, 5*time.Second)
		case r < 60:
			f.Kind, f.GWs, f.Hold = FaultTerm, some(), dur(200*time.Millisecond, 2*time.Second)
		case r < 70 && n >= 2:
			p := rng.Perm(n)
			f.Kind, f.GWs, f.Hold, f.Gap = FaultKillRestart, p[:2], dur(200*time.Millisecond, time.Second), dur(0, 300*time.Millisecond)
			f.Hold2 = dur(4*time.Second, 6*time.Second)
		case r < 85:
			f.Kind, f.GWs = FaultGarbageConn, []int{rng.IntN(n)}
		default:
			f.Kind, f.GWs = FaultGarbageGossp, []int{rng.IntN(n)}
		}
		if at+f.length() > window {
			return out
		}
		out = append(out, f)
		at += f.length() + dur(500*time.Millisecond, 3*time.Second)
	}
}

// injector runs a schedule against a cluster.
type injector struct {
	e     *env
	seed  uint64
	start float64 // history ms the schedule's times count from
	end   float64 // no fault starts after this minus its length
	drain time.Duration
}

// run injects every fault at its time until ctx ends; it returns how
// many were injected.
func (in *injector) run(ctx context.Context, faults []Fault) int {
	n := 0
	for _, f := range faults {
		wait := in.e.rec.At(in.start + ms(f.At))
		if err := sleepCtx(ctx, time.Until(wait)); err != nil {
			return n
		}
		if in.e.rec.Now()+ms(f.length()) > in.end {
			continue // running late: never inject into the quiet tail
		}
		n++
		in.inject(ctx, f)
	}
	return n
}

func (in *injector) gws(f Fault) []*Gateway {
	out := make([]*Gateway, len(f.GWs))
	for i, g := range f.GWs {
		out[i] = in.e.cl.GWs[g]
	}
	return out
}

func (in *injector) inject(ctx context.Context, f Fault) {
	gws := in.gws(f)
	names := make([]string, len(gws))
	for i, g := range gws {
		names[i] = g.Name
	}
	rec := in.e.rec
	rec.Write(Record{K: KindFault, Ev: "start", Fault: f.Kind, FID: f.ID, GWs: names, Detail: f.String()})
	detail := ""
	switch f.Kind {
	case FaultPause:
		for _, g := range gws {
			_ = in.e.cl.Signal(g, syscall.SIGSTOP, "")
		}
		_ = sleepCtx(ctx, f.Hold)
		for _, g := range gws {
			_ = in.e.cl.Signal(g, syscall.SIGCONT, "")
		}
	case FaultKill:
		in.down(ctx, gws, syscall.SIGKILL)
		_ = sleepCtx(ctx, f.Hold)
		in.restart(ctx, gws)
	case FaultTerm:
		detail = in.down(ctx, gws, syscall.SIGTERM)
		_ = sleepCtx(ctx, f.Hold)
		in.restart(ctx, gws)
	case FaultKillRestart:
		in.down(ctx, gws[:1], syscall.SIGKILL)
		_ = sleepCtx(ctx, f.Hold)
		in.restart(ctx, gws[:1])
		_ = sleepCtx(ctx, f.Gap)
		in.down(ctx, gws[1:], syscall.SIGKILL)
		_ = sleepCtx(ctx, f.Hold2)
		in.restart(ctx, gws[1:])
	case FaultGarbageConn:
		detail = garbageClient(ctx, rand.New(rand.NewPCG(in.seed, uint64(f.ID))), gws[0].ClientAddr)
	case FaultGarbageGossp:
		detail = garbageGossip(ctx, rand.New(rand.NewPCG(in.seed, uint64(f.ID))), gws[0].GossipAddr)
	}
	rec.Write(Record{K: KindFault, Ev: "end", Fault: f.Kind, FID: f.ID, GWs: names, Detail: detail})
}

// down sends sig to every gateway in gws at once and waits for them to
// exit; it returns how long each took.
func (in *injector) down(ctx context.Context, gws []*Gateway, sig syscall.Signal) string {
	why := "kill"
	if sig == syscall.SIGTERM {
		why = "term"
	}
	t0 := time.Now()
	for _, g := range gws {
		_ = in.e.cl.Signal(g, sig, why)
	}
	var took []string
	for _, g := range gws {
		err := in.e.cl.WaitExit(ctx, g, in.drain+5*time.Second)
		if err != nil {
			// A gateway that outlives its drain bound is killed.
			_ = in.e.cl.Signal(g, syscall.SIGKILL, why)
			_ = in.e.cl.WaitExit(ctx, g, 5*time.Second)
		}
		took = append(took, fmt.Sprintf("%s exited after %v", g.Name, time.Since(t0).Round(time.Millisecond)))
	}
	return strings.Join(took, ", ")
}

// restart starts every gateway in gws again and waits until each is
// ready, retrying a start that fails.
func (in *injector) restart(ctx context.Context, gws []*Gateway) {
	// All at once first; then one by one, any that did not come up.
	for _, g := range gws {
		_ = in.e.cl.Launch(g)
	}
	for _, g := range gws {
		if g.Running() && in.e.cl.WaitReady(ctx, g, 20*time.Second) == nil {
			continue
		}
		for try := 0; try < 5 && ctx.Err() == nil; try++ {
			if g.Running() {
				_ = in.e.cl.Signal(g, syscall.SIGKILL, "kill")
				_ = in.e.cl.WaitExit(ctx, g, 5*time.Second)
			}
			if err := in.e.cl.Restart(ctx, g); err == nil {
				break
			} else {
				in.e.rec.Write(Record{K: KindGW, GW: g.Name, Ev: "restart-failed", Detail: err.Error()})
			}
			_ = sleepCtx(ctx, 500*time.Millisecond)
		}
	}
}
