// Command redis-baseline runs the Redis TTL baseline gateway
// (baseline/redisgw): presence the way it is commonly built on Redis,
// speaking Rollcall's client protocol subset, for side-by-side load tests
// (docs/bench-compare.md). Several of them share one redis-server.
//
//	redis-baseline --addr 127.0.0.1:7500 --redis 127.0.0.1:6379 --name rgw1
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	_ "net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/benchlab/baseline/redisgw"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "redis-baseline:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("redis-baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg redisgw.Config
	addr := fs.String("addr", "127.0.0.1:7500", "client address (TCP, JSON lines)")
	fs.StringVar(&cfg.Redis, "redis", "127.0.0.1:6379", "redis-server address")
	fs.IntVar(&cfg.DB, "db", 0, "Redis database")
	fs.StringVar(&cfg.Name, "name", "redis-gw", "gateway name (in welcome and sessions)")
	fs.StringVar(&cfg.Prefix, "prefix", "rc:", "prefix of every Redis key and channel")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "heartbeat interval told to clients (default 5s)")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "session TTL after the last request (default 15s)")
	fs.IntVar(&cfg.Pipelines, "pipelines", 0, "heartbeat pipelines in flight at once (default 4)")
	fs.IntVar(&cfg.MaxBatch, "max-batch", 0, "writes per pipeline at most (default 1024)")
	fs.DurationVar(&cfg.Linger, "linger", 0, "how long a batch waits for more writes after its first (default 2ms)")
	fs.BoolVar(&cfg.SetNotify, "set-notify", false, "run CONFIG SET notify-keyspace-events Ex at start")
	debug := fs.Bool("debug", false, "debug logging")
	pprofAddr := fs.String("pprof", "", "address serving /debug/pprof (default: none)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	zc := zap.NewProductionConfig()
	if *debug {
		zc.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	log, err := zc.Build()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer func() { _ = log.Sync() }()
	cfg.Logger = log
	if *pprofAddr != "" {
		srv := &http.Server{Addr: *pprofAddr, ReadHeaderTimeout: 10 * time.Second} // DefaultServeMux: net/http/pprof
		go func() { log.Info("pprof", zap.Error(srv.ListenAndServe())) }()
		defer srv.Close()
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	g, err := redisgw.New(ctx, *addr, cfg)
	if err != nil {
		return err
	}
	return g.Serve(ctx)
}
