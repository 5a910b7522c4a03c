package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Config configures one chaos run.
type Config struct {
	// Seed decides the fault schedule and every workload choice. The
	// timing of real processes is not seeded, so a replay is the same
	// schedule and workload, not the same interleaving.
	Seed uint64
	// Duration is the whole run after the cluster has formed: faults in
	// the first part, a fault-free tail of at least the convergence bound
	// plus the settle time. Default 60s.
	Duration time.Duration
	// Gateways is the number of agents, 3 to 5. Default 3.
	Gateways int
	// Users is the number of workload users; each has one or two devices.
	// Default 40.
	Users int
	// Bin is the rollcall binary. Required.
	Bin string
	// Dir is the run directory (history, agent logs); default a new
	// directory under the system's temporary directory.
	Dir string
	// Heartbeat and Timeout are the agents' --heartbeat and --timeout.
	// Defaults 500ms and 2s.
	Heartbeat, Timeout time.Duration
	// DrainTimeout is the agents' --drain-timeout. Default 3s.
	DrainTimeout time.Duration
	// DisconnectGrace is the agents' --disconnect-grace. Default 1s;
	// negative passes 0 (none).
	DisconnectGrace time.Duration
	// Slack is the loaded-machine allowance in every bound. Default
	// DefaultSlack.
	Slack time.Duration
	// Netns adds network faults (partitions, one-way cuts, loss): each
	// agent runs in a network namespace of its own. It needs root, ip and
	// iptables; without them the run goes on without network faults and
	// says so.
	Netns bool
	// Command, if set, is recorded in the history header: how to replay.
	Command string
	// Log receives progress lines; default io.Discard.
	Log io.Writer
}

// warmup is how long the workload runs before the first fault.
const warmup = 3 * time.Second

// DefaultConfig returns the defaults above (Bin and Seed unset).
func DefaultConfig() Config {
	return Config{Duration: 60 * time.Second, Gateways: 3, Users: 40, Heartbeat: 500 * time.Millisecond,
		Timeout: 2 * time.Second, DrainTimeout: 3 * time.Second, DisconnectGrace: time.Second, Slack: DefaultSlack}
}

// Timeline is when a run's phases start, from the cluster formed.
type Timeline struct {
	FaultStart, FaultEnd, SettleStart, Stop time.Duration
}

