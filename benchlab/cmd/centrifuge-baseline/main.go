// Command centrifuge-baseline is a minimal Centrifuge presence server and
// its load generator (baseline/centrifugebase), to compare Rollcall
// against (docs/bench-compare.md).
//
//	centrifuge-baseline serve --addr 127.0.0.1:8000 [--redis 127.0.0.1:6379]
//	centrifuge-baseline load --url ws://127.0.0.1:8000/connection/websocket --sessions 10000 --pids PID
//
// load prints one JSON object (centrifugebase.LoadResult): the servers'
// RSS per session (VmRSS after all sessions subscribed minus before, over
// the sessions) and their CPU while the sessions stay connected, the
// server pings the clients answered meanwhile, the status changes
// published (--status-rate) and their propagation to the subscribers on
// other servers (--subscribers, --watch).
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

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/benchlab/baseline/centrifugebase"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "centrifuge-baseline:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: centrifuge-baseline serve|load [flags]")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stderr)
	case "load":
		return load(ctx, args[1:], stdout, stderr)
	}
	return fmt.Errorf("unknown command %q (want serve or load)", args[0])
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg centrifugebase.ServerConfig
	fs.StringVar(&cfg.Addr, "addr", "127.0.0.1:8000", "HTTP address (WebSocket at "+centrifugebase.Path+")")
	fs.StringVar(&cfg.Redis, "redis", "", "redis-server address: Redis presence manager and broker (default: in memory)")
	fs.DurationVar(&cfg.PingInterval, "ping", 0, "server ping interval, the heartbeat (default 5s)")
	fs.DurationVar(&cfg.PresenceUpdate, "presence-update", 0, "how often each connection refreshes its presence (default 5s)")
	fs.DurationVar(&cfg.PresenceTTL, "presence-ttl", 0, "how long the Redis presence manager keeps an entry not refreshed, whole seconds (default 60s)")
	fs.BoolVar(&cfg.PushJoinLeave, "push-join-leave", false, "push join/leave events to room members")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := zap.NewProduction()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer func() { _ = log.Sync() }()
	cfg.Logger = log
	s, err := centrifugebase.NewServer(cfg)
	if err != nil {
		return err
	}
	return s.Serve(ctx)
}

func load(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := loadConfig(args, stderr)
	if err != nil {
		return err
	}
	r, err := centrifugebase.Load(ctx, cfg)
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(r)
}

// loadConfig parses load's flags.
func loadConfig(args []string, stderr io.Writer) (centrifugebase.LoadConfig, error) {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg centrifugebase.LoadConfig
	urls := fs.String("url", "ws://127.0.0.1:8000"+centrifugebase.Path, "server WebSocket URLs, comma-separated; the sessions connect to them in turn")
	fs.IntVar(&cfg.Sessions, "sessions", 1000, "clients to connect")
	fs.IntVar(&cfg.Rooms, "rooms", 100, "presence channels the clients spread over")
	fs.IntVar(&cfg.Concurrency, "concurrency", 200, "connects in flight at most")
	fs.Float64Var(&cfg.ConnectRate, "connect-rate", 0, "sessions starting to connect per second (default: as concurrency allows)")
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", 0, "wait, after the last connect started, for the sessions not subscribed yet (default 30s)")
	fs.IntVar(&cfg.Subscribers, "subscribers", 0, "sessions also subscribing to the status channels of the rooms of --watch users")
	fs.IntVar(&cfg.Watch, "watch", 1000, "users each subscriber watches")
	fs.Float64Var(&cfg.StatusRate, "status-rate", 0, "status changes published per second in all during the hold")
	fs.DurationVar(&cfg.Hold, "hold", 0, "how long all stay connected, server CPU measured: the window (default 30s)")
	fs.DurationVar(&cfg.Settle, "settle", 0, "wait after the last subscribe before sampling RSS and starting the hold (default 2s; negative: none)")
	pids := fs.String("pids", "", "server processes to sample (RSS, CPU; summed), comma-separated")
	fs.IntVar(&cfg.PID, "pid", 0, "one more server process to sample")
	fs.StringVar(&cfg.User, "user", "u", "user id prefix")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("load: unexpected arguments %q", fs.Args())
	}
	for u := range strings.SplitSeq(*urls, ",") {
		if u != "" {
			cfg.URLs = append(cfg.URLs, u)
		}
	}
	for p := range strings.SplitSeq(*pids, ",") {
		if p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return cfg, fmt.Errorf("load: --pids: %q is not a process id", p)
		}
		cfg.PIDs = append(cfg.PIDs, n)
	}
	return cfg, nil
}
