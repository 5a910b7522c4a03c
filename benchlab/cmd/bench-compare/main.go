// Command bench-compare runs Rollcall, the Redis TTL baseline and the
// Centrifuge baseline side by side under one presence load, `rollcall
// bench` (for Centrifuge `centrifuge-baseline load` with the same
// figures; baseline/compare, docs/bench-compare.md).
//
//	bench-compare run [--systems rollcall,redis,centrifuge] [--sessions 10000] [--heartbeat 5s] [--rounds 3] [--floor] ...
//	bench-compare run --rates 20000,50000,max [--sessions 19000] [--rounds 3] ...
//	bench-compare run --raw --rates 20000,50000,max [--sessions 19000] [--gateways 1] [--rounds 3] ...
//	bench-compare floor node --tcp ADDR --udp ADDR --peers UDP,UDP
//	bench-compare floor probe --nodes TCP,TCP,TCP [--rate 20] [--delay 0s] [--duration 20s]
//	bench-compare run --scenario backend [--systems rollcall,redis] [--users 100000] [--heartbeat 5s] [--timeout 15s] ...
//	bench-compare hold --system rollcall|redis --addr ADDR [--users 100000] [--refresh 5s] [--ttl 15s]
//
// run prints progress and a summary to stderr and the result (every
// sample, the medians, the ratios) as JSON to stdout. With --rates it
// runs the whole alternation once per heartbeat rate, prints a summary
// per rate and a line per rate at the end, and its JSON is
// {"rates": [{"rate", "heartbeat", "result"}, ...]}. floor runs a part
// of the propagation floor that run --floor measures beside every round
// (bench.ServeFloorNode, bench.RunFloorProbe); its probe prints its
// report as JSON to stdout. hold runs the backend scenario's worker
// (compare.Hold), which run --scenario backend starts on the load CPUs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rollcall/rollcall/bench"
	"github.com/rollcall/rollcall/benchlab/baseline/compare"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-compare:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "floor" {
		return runFloor(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "hold" {
		return runHold(ctx, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "run" {
		return fmt.Errorf("usage: bench-compare run [flags] | bench-compare floor node|probe [flags] | bench-compare hold [flags]")
	}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg compare.Config
	fs.StringVar(&cfg.Rollcall, "rollcall", "bin/rollcall", "rollcall binary (the agents and the default load)")
	fs.StringVar(&cfg.Baseline, "baseline", "bin/redis-baseline", "redis-baseline binary")
	fs.StringVar(&cfg.Centrifuge, "centrifuge", "bin/centrifuge-baseline", "centrifuge-baseline binary (the Centrifuge nodes and their default load)")
	centrifugeLoad := fs.String("centrifuge-load", "", "the Centrifuge system's load argv before its flags, space-separated; it takes centrifuge-baseline load's flags and prints its JSON result (default: '<centrifuge> load')")
	fs.StringVar(&cfg.RedisServer, "redis-server", "", "redis-server binary (default: from PATH, installed with apt when root)")
	systems := fs.String("systems", "rollcall,redis", "systems measured, in each round's order (rollcall, redis, centrifuge); ratios are rollcall / each other")
	fs.IntVar(&cfg.Gateways, "gateways", 3, "gateways per system")
	load := fs.String("load", "", "load generator argv before its flags, space-separated; it takes rollcall bench's flags and prints its JSON report (default: '<rollcall> bench --dev'; with --raw '<hbgen> bench')")
	fs.BoolVar(&cfg.Raw, "raw", false, "the load is plain heartbeats from the raw generator (--hbgen): hellos, then heartbeats once every session is connected, nothing else (no status changes, subscribers, probe or silent sessions); cheap enough that the servers saturate before the load core; rollcall and redis only")
	fs.StringVar(&cfg.Hbgen, "hbgen", "bin/hbgen", "the raw generator's binary (benchlab/internal/hbgen), for --raw")
	fs.IntVar(&cfg.Sessions, "sessions", 10000, "sessions")
	fs.IntVar(&cfg.Procs, "procs", 2, "load generator processes")
	fs.Float64Var(&cfg.ConnectRate, "connect-rate", 2000, "sessions opened per second")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "heartbeat interval (default 5s)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "session timeout of both systems (default 3x heartbeat)")
	fs.Float64Var(&cfg.ProbeRate, "probe-rate", 0, "status changes per second of the load's probe, a generator of its own at raised priority measuring propagation (default 20; negative: none)")
	fs.Float64Var(&cfg.StatusRate, "status-rate", 0, "status changes per second in all (default 10; negative: none)")
	fs.IntVar(&cfg.Subscribers, "subscribers", 0, "subscribing sessions (default 100; negative: none)")
	fs.IntVar(&cfg.Watch, "watch", 1000, "users each subscriber watches")
	fs.IntVar(&cfg.SilentFailures, "silent-failures", 0, "sessions that go quiet without closing, measuring offline detection")
	fs.DurationVar(&cfg.SilentAfter, "silent-after", 0, "when, into the window, they go quiet (default 1s)")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "wait between all sessions connected and the window, heartbeats flowing (default 5s; negative: none)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "measured window per run (default 30s)")
	fs.Float64Var(&cfg.RequestRate, "request-rate", 0, "the agents' --request-rate (default: theirs; the baseline has no limit)")
	agentArgs := fs.String("agent-args", "", "more flags for every Rollcall agent, space-separated, after bench-compare's own (a later flag wins), e.g. '--io-uring'")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "runs per system, alternating, each on fresh servers")
	fs.StringVar(&cfg.ServerCPUs, "server-cpus", "0", "taskset CPUs of the servers")
	fs.StringVar(&cfg.LoadCPUs, "load-cpus", "1", "taskset CPUs of the load")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the processes' logs (default: a temporary one)")
	fs.StringVar(&cfg.Scenario, "scenario", compare.ScenarioLoad, "load: rollcall bench's client load; backend: a backend worker holds --users users present (tracked sessions against Redis keys refreshed by an epoch-guarded write (Lua, EVALSHA, pipelined) every --heartbeat, TTL --timeout), server CPU per 10,000 users, then kill -9 of the holder and the time until a reader sees them all offline")
	fs.IntVar(&cfg.Users, "users", 100000, "backend scenario: users the backend worker holds present")
	fs.BoolVar(&cfg.Floor, "floor", false, "measure the propagation floor beside every round: bare relays on the server CPUs, probed during the window")
	ratesFlag := fs.String("rates", "", "heartbeat rates measured in turn, each with --rounds alternated rounds of its own, comma-separated: heartbeats per second in all (the heartbeat interval is --sessions over it) or max (--max-heartbeat); replaces --heartbeat, and the timeout defaults to 15s")
	maxHeartbeat := fs.Duration("max-heartbeat", 20*time.Millisecond, "the heartbeat interval of the rate max: an offered rate far above what the load can write, so that it runs flat out")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var rates []rate
	if *ratesFlag != "" {
		sessions := cfg.Sessions
		if sessions <= 0 {
			sessions = 10000 // compare.Config's default
		}
		var err error
		if rates, err = parseRates(*ratesFlag, sessions, *maxHeartbeat); err != nil {
			return fmt.Errorf("--rates: %w", err)
		}
		if cfg.Heartbeat != 0 {
			return errors.New("--rates sets the heartbeat interval of each run: give --heartbeat or --rates, not both")
		}
		if cfg.Timeout == 0 {
			cfg.Timeout = 15 * time.Second
		}
	}
	if *load != "" {
		cfg.Load = strings.Fields(*load)
	}
	cfg.AgentArgs = strings.Fields(*agentArgs)
	if *centrifugeLoad != "" {
		cfg.CentrifugeLoad = strings.Fields(*centrifugeLoad)
	}
	cfg.Systems = strings.Split(*systems, ",")
	if cfg.Floor {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--floor: %w", err)
		}
		cfg.FloorCommand = []string{exe, "floor"}
	}
	cfg.Log = stderr
	if cfg.Scenario == compare.ScenarioBackend {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("--scenario backend: %w", err)
		}
		cfg.HoldCommand = []string{exe, "hold"}
		res, err := compare.RunBackend(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "rollcall: %s\n", res.Version)
		writeFigures(stderr, cfg.Systems, res.Figures)
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if rates == nil {
		res, err := compare.Run(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "rollcall: %s\n", res.Version)
		writeFigures(stderr, cfg.Systems, res.Figures)
		return enc.Encode(res)
	}
	var out struct {
		Rates []rateResult `json:"rates"`
	}
	for _, r := range rates {
		c := cfg
		c.Heartbeat = r.heartbeat
		if cfg.Dir != "" {
			c.Dir = filepath.Join(cfg.Dir, "rate-"+r.name)
		}
		fmt.Fprintf(stderr, "== rate %s (heartbeat %s)\n", r.name, r.heartbeat)
		res, err := compare.Run(ctx, c)
		if err != nil {
			// What the rates before it measured is printed still.
			if len(out.Rates) > 0 {
				writeRates(stderr, cfg.Systems, out.Rates)
				_ = enc.Encode(out)
			}
			return fmt.Errorf("rate %s: %w", r.name, err)
		}
		fmt.Fprintf(stderr, "rollcall: %s\n", res.Version)
		writeFigures(stderr, cfg.Systems, res.Figures)
		out.Rates = append(out.Rates, rateResult{Rate: r.name, Heartbeat: r.heartbeat.String(), Result: res})
	}
	fmt.Fprintln(stderr, "== per rate: medians over the rounds; ratios per round, median (min-max)")
	writeRates(stderr, cfg.Systems, out.Rates)
	return enc.Encode(out)
}

// rate is one heartbeat rate of --rates.
type rate struct {
	name      string // as given: heartbeats per second in all, or max
	heartbeat time.Duration
}

// rateResult is the comparison at one rate of --rates.
type rateResult struct {
	Rate      string         `json:"rate"`
	Heartbeat string         `json:"heartbeat"`
	Result    compare.Result `json:"result"`
}

// parseRates reads --rates: heartbeats per second in all over sessions
// sessions (a heartbeat interval of sessions/rate seconds, to the
// millisecond), or max (maxHeartbeat).
func parseRates(spec string, sessions int, maxHeartbeat time.Duration) ([]rate, error) {
	var rates []rate
	for _, f := range strings.Split(spec, ",") {
		f = strings.TrimSpace(f)
		if f == "max" {
			if maxHeartbeat <= 0 {
				return nil, errors.New("max needs a positive --max-heartbeat")
			}
			rates = append(rates, rate{name: f, heartbeat: maxHeartbeat})
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is neither a positive number of heartbeats per second nor max", f)
		}
		hb := time.Duration(float64(sessions) / v * float64(time.Second)).Round(time.Millisecond)
		if hb < time.Millisecond {
			return nil, fmt.Errorf("%s heartbeats/s over %d sessions is a heartbeat of under 1 ms", f, sessions)
		}
		rates = append(rates, rate{name: f, heartbeat: hb})
	}
	return rates, nil
}

// writeRates writes a line per rate: heartbeats per second and per
// core-second and RSS per session, each system's median and the ratio of
// the reference system to each other one.
func writeRates(w io.Writer, systems []string, rates []rateResult) {
	show := []struct{ metric, label string }{
		{"heartbeats_per_second", "hb/s"},
		{"heartbeats_per_core_second", "hb/core-s"},
		{"rss_per_session_bytes", "rss B/session"},
	}
	for _, r := range rates {
		fmt.Fprintf(w, "rate %-6s heartbeat %-6s", r.Rate, r.Heartbeat)
		for _, sh := range show {
			i := slices.IndexFunc(r.Result.Figures, func(f compare.Figure) bool { return f.Metric == sh.metric })
			if i < 0 {
				continue
			}
			f := r.Result.Figures[i]
			fmt.Fprintf(w, "  %s", sh.label)
			for _, s := range systems {
				if m, ok := f.Median[s]; ok {
					fmt.Fprintf(w, " %s %.0f", s, m)
				} else {
					fmt.Fprintf(w, " %s -", s)
				}
			}
			for _, q := range f.Ratios {
				fmt.Fprintf(w, " %s/%s %.2f (%.2f-%.2f)", q.Of, q.To, q.Median, q.Min, q.Max)
			}
		}
		fmt.Fprintln(w)
	}
}

// runHold runs a backend worker of the backend scenario until ctx ends
// (compare.Hold); it prints "ready N" once its users are present.
func runHold(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c compare.HoldConfig
	fs.StringVar(&c.System, "system", "", "rollcall (track every user on one connection) or redis (an epoch-guarded SET key EPOCH:w1 PX ttl for every user, every --refresh)")
	fs.StringVar(&c.Addr, "addr", "", "the gateway's client address, or the redis-server's")
	fs.IntVar(&c.Users, "users", 100000, "users held present")
	fs.DurationVar(&c.Refresh, "refresh", 5*time.Second, "redis: refresh period")
	fs.DurationVar(&c.TTL, "ttl", 15*time.Second, "redis: the keys' TTL (whole seconds)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.Ready = stdout
	return compare.Hold(ctx, c)
}

// runFloor runs a floor node until ctx ends, or a floor probe.
func runFloor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "node" && args[0] != "probe") {
		return fmt.Errorf("usage: bench-compare floor node|probe [flags]")
	}
	fs := flag.NewFlagSet("floor "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	tcp := fs.String("tcp", "", "node: the TCP address its clients connect to")
	udp := fs.String("udp", "", "node: the UDP address it relays from")
	peers := fs.String("peers", "", "node: the other nodes' UDP addresses, comma-separated")
	nodes := fs.String("nodes", "", "probe: the nodes' TCP addresses, comma-separated")
	rate := fs.Float64("rate", 20, "probe: messages per second, through each node in turn")
	delay := fs.Duration("delay", 0, "probe: wait before the first message")
	duration := fs.Duration("duration", 20*time.Second, "probe: how long it sends")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if args[0] == "node" {
		if *tcp == "" || *udp == "" || *peers == "" {
			return fmt.Errorf("floor node: want --tcp, --udp and --peers")
		}
		return bench.ServeFloorNode(ctx, *tcp, *udp, strings.Split(*peers, ","))
	}
	if *nodes == "" {
		return fmt.Errorf("floor probe: want --nodes")
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(*delay):
	}
	rep, err := bench.RunFloorProbe(ctx, strings.Split(*nodes, ","), *rate, *duration)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(rep)
}

// writeFigures writes a line per figure: each system's median ("-": not
// measured) and each ratio's median and spread.
func writeFigures(w io.Writer, systems []string, figs []compare.Figure) {
	for _, f := range figs {
		fmt.Fprintf(w, "%-30s", f.Metric)
		for _, s := range systems {
			if m, ok := f.Median[s]; ok {
				fmt.Fprintf(w, "  %s %.4g", s, m)
			} else {
				fmt.Fprintf(w, "  %s -", s)
			}
		}
		for _, r := range f.Ratios {
			fmt.Fprintf(w, "  %s/%s %.2f (%.2f-%.2f over %d rounds)", r.Of, r.To, r.Median, r.Min, r.Max, len(r.Rounds))
		}
		fmt.Fprintln(w)
	}
}
