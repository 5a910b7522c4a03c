// Command bench-compare runs Rollcall and the Redis TTL baseline side by
// side under one presence load (bench/baseline/compare,
// docs/bench-compare.md).
//
//	bench-compare run [--load 'bin/rollcall bench'] [--sessions 10000 ...]
//	bench-compare load --addrs A,B --sessions N --heartbeat 5s --status-rate R --subscribers S --duration D --format json --pids P,Q
//
// run prints progress to stderr and the result as JSON to stdout. load is
// a minimal load generator with the flags of `rollcall bench`.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rollcall/rollcall/bench/baseline/compare"
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
	if len(args) == 0 {
		return fmt.Errorf("usage: bench-compare run|load [flags]")
	}
	switch args[0] {
	case "run":
		return runCompare(ctx, args[1:], stdout, stderr)
	case "load":
		return runLoad(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q (want run or load)", args[0])
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg compare.Config
	fs.StringVar(&cfg.Rollcall, "rollcall", "bin/rollcall", "rollcall binary")
	fs.StringVar(&cfg.Baseline, "baseline", "bin/redis-baseline", "redis-baseline binary")
	fs.StringVar(&cfg.RedisServer, "redis-server", "", "redis-server binary (default: from PATH, installed with apt when root)")
	fs.IntVar(&cfg.Gateways, "gateways", 3, "gateways per system")
	load := fs.String("load", "", "load generator argv before its flags, space-separated (default: this program's load; 'bin/rollcall bench' for rollcall bench)")
	fs.IntVar(&cfg.Sessions, "sessions", 10000, "sessions")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "heartbeat interval (default 5s; session timeout 3x)")
	fs.Float64Var(&cfg.StatusRate, "status-rate", 0, "status changes per second in all (default 10; negative: none)")
	fs.IntVar(&cfg.Subscribers, "subscribers", 0, "subscribing sessions (default 100; negative: none)")
	fs.DurationVar(&cfg.Duration, "duration", 0, "measured window per run (default 30s)")
	fs.IntVar(&cfg.Procs, "procs", 1, "load processes (passed to the load as --procs)")
	fs.IntVar(&cfg.Rounds, "rounds", 3, "runs per system, alternating")
	fs.StringVar(&cfg.ServerCPUs, "server-cpus", "0", "taskset CPUs of the servers")
	fs.StringVar(&cfg.LoadCPUs, "load-cpus", "1", "taskset CPUs of the load")
	fs.StringVar(&cfg.Dir, "dir", "", "directory for the processes' logs (default: a temporary one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *load != "" {
		cfg.Load = strings.Fields(*load)
	}
	cfg.Log = stderr
	res, err := compare.Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "median heartbeats per core-second: rollcall %.0f, redis baseline %.0f; ratio %.2f\n",
		res.Median["rollcall"], res.Median["redis"], res.Ratio)
	fmt.Fprintf(stderr, "RSS per session (peak minus before, first round, all processes of the system): rollcall %.0f B, redis baseline %.0f B\n",
		res.RSS["rollcall"], res.RSS["redis"])
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg compare.LoadConfig
	addrs := fs.String("addrs", "127.0.0.1:7400", "comma-separated gateway client addresses")
	fs.IntVar(&cfg.Sessions, "sessions", 1000, "sessions")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "heartbeat interval (default 5s)")
	fs.Float64Var(&cfg.StatusRate, "status-rate", 0, "status changes per second in all")
	fs.IntVar(&cfg.Subscribers, "subscribers", 0, "sessions that each subscribe to 10 users")
	fs.DurationVar(&cfg.Duration, "duration", 0, "measured window (default 30s)")
	procs := fs.Int("procs", 1, "load processes (only 1 here)")
	format := fs.String("format", "json", "output format (json)")
	pids := fs.String("pids", "", "comma-separated server PIDs whose CPU is summed over the window")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *procs != 1 || *format != "json" {
		return fmt.Errorf("this load runs in one process and prints json (use rollcall bench for more)")
	}
	cfg.Addrs = strings.Split(*addrs, ",")
	for p := range strings.SplitSeq(*pids, ",") {
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("--pids: %q: %w", p, err)
		}
		cfg.PIDs = append(cfg.PIDs, n)
	}
	r, err := compare.Load(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}
