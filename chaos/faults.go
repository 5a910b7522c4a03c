package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Fault kinds.
const (
	FaultPause        = "pause"          // SIGSTOP some gateways, SIGCONT after hold
	FaultKill         = "kill"           // kill -9 some gateways, restart them after hold
	FaultTerm         = "term"           // SIGTERM some gateways at once, restart them after hold
	FaultKillRestart  = "kill-restart"   // kill -9 one, kill -9 another just before the first restarts
	FaultGarbageConn  = "garbage-client" // garbage on a gateway's client port
	FaultGarbageGossp = "garbage-gossip" // garbage on a gateway's gossip port, UDP and TCP

	// Network faults, with Config.Netns only.
	FaultPartition = "partition" // some gateways cut off from the rest, both ways
	FaultOneWay    = "one-way"   // a gateway hears nothing from one peer, which still hears it
	FaultLoss      = "loss"      // a gateway loses 30% of its gossip with every peer, both ways
)

// netTail is how long a network fault must end before the fault window
// does: a peer memberlist declared dead meanwhile is rejoined only by the
// next reconnect round (gossip's ReconnectInterval, 10s), then synced.
const netTail = 12500 * time.Millisecond

// Fault is one entry of the schedule.
type Fault struct {
	ID   int
	Kind string
	At   time.Duration // from the start of the fault window
	GWs  []int         // indexes into Cluster.GWs; kill-restart: the restarted one, then the killed one
	Hold time.Duration // pause length, or how long killed gateways stay down
	Gap  time.Duration // kill-restart: from the second kill to the first one's restart
	// Hold2 is how long the second victim of a kill-restart stays down:
	// longer than the crash bound, so its sessions must be shown offline by
	// the lease of a gateway that only just started.
	Hold2 time.Duration
}

// length is how long the fault takes, about (restarts take about a second).
func (f Fault) length() time.Duration {
	switch f.Kind {
	case FaultPause, FaultPartition, FaultOneWay, FaultLoss:
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
// gateways, so one always runs; with net, network faults too, each ending
// netTail before the window does. The same seed gives the same schedule.
func Schedule(seed uint64, n int, window time.Duration, net bool) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x6661756c74))
	dur := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	some := func() []int {
		k := 1
		if n >= 3 && rng.IntN(10) < 3 {
			k = 2 + rng.IntN(n-2)
		}
		return rng.Perm(n)[:k]
	}
	// Half the pauses are short: no longer than the agent's default lease
	// rides out, so the paused gateway's clients must stay shown online
	// on the others throughout.
	pauseHold := func() time.Duration {
		if rng.IntN(2) == 0 {
			return dur(500*time.Millisecond, shortPause)
		}
		return dur(shortPause, 5*time.Second)
	}
	var out []Fault
	at := dur(0, time.Second)
	for {
		f := Fault{ID: len(out) + 1, At: at}
		r := rng.IntN(100)
		if net {
			switch r2 := rng.IntN(100); {
			case r2 < 12:
				k := 1 + rng.IntN(max(1, n/2))
				f.Kind, f.GWs, f.Hold = FaultPartition, rng.Perm(n)[:k], dur(time.Second, 6*time.Second)
			case r2 < 19:
				f.Kind, f.GWs, f.Hold = FaultOneWay, rng.Perm(n)[:2], dur(time.Second, 6*time.Second)
			case r2 < 25:
				f.Kind, f.GWs, f.Hold = FaultLoss, []int{rng.IntN(n)}, dur(2*time.Second, 8*time.Second)
			}
			if f.Kind != "" && at+f.Hold+netTail > window {
				f.Kind, f.GWs, f.Hold = FaultPause, f.GWs[:1], pauseHold()
			}
		}
		switch {
		case f.Kind != "":
		case r < 30:
			f.Kind, f.GWs, f.Hold = FaultPause, some(), pauseHold()
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
		// The second victim dies just before the first starts again: the
		// new incarnation knows it only from a survivor's state (which
		// still holds it alive), never hears it, and must still show it
		// offline by lease.
		in.down(ctx, gws[:1], syscall.SIGKILL)
		_ = sleepCtx(ctx, f.Hold)
		in.down(ctx, gws[1:], syscall.SIGKILL)
		_ = sleepCtx(ctx, f.Gap)
		in.restart(ctx, gws[:1])
		_ = sleepCtx(ctx, f.Hold2)
		in.restart(ctx, gws[1:])
	case FaultPartition, FaultOneWay, FaultLoss:
		detail = in.network(ctx, f, gws)
	case FaultGarbageConn:
		detail = garbageClient(ctx, rand.New(rand.NewPCG(in.seed, uint64(f.ID))), gws[0].ClientAddr)
	case FaultGarbageGossp:
		detail = garbageGossip(ctx, rand.New(rand.NewPCG(in.seed, uint64(f.ID))), gws[0].GossipAddr)
	}
	rec.Write(Record{K: KindFault, Ev: "end", Fault: f.Kind, FID: f.ID, GWs: names, Detail: detail})
}

// network injects a network fault, holds it and heals it. Each host's
// rules are recorded as a net record (gw drops what it gets from gws, and
// with "out" what it sends them), and each heal too.
func (in *injector) network(ctx context.Context, f Fault, gws []*Gateway) string {
	nw := in.e.cl.cfg.Net
	all := in.e.cl.GWs
	type cut struct {
		host  *Gateway
		peers []*Gateway
		out   bool
		prob  float64
	}
	var cuts []cut
	switch f.Kind {
	case FaultPartition:
		for _, a := range gws {
			var rest []*Gateway
			for _, b := range all {
				if !slices.Contains(gws, b) {
					rest = append(rest, b)
				}
			}
			cuts = append(cuts, cut{host: a, peers: rest, out: true, prob: 1})
		}
	case FaultOneWay:
		cuts = append(cuts, cut{host: gws[0], peers: gws[1:], prob: 1})
	case FaultLoss:
		var rest []*Gateway
		for _, b := range all {
			if b != gws[0] {
				rest = append(rest, b)
			}
		}
		cuts = append(cuts, cut{host: gws[0], peers: rest, out: true, prob: 0.3})
	}
	for _, c := range cuts {
		var names []string
		for _, p := range c.peers {
			names = append(names, p.Name)
			if err := nw.drop(c.host.index, p.index, c.out, c.prob); err != nil {
				in.e.rec.Write(Record{K: KindNet, Ev: "error", GW: c.host.Name, Detail: err.Error()})
			}
		}
		dir := "in"
		if c.out {
			dir = "in+out"
		}
		in.e.rec.Write(Record{K: KindNet, Ev: "drop", GW: c.host.Name, GWs: names, Detail: fmt.Sprintf("%s p=%.2f", dir, c.prob)})
	}
	_ = sleepCtx(ctx, f.Hold)
	for _, c := range cuts {
		if err := nw.heal(c.host.index); err != nil {
			in.e.rec.Write(Record{K: KindNet, Ev: "error", GW: c.host.Name, Detail: err.Error()})
		}
		in.e.rec.Write(Record{K: KindNet, Ev: "heal", GW: c.host.Name})
	}
	return fmt.Sprintf("%d hosts' rules", len(cuts))
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