// Validate fills defaults and rejects what cannot run.
func (c *Config) Validate() error {
	d := DefaultConfig()
	set := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	set(&c.Duration, d.Duration)
	set(&c.Heartbeat, d.Heartbeat)
	set(&c.Timeout, d.Timeout)
	set(&c.DrainTimeout, d.DrainTimeout)
	set(&c.DisconnectGrace, d.DisconnectGrace)
	set(&c.Slack, d.Slack)
	if c.Gateways == 0 {
		c.Gateways = d.Gateways
	}
	if c.Users == 0 {
		c.Users = d.Users
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Gateways < 2 || c.Gateways > 9 {
		return fmt.Errorf("chaos: %d gateways (want 2 to 9)", c.Gateways)
	}
	if c.Bin == "" {
		return errors.New("chaos: Config.Bin (the rollcall binary) is required")
	}
	if tl := c.Timeline(); tl.FaultEnd < tl.FaultStart+2*time.Second {
		return fmt.Errorf("chaos: duration %v is too short: the fault-free tail alone takes %v, the warm-up %v",
			c.Duration, c.Duration-tl.FaultEnd, warmup)
	}
	return nil
}

// Timeline splits the run: warm-up, faults, a fault-free tail of
// max(convergence + 2s, settle + 2s), the last settle of which changes
// nothing (settle = the later of silent expiry and disconnect grace +
// propagation, + 1s of polls).
func (c *Config) Timeline() Timeline {
	b := DeriveBounds(c.Heartbeat, c.Timeout, c.Slack).WithDisconnectGrace(c.DisconnectGrace)
	settle := max(b.SilentExpiry, b.DisconnectGrace+b.Propagation) + time.Second
	tail := max(b.Convergence, settle) + 2*time.Second
	return Timeline{FaultStart: warmup, FaultEnd: c.Duration - tail, SettleStart: c.Duration - settle, Stop: c.Duration}
}

// Result is what a run did and found.
type Result struct {
	Seed       uint64
	Dir        string // the run directory
	Faults     int    // faults injected
	Ops        int    // client operations and observations recorded
	Violations []Violation
}

// Summary is the run's one-line summary; with violations, their count by
// kind follows in parentheses.
func (r *Result) Summary() string {
	s := fmt.Sprintf("seed %d: %d faults, %d ops, %d violations", r.Seed, r.Faults, r.Ops, len(r.Violations))
	if len(r.Violations) == 0 {
		return s
	}
	counts := map[string]int{}
	var kinds []string
	for _, v := range r.Violations {
		if counts[v.Kind] == 0 {
			kinds = append(kinds, v.Kind)
		}
		counts[v.Kind]++
	}
	slices.Sort(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return s + " (" + strings.Join(parts, ", ") + ")"
}

// Run runs one seed: it starts the cluster, the observers, the workload
// and the faults, stops them all, and checks the history. It kills
// everything it started before it returns, when ctx ends too. The run
// directory is kept; the caller removes it on success if it wants.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", fmt.Sprintf("rollcall-chaos-%d-", cfg.Seed))
		if err != nil {
			return nil, err
		}
		cfg.Dir = dir
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Seed: cfg.Seed, Dir: cfg.Dir}
	histPath := filepath.Join(cfg.Dir, "history.jsonl")
	rec, err := NewRecorder(histPath)
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	bounds := DeriveBounds(cfg.Heartbeat, cfg.Timeout, cfg.Slack).WithDisconnectGrace(cfg.DisconnectGrace)
	tl := cfg.Timeline()

	var nw *network
	if cfg.Netns {
		if err := netnsAvailable(); err != nil {
			fmt.Fprintf(cfg.Log, "seed %d: no network faults: %v\n", cfg.Seed, err)
		} else if nw, err = newNetwork(cfg.Gateways); err != nil {
			fmt.Fprintf(cfg.Log, "seed %d: no network faults: %v\n", cfg.Seed, err)
			nw = nil
		} else {
			defer nw.close()
		}
	}
	cl, err := NewCluster(ClusterConfig{Bin: cfg.Bin, Dir: cfg.Dir, Gateways: cfg.Gateways, Heartbeat: cfg.Heartbeat,
		Timeout: cfg.Timeout, DrainTimeout: cfg.DrainTimeout, DisconnectGrace: max(cfg.DisconnectGrace, 0), Net: nw}, rec)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	fmt.Fprintf(cfg.Log, "seed %d: %d gateways, %d users, %v (faults %v..%v, settle from %v); run directory %s\n",
		cfg.Seed, cfg.Gateways, cfg.Users, cfg.Duration, tl.FaultStart, tl.FaultEnd, tl.SettleStart, cfg.Dir)
	if err := cl.Start(ctx); err != nil {
		return res, fmt.Errorf("start cluster: %w", err)
	}

	base := rec.Now()
	at := func(d time.Duration) float64 { return base + ms(d) }
	names := make([]string, len(cl.GWs))
	for i, g := range cl.GWs {
		names[i] = g.Name
	}
	e := &env{rec: rec, cl: cl, users: Users(cfg.Users), bounds: bounds, settleAt: at(tl.SettleStart)}
	rec.Write(Record{T: base, K: KindRun, Run: &RunInfo{Seed: cfg.Seed, Gateways: names, Users: e.users,
		HeartbeatMS: ms(cfg.Heartbeat), TimeoutMS: ms(cfg.Timeout), PeerLeaseMS: ms(bounds.PeerLease), SlackMS: ms(cfg.Slack), DrainMS: ms(cfg.DrainTimeout),
		DisconnectGraceMS: ms(max(cfg.DisconnectGrace, 0)),
		FaultStart:        at(tl.FaultStart), FaultEnd: at(tl.FaultEnd), SettleStart: at(tl.SettleStart), Stop: at(tl.Stop),
		Command: cfg.Command, AgentVersion: agentVersion(cfg.Bin), Netns: nw != nil}})

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for _, g := range cl.GWs {
		wg.Go(func() { e.subscriber(runCtx, g) })
		wg.Go(func() { e.poller(runCtx, g) })
	}
	wg.Go(func() { e.runWorkload(runCtx, cfg.Seed) })
	faults := Schedule(cfg.Seed, cfg.Gateways, tl.FaultEnd-tl.FaultStart, nw != nil)
	inj := &injector{e: e, seed: cfg.Seed, start: at(tl.FaultStart), end: at(tl.FaultEnd), drain: cfg.DrainTimeout}
	injected := make(chan int, 1)
	go func() { injected <- inj.run(runCtx, faults) }()
	// Flush now and then, so a killed run leaves most of its history; and
	// record the harness's own stalls.
	wg.Go(func() { watchStalls(runCtx, rec) })

	interrupted := sleepCtx(ctx, time.Until(rec.At(at(tl.Stop))))
	rec.Write(Record{K: KindStop})
	for _, g := range cl.GWs {
		fmt.Fprintf(cfg.Log, "  %s members at stop: %s\n", g.Name, cl.Members(context.Background(), g))
	}
	stop()
	res.Faults = <-injected
	// Clients close before the agents die, so nothing of theirs is lost
	// to a kill; a stopped agent is resumed by the kill in cl.Close.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		fmt.Fprintln(cfg.Log, "  some clients did not stop within 15s")
	}
	cl.Close()
	if err := rec.Close(); err != nil {
		return res, err
	}
	if interrupted != nil {
		return res, fmt.Errorf("interrupted: %w", interrupted)
	}
	h, err := ReadHistoryFile(histPath)
	if err != nil {
		return res, err
	}
	rep := Check(h)
	res.Ops, res.Violations = rep.Ops, rep.Violations
	return res, nil
}

// stallTick and stallMin: the harness checks every stallTick that it
// runs, and records a stall when it did not for stallMin.
const (
	stallTick = 50 * time.Millisecond
	stallMin  = 250 * time.Millisecond
)

// watchStalls records when the harness itself was not scheduled for
// stallMin or more (a loaded machine), so the checker does not take the
// receipt time of what queued up meanwhile for when it was sent. It also
// flushes the history every second.
func watchStalls(ctx context.Context, rec *Recorder) {
	t := time.NewTicker(stallTick)
	defer t.Stop()
	last, flushed := rec.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := rec.Now()
		if now-last >= ms(stallMin) {
			rec.Write(Record{T: now, K: KindStall, From: last})
		}
		last = now
		if time.Since(flushed) >= time.Second {
			_ = rec.Flush()
			flushed = time.Now()
		}
	}
}

// agentVersion is the binary's VCS revision (with "+dirty" for a
// modified tree), for the header.
func agentVersion(bin string) string {
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		return ""
	}
	rev, dirty := "", ""
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || f[0] != "build" {
			continue
		}
		if v, ok := strings.CutPrefix(f[1], "vcs.revision="); ok {
			rev = v
		}
		if f[1] == "vcs.modified=true" {
			dirty = "+dirty"
		}
	}
	return rev + dirty
}
