package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollcall/rollcall/bench"
)

// benchConfig is `hbgen bench`'s: the flags of `rollcall bench` that a
// load of plain heartbeats has a use for, so that bench-compare can run
// it in place of `rollcall bench` (bench-compare run --raw).
type benchConfig struct {
	addrs       []string
	sessions    int
	connectRate float64
	heartbeat   time.Duration
	warmup      time.Duration
	duration    time.Duration
	pids        []int
	src         netip.Addr
	ips         int
}

// parseBench parses `hbgen bench`'s flags. The `rollcall bench` flags
// for what a raw load does not do (status changes, subscribers, silent
// sessions, the probe) are accepted only at zero, so a comparison that
// asked for them fails instead of measuring something else.
func parseBench(args []string, stderr io.Writer) (benchConfig, error) {
	fs := flag.NewFlagSet("hbgen bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addrs := fs.String("addrs", "127.0.0.1:7400", "gateway client addresses, comma-separated; sessions are spread over them in turn")
	sessions := fs.Int("sessions", 1000, "sessions")
	fs.Int("procs", 1, "accepted for rollcall bench's flags; hbgen is one process")
	connectRate := fs.Float64("connect-rate", 2000, "sessions opened per second")
	heartbeat := fs.Duration("heartbeat", 5*time.Second, "heartbeat interval per session, once every session is connected")
	statusRate := fs.Float64("status-rate", 0, "must be 0: the raw load changes no status")
	subscribers := fs.Int("subscribers", 0, "must be 0: the raw load subscribes to nothing")
	fs.Int("watch", 0, "accepted for rollcall bench's flags (no subscribers)")
	silent := fs.Int("silent-failures", 0, "must be 0: the raw load has no silent sessions")
	fs.Duration("silent-after", 0, "accepted for rollcall bench's flags (no silent sessions)")
	probeRate := fs.Float64("probe-rate", 0, "must be 0: the raw load has no probe")
	warmup := fs.Duration("warmup", 5*time.Second, "heartbeats before the measured window")
	duration := fs.Duration("duration", 30*time.Second, "measured window")
	pids := fs.String("pids", "", "server process IDs whose CPU and RSS are read from /proc, comma-separated")
	format := fs.String("format", "json", "report format (json)")
	src := fs.String("src", "127.0.1.1", "first source address")
	ips := fs.Int("ips", 100, "consecutive source addresses to spread the connections over")
	if err := fs.Parse(args); err != nil {
		return benchConfig{}, err
	}
	c := benchConfig{sessions: *sessions, connectRate: *connectRate, heartbeat: *heartbeat,
		warmup: *warmup, duration: *duration, ips: max(*ips, 1)}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	case *statusRate != 0 || *subscribers != 0 || *silent != 0 || *probeRate != 0:
		return c, errors.New("the raw load sends hellos and heartbeats only: --status-rate, --subscribers, --silent-failures and --probe-rate must be 0")
	case *format != "json":
		return c, fmt.Errorf("--format %q: the raw load reports json only", *format)
	case c.sessions <= 0 || c.connectRate <= 0 || c.heartbeat <= 0 || c.duration <= 0 || c.warmup < 0:
		return c, errors.New("--sessions, --connect-rate, --heartbeat and --duration must be positive, --warmup not negative")
	}
	for a := range strings.SplitSeq(*addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.addrs = append(c.addrs, a)
		}
	}
	if len(c.addrs) == 0 {
		return c, errors.New("--addrs: no address")
	}
	for p := range strings.SplitSeq(*pids, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return c, fmt.Errorf("--pids: %q is not a process ID", p)
		}
		c.pids = append(c.pids, n)
	}
	var err error
	if c.src, err = netip.ParseAddr(*src); err != nil {
		return c, fmt.Errorf("--src: %w", err)
	}
	return c, nil
}

