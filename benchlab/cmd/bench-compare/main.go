// Command bench-compare runs Rollcall, the Redis TTL baseline and the
// Centrifuge baseline side by side under one presence load, `rollcall
// bench` (for Centrifuge `centrifuge-baseline load` with the same
// figures; baseline/compare, docs/bench-compare.md).
//
//	bench-compare run [--systems rollcall,redis,centrifuge] [--sessions 10000] [--heartbeat 5s] [--rounds 3] [--floor] ...
//	bench-compare floor node --tcp ADDR --udp ADDR --peers UDP,UDP
//	bench-compare floor probe --nodes TCP,TCP,TCP [--rate 20] [--delay 0s] [--duration 20s]
//	bench-compare run --scenario backend [--systems rollcall,redis] [--users 100000] [--heartbeat 5s] [--timeout 15s] ...
//	bench-compare hold --system rollcall|redis --addr ADDR [--users 100000] [--refresh 5s] [--ttl 15s]
//
// run prints progress and a summary to stderr and the result (every
// sample, the medians, the ratios) as JSON to stdout. floor runs a part
// of the propagation floor that run --floor measures beside every round
// (bench.ServeFloorNode, bench.RunFloorProbe); its probe prints its
// report as JSON to stdout. hold runs the backend scenario's worker
// (compare.Hold), which run --scenario backend starts on the load CPUs.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	load := fs.String("load", "", "load generator argv before its flags, space-separated; it takes rollcall bench's flags and prints its JSON report (default: '<rollcall> bench --dev')")
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
	fs.IntVar(&cfg.Rounds, "rounds", 3, "runs per system, alternating, each on fresh servers")
	fs.StringVar(&cfg.ServerCPUs, "server-cpus", "0", "taskset CPUs of the servers")
	fs.StringVar(&cfg.LoadCPUs, "load-cpus", "1", "taskset CPUs of the load")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the processes' logs (default: a temporary one)")
	fs.StringVar(&cfg.Scenario, "scenario", compare.ScenarioLoad, "load: rollcall bench's client load; backend: a backend worker holds --users users present (tracked sessions against Redis keys refreshed with SET EX every --heartbeat, TTL --timeout), server CPU per 10,000 users, then kill -9 of the holder and the time until a reader sees them all offline")
	fs.IntVar(&cfg.Users, "users", 100000, "backend scenario: users the backend worker holds present")
	fs.BoolVar(&cfg.Floor, "floor", false, "measure the propagation floor beside every round: bare relays on the server CPUs, probed during the window")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *load != "" {
		cfg.Load = strings.Fields(*load)
	}
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
	res, err := compare.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "rollcall: %s\n", res.Version)
	writeFigures(stderr, cfg.Systems, res.Figures)
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// runHold runs a backend worker of the backend scenario until ctx ends
// (compare.Hold); it prints "ready N" once its users are present.
func runHold(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("hold", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c compare.HoldConfig
	fs.StringVar(&c.System, "system", "", "rollcall (track every user on one connection) or redis (SET key EX ttl for every user, every --refresh)")
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
