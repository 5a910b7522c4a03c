package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/rollcall/rollcall/bench"
	"github.com/rollcall/rollcall/internal/tlsconf"
)

// sessionsPerProc is how many sessions one generator process holds at
// most by default: below the 20,000 open files a process may have, with
// room for the process's own.
const sessionsPerProc = 15_000

// runBench is `rollcall bench`: a load generator speaking the client
// protocol to running gateways, and a report of what it measured
// (docs/bench.md). `rollcall bench --worker` is one generator process,
// started by the bench itself.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && args[0] == "--worker" {
		log, _, err := newLogger("warn", "console", stderr)
		if err != nil {
			return err
		}
		return bench.RunWorker(ctx, os.Stdin, stdout, log)
	}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg bench.Config
	addrs := fs.String("addrs", "127.0.0.1:7400", "comma-separated gateway client addresses (host:port; with --transport ws, host:port of --http-addr or ws:// URLs)")
	fs.IntVar(&cfg.Sessions, "sessions", 1000, "sessions to open")
	fs.Float64Var(&cfg.ConnectRate, "connect-rate", 500, "sessions opened per second, in total")
	fs.IntVar(&cfg.Procs, "procs", 0, fmt.Sprintf("generator processes to spread the sessions over (default: one per %d sessions)", sessionsPerProc))
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", 0, "heartbeat interval (default: the one the gateways tell clients)")
	fs.Float64Var(&cfg.StatusRate, "status-rate", 100, "status changes per second, in total (0: none)")
	fs.IntVar(&cfg.Subscribers, "subscribers", 10, "sessions that subscribe to other sessions' users, measuring propagation (0: none; by default at most half the sessions)")
	fs.IntVar(&cfg.Watch, "watch", 1000, "users each subscriber subscribes to")
	fs.IntVar(&cfg.SilentFailures, "silent-failures", 0, "sessions that stop writing without closing, measuring offline detection")
	fs.DurationVar(&cfg.SilentAfter, "silent-after", time.Second, "when, into the measured window, the silent failures go quiet")
	fs.Float64Var(&cfg.ProbeRate, "probe-rate", 0, "status changes per second of a probe: a generator process of its own, at raised scheduling priority, whose few sessions measure propagation apart from the load (0: none)")
	fs.IntVar(&cfg.ProbeSessions, "probe-sessions", 3, "the probe's sessions per gateway: one subscriber, the rest change status")
	fs.DurationVar(&cfg.Warmup, "warmup", 0, "wait between every session tried and the measured window, heartbeats flowing, for the servers to absorb the connects and subscriptions")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "the measured window, after every session was tried")
	fs.StringVar(&cfg.Transport, "transport", "tcp", "tcp, tls or ws")
	tlsFiles := clientTLSFlags(fs)
	fs.StringVar(&cfg.SecretFile, "secret-file", "", "file holding the agents' HS256 key (their --secret-file): each session presents a token minted with it")
	dev := fs.Bool("dev", false, "send no tokens (agents run with --dev)")
	pids := fs.String("pids", "", "comma-separated server process ids whose CPU and RSS are reported (default: the processes listening on --addrs' ports)")
	httpAddrs := fs.String("http-addrs", "", "comma-separated gateway HTTP addresses whose /metrics give server-counted heartbeats and gossip bytes (optional)")
	format := fs.String("format", "table", "table or json")
	plotFile := fs.String("plot", "", "also draw the round trip over time and the propagation CDF to this .svg file")
	tracked := fs.Int("tracked", 0, "instead of the load: one backend connection tracks this many sessions on the first of --addrs, holds them for --duration and closes; reports the sessions tracked, the gateway's memory per tracked session and how long ending them all took (the token of --secret-file gets the backend grant)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if *format != "table" && *format != "json" {
		return fmt.Errorf("--format %q: want table or json", *format)
	}
	if (cfg.SecretFile == "") == !*dev {
		return errors.New("need one of --secret-file (agents checking tokens) or --dev (agents with --dev)")
	}
	if *tracked < 0 {
		return errors.New("--tracked must not be negative")
	}
	if *tracked > 0 {
		return runTrackedBench(ctx, *tracked, cfg, *addrs, *httpAddrs, *pids, *tlsFiles, *format, stdout, stderr)
	}
	if cfg.Sessions <= 0 {
		return errors.New("--sessions must be positive")
	}
	if cfg.ConnectRate <= 0 {
		return errors.New("--connect-rate must be positive")
	}
	if cfg.StatusRate == 0 {
		cfg.StatusRate = -1
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case !given["subscribers"]:
		cfg.Subscribers = 0 // the default: 10, at most half the sessions
	case cfg.Subscribers == 0:
		cfg.Subscribers = -1
	}
	cfg.Addrs = splitList(*addrs)
	cfg.HTTPAddrs = splitList(*httpAddrs)
	cfg.TLS = *tlsFiles
	if cfg.Transport == "tls" {
		cfg.TLS.Enabled = true
	}
	if *pids != "" {
		for _, p := range splitList(*pids) {
			n, err := strconv.Atoi(p)
			if err != nil || n <= 0 {
				return fmt.Errorf("--pids: bad process id %q", p)
			}
			cfg.PIDs = append(cfg.PIDs, n)
		}
	}
	if cfg.Procs == 0 {
		cfg.Procs = (cfg.Sessions + sessionsPerProc - 1) / sessionsPerProc
	}
	log, _, err := newLogger("warn", "console", stderr)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if cfg.ProbeRate < 0 {
		return errors.New("--probe-rate must not be negative")
	}
	if cfg.Procs == 1 && cfg.ProbeRate == 0 {
		cfg.Spawn = bench.InProcess(log)
	} else {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this binary to start generators: %w", err)
		}
		cfg.Spawn = execWorker(exe, stderr)
		cfg.ProbePriority = true
	}
	tty := isTerminal(stderr)
	if tty {
		cfg.Progress = func(line string) { fmt.Fprintf(stderr, "\r%s\033[K", line) }
	}
	rep, err := bench.Run(ctx, cfg)
	if tty {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	if *format == "json" {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		return err
	}
	if *plotFile != "" {
		if err := rep.WritePlot(*plotFile); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s\n", *plotFile)
	}
	return nil
}