// runBench opens the sessions at the connect rate, each homed on
// addrs[i % len(addrs)], then heartbeats every one of them every
// c.heartbeat, and after c.warmup measures the servers' CPU over
// c.duration. It writes a `rollcall bench --format json` report to out:
// sessions, heartbeats sent, the servers' CPU and RSS; nothing it does
// not measure (status changes, propagation, offline detection).
func runBench(ctx context.Context, c benchConfig, out, log io.Writer) error {
	var rep bench.Report
	rep.Config = bench.RunConfig{Addrs: c.addrs, Transport: "tcp", Sessions: c.sessions, Procs: 1,
		ConnectRate: c.connectRate, HeartbeatMS: c.heartbeat.Milliseconds(), WarmupS: c.warmup.Seconds(), DurationS: c.duration.Seconds()}
	rep.Sessions.Requested = c.sessions
	rep.Server.PIDs = c.pids
	before, _ := bench.SampleAll("/proc", c.pids)
	rep.Server.RSSBeforeBytes = before.RSSBytes

	conns, errs := dialAll(ctx, c)
	defer closeAll(conns)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	rep.Sessions.Errors = errs
	for _, nc := range conns {
		if nc != nil {
			rep.Sessions.Established++
		}
	}
	rep.Sessions.Failed = c.sessions - rep.Sessions.Established
	fmt.Fprintf(log, "hbgen: %d of %d sessions established\n", rep.Sessions.Established, c.sessions)
	if rep.Sessions.Established == 0 {
		return fmt.Errorf("no session established: %v", errs)
	}
	after, _ := bench.SampleAll("/proc", c.pids)
	rep.Server.RSSAfterConnectBytes = after.RSSBytes
	rep.Server.RSSPerSessionBytes = float64(after.RSSBytes-before.RSSBytes) / float64(rep.Sessions.Established)

	hb := &heartbeater{conns: conns, interval: c.heartbeat}
	hbCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); hb.run(hbCtx) }()
	defer func() { stop(); <-done }()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.warmup):
	}
	sent0, lost0, t0 := hb.sent.Load(), hb.lost.Load(), time.Now()
	cpu0, ok0 := bench.SampleAll("/proc", c.pids)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.duration):
	}
	sent1, lost1, elapsed := hb.sent.Load(), hb.lost.Load(), time.Since(t0)
	cpu1, ok1 := bench.SampleAll("/proc", c.pids)
	rep.Duration = elapsed.Seconds()
	rep.Sessions.Lost = lost1 - lost0
	rep.Heartbeats.IntervalMS = c.heartbeat.Milliseconds()
	rep.Heartbeats.Sent = sent1 - sent0
	rep.Heartbeats.PerSec = float64(rep.Heartbeats.Sent) / rep.Duration
	rep.Server.RSSEndBytes = cpu1.RSSBytes
	if len(c.pids) > 0 && ok0 && ok1 {
		cs := cpu1.CPUSeconds - cpu0.CPUSeconds
		rep.Server.CPUCoreSeconds = &cs
		if rep.Heartbeats.Sent > 0 {
			us := cs / float64(rep.Heartbeats.Sent) * 1e6
			rep.Server.CPUPerHeartbeatUS = &us
		}
	}
	fmt.Fprintf(log, "hbgen: %d heartbeats in %.1f s (%.0f/s), %d connections lost\n",
		rep.Heartbeats.Sent, rep.Duration, rep.Heartbeats.PerSec, rep.Sessions.Lost)
	return json.NewEncoder(out).Encode(&rep)
}

// dialAll opens c.sessions sessions at c.connectRate, each said hello
// and welcomed, from source addresses spread over c.ips addresses. A
// session that fails is left nil and its error counted.
func dialAll(ctx context.Context, c benchConfig) ([]net.Conn, map[string]int) {
	sources := make([]netip.Addr, c.ips)
	sources[0] = c.src
	for i := 1; i < len(sources); i++ {
		sources[i] = sources[i-1].Next()
	}
	conns := make([]net.Conn, c.sessions)
	errs := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c.sessions {
		at := start.Add(time.Duration(float64(i) / c.connectRate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return conns, errs
			case <-time.After(d):
			}
		}
		wg.Go(func() {
			nc, err := dialSession(ctx, c.addrs[i%len(c.addrs)], sources[i%len(sources)], "hb"+strconv.Itoa(i))
			if err != nil {
				mu.Lock()
				if k := err.Error(); len(errs) < 8 || errs[k] > 0 {
					errs[k]++
				}
				mu.Unlock()
				return
			}
			conns[i] = nc
		})
	}
	wg.Wait()
	return conns, errs
}

// heartbeater writes a plain heartbeat to every connection once per
// interval, spread over it in slots.
type heartbeater struct {
	conns      []net.Conn
	interval   time.Duration
	sent, lost atomic.Uint64
}

// run heartbeats until ctx ends: every tick a hundredth of the sessions,
// as fast as it can write when the interval is shorter than that takes.
func (h *heartbeater) run(ctx context.Context) {
	const slots = 100
	tick := time.NewTicker(max(h.interval/slots, time.Microsecond))
	defer tick.Stop()
	line := []byte("{\"op\":\"hb\"}\n")
	for slot := 0; ; slot = (slot + 1) % slots {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for i := slot; i < len(h.conns); i += slots {
			nc := h.conns[i]
			if nc == nil {
				continue
			}
			_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := nc.Write(line); err != nil {
				h.lost.Add(1)
				nc.Close()
				h.conns[i] = nil
				continue
			}
			h.sent.Add(1)
		}
	}
}
