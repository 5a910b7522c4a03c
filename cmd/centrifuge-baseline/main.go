// Command centrifuge-baseline is a minimal Centrifuge presence server and
// its load generator (bench/baseline/centrifugebase), to compare Rollcall
// against (docs/bench-compare.md).
//
//	centrifuge-baseline serve --addr 127.0.0.1:8000 [--redis 127.0.0.1:6379]
//	centrifuge-baseline load --url ws://127.0.0.1:8000/connection/websocket --sessions 10000 --pid PID
//
// load prints one JSON object: the server's RSS per session (VmRSS after
// all sessions subscribed minus before, over the sessions) and its CPU
// while they stay connected.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/bench/baseline/centrifugebase"
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
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg centrifugebase.LoadConfig
	fs.StringVar(&cfg.URL, "url", "ws://127.0.0.1:8000"+centrifugebase.Path, "server WebSocket URL")
	fs.IntVar(&cfg.Sessions, "sessions", 1000, "clients to connect")
	fs.IntVar(&cfg.Rooms, "rooms", 100, "presence channels the clients spread over")
	fs.IntVar(&cfg.Concurrency, "concurrency", 200, "connects in flight at most")
	fs.DurationVar(&cfg.Hold, "hold", 0, "how long all stay connected, server CPU measured (default 30s)")
	fs.DurationVar(&cfg.Settle, "settle", 0, "wait after the last subscribe before sampling RSS (default 2s)")
	fs.IntVar(&cfg.PID, "pid", 0, "server process to sample (RSS, CPU); 0: none")
	fs.StringVar(&cfg.User, "user", "u", "user id prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	r, err := centrifugebase.Load(ctx, cfg)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	return enc.Encode(r)
}