// execWorker starts generators as `exe bench --worker` processes, their
// stderr joined to ours.
func execWorker(exe string, stderr io.Writer) func(ctx context.Context, i int) (*bench.Worker, error) {
	return func(ctx context.Context, i int) (*bench.Worker, error) {
		cmd := exec.CommandContext(ctx, exe, "bench", "--worker")
		cmd.Stderr = prefixWriter{w: stderr, prefix: fmt.Sprintf("generator %d: ", i)}
		in, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		return &bench.Worker{In: in, Out: out, Wait: cmd.Wait, Kill: func() { _ = cmd.Process.Kill() }}, nil
	}
}

// prefixWriter prefixes each write (a generator's log line) with a name.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix+strings.TrimRight(string(b), "\n")+"\n"); err != nil {
		return 0, err
	}
	return len(b), nil
}

// runTrackedBench is bench --tracked.
func runTrackedBench(ctx context.Context, sessions int, cfg bench.Config, addrs, httpAddrs, pids string, tlsFiles tlsconf.ClientFiles,
	format string, stdout, stderr io.Writer) error {
	log, _, err := newLogger("warn", "console", stderr)
	if err != nil {
		return err
	}
	tc := bench.TrackedConfig{Addr: splitList(addrs)[0], Sessions: sessions, Hold: cfg.Duration,
		TLS: tlsFiles, SecretFile: cfg.SecretFile, Logger: log}
	if cfg.Transport == "tls" {
		tc.TLS.Enabled = true
	}
	if h := splitList(httpAddrs); len(h) > 0 {
		tc.HTTPAddr = h[0]
	}
	for _, p := range splitList(pids) {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 {
			return fmt.Errorf("--pids: bad process id %q", p)
		}
		tc.PIDs = append(tc.PIDs, n)
	}
	rep, err := bench.RunTracked(ctx, tc)
	if err != nil {
		return err
	}
	if format == "json" {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteTable(stdout)
}
