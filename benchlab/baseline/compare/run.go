// Package compare runs Rollcall, the Redis TTL baseline and the
// Centrifuge baseline side by side under the same presence load
// (docs/bench-compare.md): N gossip-joined Rollcall agents against one
// redis-server and N baseline gateways (cmd/redis-baseline), and against
// one redis-server and N Centrifuge nodes with its Redis presence manager
// and broker (cmd/centrifuge-baseline), servers pinned to one core and
// the load (`rollcall bench`; for Centrifuge, which does not speak
// Rollcall's protocol, `centrifuge-baseline load` with the same figures)
// to another, the systems run alternately for a few rounds, each round on
// fresh server processes, and the CPU and RSS of each whole system read
// from /proc.
package compare

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rollcall/rollcall/bench"
	"github.com/rollcall/rollcall/benchlab/baseline/centrifugebase"
)

// The systems Run knows.
const (
	Rollcall = "rollcall" // N gossip-joined `rollcall agent --dev`
	Redis    = "redis"    // one redis-server and N redis-baseline gateways
	// one redis-server and N `centrifuge-baseline serve --redis`
	Centrifuge = "centrifuge"
)

// systems are the systems Run knows.
var systems = []string{Rollcall, Redis, Centrifuge}

// Config configures Run. Zero fields take the documented defaults.
type Config struct {
	// Rollcall is the rollcall binary (agents, and the default load).
	// Default "bin/rollcall".
	Rollcall string
	// Baseline is the redis-baseline binary. Default "bin/redis-baseline".
	Baseline string
	// Centrifuge is the centrifuge-baseline binary (its servers, and its
	// default load). Default "bin/centrifuge-baseline".
	Centrifuge string
	// CentrifugeLoad is the Centrifuge system's load argv before its
	// flags. It gets the flags of `centrifuge-baseline load` (--url
	// --sessions --connect-rate --status-rate --subscribers --watch
	// --settle --hold --pids) and prints its JSON result
	// (centrifugebase.LoadResult) on stdout. Default [Centrifuge, "load"].
	CentrifugeLoad []string
	// RedisServer is the redis-server binary. Default: from PATH,
	// installed with apt-get when missing and running as root.
	RedisServer string
	// Systems are the systems measured (Rollcall, Redis, Centrifuge), in
	// the order each round runs them. Default [Rollcall, Redis].
	Systems []string
	// Gateways is how many gateways each system has. Default 3.
	Gateways int
	// Load is the Rollcall and Redis systems' load generator argv before
	// its flags. It gets the flags of `rollcall bench` (--addrs --sessions
	// --procs --connect-rate --heartbeat --status-rate --subscribers
	// --watch --silent-failures --silent-after --probe-rate --warmup
	// --duration --pids --format json) and prints its JSON report on
	// stdout. Default [Rollcall, "bench", "--dev"]; with Raw
	// [Hbgen, "bench"].
	Load []string
	// Raw makes the load plain heartbeats: the raw generator (Hbgen) says
	// hello on every session, then heartbeats each every Heartbeat once
	// all are connected, and nothing else (no status changes,
	// subscribers, probe or silent sessions; their figures are not
	// measured). It costs the load core a fraction of what `rollcall
	// bench` does, so the servers, not the load, saturate first. The
	// Rollcall and Redis systems only.
	Raw bool
	// Hbgen is the raw generator's binary (benchlab/internal/hbgen).
	// Default "bin/hbgen".
	Hbgen string
	// Sessions, Procs, ConnectRate, Heartbeat, StatusRate, Subscribers,
	// Watch, SilentFailures, SilentAfter, Warmup and Duration are passed
	// to the load. Defaults 10000, 2, 2000, 5s, 10 (negative: none), 100
	// (negative: none), 1000, 0, 1s, 5s (negative: none), 30s.
	Sessions       int
	Procs          int
	ConnectRate    float64
	Heartbeat      time.Duration
	StatusRate     float64
	Subscribers    int
	Watch          int
	SilentFailures int
	SilentAfter    time.Duration
	Warmup         time.Duration
	Duration       time.Duration
	// ProbeRate is the status changes per second of the load's probe
	// (`rollcall bench --probe-rate`): a generator process of its own at
	// raised priority whose propagation is the servers', not the loaded
	// generators' scheduling. Default 20; negative: no probe. The
	// Centrifuge load has none.
	ProbeRate float64
	// Timeout is every system's session timeout (Centrifuge's presence
	// TTL). Default 3 × Heartbeat.
	Timeout time.Duration
	// RequestRate is the agents' --request-rate (requests per second one
	// connection may make); the baseline has no such limit. Default: the
	// agents' own default.
	RequestRate float64
	// AgentArgs are more flags for every Rollcall agent, after the ones
	// bench-compare gives (a later flag wins), e.g. {"--io-uring"}.
	AgentArgs []string
	// Rounds is how many times each system runs the load, alternately.
	// Default 3.
	Rounds int
	// ServerCPUs and LoadCPUs are taskset CPU lists. Defaults "0" and "1".
	ServerCPUs, LoadCPUs string
	// Floor runs the propagation floor beside every round
	// (bench.ServeFloorNode, bench.RunFloorProbe): Gateways floor nodes on
	// the server CPUs, and a floor probe on the load CPUs during the
	// load's measured window (from Sessions / ConnectRate + Warmup after
	// the load starts, for Duration less 2 s), at ProbeRate messages per
	// second (20 without a probe). Its figures are the machine's, not a
	// system's: the fastest any system could propagate on these cores
	// under that load. Default off.
	Floor bool
	// FloorCommand is the argv that runs the floor's `node` and `probe`
	// subcommands (cmd/bench-compare: [its own path, "floor"]). Required
	// with Floor.
	FloorCommand []string
	// Scenario is ScenarioLoad (Run) or ScenarioBackend (RunBackend).
	// Default ScenarioLoad.
	Scenario string
	// Users is how many users the backend scenario's worker holds
	// present. Default 100,000.
	Users int
	// HoldCommand is the argv that runs a backend worker (Hold) and takes
	// its flags (--system --addr --users --refresh --ttl)
	// (cmd/bench-compare: [its own path, "hold"]). Required by the backend
	// scenario.
	HoldCommand []string
	// Dir holds the processes' logs. Default: a temporary directory.
	Dir string
	// Log receives progress lines. Default os.Stderr.
	Log io.Writer

	ports *portSet // set by defaults
}

func (c *Config) defaults() error {
	if c.Rollcall == "" {
		c.Rollcall = "bin/rollcall"
	}
	if c.Baseline == "" {
		c.Baseline = "bin/redis-baseline"
	}
	if c.Centrifuge == "" {
		c.Centrifuge = "bin/centrifuge-baseline"
	}
	if len(c.Systems) == 0 {
		c.Systems = []string{Rollcall, Redis}
	}
	switch c.Scenario {
	case "":
		c.Scenario = ScenarioLoad
	case ScenarioLoad:
	case ScenarioBackend:
		if slices.Contains(c.Systems, Centrifuge) {
			return errors.New("the backend scenario runs rollcall and redis only")
		}
		if len(c.HoldCommand) == 0 {
			return errors.New("the backend scenario needs the command that runs its worker (HoldCommand)")
		}
	default:
		return fmt.Errorf("unknown scenario %q (want %s or %s)", c.Scenario, ScenarioLoad, ScenarioBackend)
	}
	if c.Users <= 0 {
		c.Users = 100_000
	}
	for i, s := range c.Systems {
		if !slices.Contains(systems, s) {
			return fmt.Errorf("unknown system %q (want %s)", s, strings.Join(systems, ", "))
		}
		if slices.Contains(c.Systems[:i], s) {
			return fmt.Errorf("system %q given twice", s)
		}
	}
	if c.Gateways <= 0 {
		c.Gateways = 3
	}
	if c.Raw {
		switch {
		case slices.Contains(c.Systems, Centrifuge):
			return errors.New("the raw load speaks Rollcall's protocol: the rollcall and redis systems only")
		case c.SilentFailures > 0:
			return errors.New("the raw load has no silent sessions (silent failures)")
		case c.Floor:
			return errors.New("the raw load measures no propagation for the floor to be set beside")
		}
		c.StatusRate, c.Subscribers, c.ProbeRate = -1, -1, -1
		if c.Hbgen == "" {
			c.Hbgen = "bin/hbgen"
		}
		if len(c.Load) == 0 {
			c.Load = []string{c.Hbgen, "bench"}
		}
	}
	if len(c.Load) == 0 {
		c.Load = []string{c.Rollcall, "bench", "--dev"}
	}
	if len(c.CentrifugeLoad) == 0 {
		c.CentrifugeLoad = []string{c.Centrifuge, "load"}
	}
	if c.Sessions <= 0 {
		c.Sessions = 10000
	}
	if c.Procs <= 0 {
		c.Procs = 2
	}
	if c.ConnectRate <= 0 {
		c.ConnectRate = 2000
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.StatusRate == 0 {
		c.StatusRate = 10
	}
	if c.Subscribers == 0 {
		c.Subscribers = 100
	}
	if c.ProbeRate == 0 {
		c.ProbeRate = 20
	}
	if c.Watch <= 0 {
		c.Watch = 1000
	}
	if c.SilentAfter <= 0 {
		c.SilentAfter = time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = 5 * time.Second
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 3 * c.Heartbeat
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.ServerCPUs == "" {
		c.ServerCPUs = "0"
	}
	if c.LoadCPUs == "" {
		c.LoadCPUs = "1"
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	c.ports = &portSet{}
	if c.Floor && len(c.FloorCommand) == 0 {
		return errors.New("the floor needs the command that runs its node and probe (FloorCommand)")
	}
	return nil
}

// Sample is one load run against one system, from the load's report.
type Sample struct {
	System           string  `json:"system"`
	Round            int     `json:"round"`
	Established      int     `json:"established"`
	Failed           int     `json:"failed"`
	Lost             uint64  `json:"lost"`
	Heartbeats       uint64  `json:"heartbeats"`
	HeartbeatsPerSec float64 `json:"heartbeats_per_second"`
	StatusOK         uint64  `json:"status_ok"`
	StatusErrors     uint64  `json:"status_errors"`
	StatusSkipped    uint64  `json:"status_skipped"`
	// ServerCPUSeconds is the whole system's CPU over the window;
	// ServerCores the same over the window's length.
	ServerCPUSeconds  float64 `json:"server_cpu_seconds"`
	ServerCores       float64 `json:"server_cores"`
	HeartbeatsPerCore float64 `json:"heartbeats_per_core_second"`
	// RSSPerSession is the system's summed VmRSS after every session
	// connected minus before, over the sessions established (fresh
	// processes every round).
	RSSPerSession float64         `json:"rss_per_session_bytes"`
	Propagation   bench.Quantiles `json:"propagation_ms"`
	// ProbePropagation is the probe's (Config.ProbeRate); its Count is 0
	// without one.
	ProbePropagation bench.Quantiles `json:"probe_propagation_ms"`
	// Floor is the floor probe's report (Config.Floor), measured during
	// this round's window; nil without one.
	Floor         *bench.FloorReport `json:"floor,omitempty"`
	Silent        int                `json:"offline_silent"`
	Detected      uint64             `json:"offline_detected"`
	BeyondTimeout bench.Quantiles    `json:"offline_beyond_timeout_ms"`
	// CPUByProcess is each process's CPU over the whole load run,
	// connects included.
	CPUByProcess map[string]float64 `json:"cpu_seconds_by_process_whole_run"`
	// Report is the load's report (`rollcall bench`); Centrifuge the
	// Centrifuge load's result instead, for the Centrifuge system.
	Report     *bench.Report              `json:"load,omitempty"`
	Centrifuge *centrifugebase.LoadResult `json:"centrifuge_load,omitempty"`
}

// sampleOf reads a sample from the load's stdout: one `rollcall bench
// --format json` report.
func sampleOf(out []byte) (Sample, error) {
	var r bench.Report
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return Sample{}, fmt.Errorf("the load's output is not a rollcall bench JSON report: %w", err)
	}
	switch {
	case r.Duration <= 0:
		return Sample{}, errors.New("the load's report has no measured window (duration_s)")
	case r.Sessions.Requested <= 0:
		return Sample{}, errors.New("the load's report has no sessions requested")
	case r.Server.CPUCoreSeconds == nil:
		return Sample{}, errors.New("the load's report has no server CPU (server.cpu_core_seconds null: a server process could not be read)")
	}
	s := Sample{Established: r.Sessions.Established, Failed: r.Sessions.Failed, Lost: r.Sessions.Lost,
		Heartbeats: r.Heartbeats.Sent, HeartbeatsPerSec: r.Heartbeats.PerSec,
		StatusOK: r.StatusChanges.OK, StatusErrors: r.StatusChanges.Errors, StatusSkipped: r.StatusChanges.Skipped,
		ServerCPUSeconds: *r.Server.CPUCoreSeconds, ServerCores: *r.Server.CPUCoreSeconds / r.Duration,
		RSSPerSession: r.Server.RSSPerSessionBytes, Propagation: r.Propagation,
		Silent: r.Offline.Silent, Detected: r.Offline.Detected, BeyondTimeout: r.Offline.Beyond, Report: &r}
	if r.Probe != nil {
		s.ProbePropagation = r.Probe.Propagation
	}
	if s.ServerCPUSeconds > 0 {
		s.HeartbeatsPerCore = float64(s.Heartbeats) / s.ServerCPUSeconds
	}
	return s, nil
}

// Figure is one metric over the rounds: each system's median over the
// rounds that measured it (a system measuring it in none is not in
// Median) and, with more than one system, the per-round ratios of the
// reference system (Rollcall when measured, else the first) to each
// other one.
type Figure struct {
	Metric string             `json:"metric"`
	Median map[string]float64 `json:"median"`
	Ratios []Ratio            `json:"ratios,omitempty"`
}

// Ratio is one metric of system Of / system To, per round (rounds paired
// by number, those where either did not measure it, or To measured 0,
// left out), its median and its spread.
type Ratio struct {
	Of     string    `json:"of"`
	To     string    `json:"to"`
	Rounds []float64 `json:"rounds"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// metric is a figure a comparison reports: its name, and its value in a
// sample and whether the sample measured it.
type metric[S any] struct {
	name string
	of   func(S) (float64, bool)
}

// metrics are the figures the load scenario reports.
var metrics = []metric[Sample]{
	{"heartbeats_per_core_second", func(s Sample) (float64, bool) { return s.HeartbeatsPerCore, s.ServerCPUSeconds > 0 }},
	{"heartbeats_per_second", func(s Sample) (float64, bool) { return s.HeartbeatsPerSec, true }},
	{"server_cores", func(s Sample) (float64, bool) { return s.ServerCores, true }},
	{"rss_per_session_bytes", func(s Sample) (float64, bool) { return s.RSSPerSession, s.Established > 0 }},
	{"propagation_p50_ms", func(s Sample) (float64, bool) { return s.Propagation.P50, s.Propagation.Count > 0 }},
	{"propagation_p99_ms", func(s Sample) (float64, bool) { return s.Propagation.P99, s.Propagation.Count > 0 }},
	{"propagation_p999_ms", func(s Sample) (float64, bool) { return s.Propagation.P999, s.Propagation.Count > 0 }},
	{"probe_propagation_p50_ms", func(s Sample) (float64, bool) { return s.ProbePropagation.P50, s.ProbePropagation.Count > 0 }},
	{"probe_propagation_p99_ms", func(s Sample) (float64, bool) { return s.ProbePropagation.P99, s.ProbePropagation.Count > 0 }},
	{"probe_propagation_p999_ms", func(s Sample) (float64, bool) { return s.ProbePropagation.P999, s.ProbePropagation.Count > 0 }},
	{"floor_propagation_p50_ms", func(s Sample) (float64, bool) { return floorOf(s).P50, floorOf(s).Count > 0 }},
	{"floor_propagation_p99_ms", func(s Sample) (float64, bool) { return floorOf(s).P99, floorOf(s).Count > 0 }},
	{"floor_propagation_p999_ms", func(s Sample) (float64, bool) { return floorOf(s).P999, floorOf(s).Count > 0 }},
	{"offline_beyond_timeout_p50_ms", func(s Sample) (float64, bool) { return s.BeyondTimeout.P50, s.BeyondTimeout.Count > 0 }},
	{"offline_beyond_timeout_max_ms", func(s Sample) (float64, bool) { return s.BeyondTimeout.Max, s.BeyondTimeout.Count > 0 }},
}

// floorOf is the floor's propagation in s (Count 0 without a floor).
func floorOf(s Sample) bench.Quantiles {
	if s.Floor == nil {
		return bench.Quantiles{}
	}
	return s.Floor.Propagation
}

// summarize makes the figures of samples of systems.
func summarize(systems []string, samples []Sample) []Figure {
	return summarizeOf(systems, samples, func(s Sample) (string, int) { return s.System, s.Round }, metrics)
}

// summarizeOf makes the figures ms of samples of systems, key giving a
// sample's system and round.
func summarizeOf[S any](systems []string, samples []S, key func(S) (string, int), ms []metric[S]) []Figure {
	ref := systems[0]
	if slices.Contains(systems, Rollcall) {
		ref = Rollcall
	}
	var figs []Figure
	for _, m := range ms {
		f := Figure{Metric: m.name, Median: map[string]float64{}}
		byRound := map[string]map[int]float64{}
		for _, sys := range systems {
			byRound[sys] = map[int]float64{}
			var v []float64
			for _, s := range samples {
				name, round := key(s)
				if x, ok := m.of(s); ok && name == sys {
					v = append(v, x)
					byRound[sys][round] = x
				}
			}
			if len(v) > 0 {
				f.Median[sys] = median(v)
			}
		}
		for _, sys := range systems {
			if sys == ref {
				continue
			}
			r := Ratio{Of: ref, To: sys}
			for _, s := range samples {
				name, round := key(s)
				if name != ref {
					continue
				}
				a, ok := byRound[ref][round]
				b, okb := byRound[sys][round]
				if ok && okb && b != 0 {
					r.Rounds = append(r.Rounds, a/b)
				}
			}
			if len(r.Rounds) > 0 {
				r.Median = median(r.Rounds)
				r.Min, r.Max = slices.Min(r.Rounds), slices.Max(r.Rounds)
				f.Ratios = append(f.Ratios, r)
			}
		}
		figs = append(figs, f)
	}
	return figs
}

// Result is the whole comparison.
type Result struct {
	Config  map[string]any `json:"config"`
	Version string         `json:"rollcall_version"` // `rollcall version`'s first line
	Samples []Sample       `json:"samples"`
	Figures []Figure       `json:"figures"`
}

// system is one side of the comparison, running.
type system struct {
	name  string
	addrs []string // client addresses
	pids  []int    // every process of the system
	names []string // the processes' names, as pids
	procs []*exec.Cmd
}

// stop interrupts the system's processes, last started first, and kills
// those still running after 10 s.
func (s *system) stop() {
	for _, p := range slices.Backward(s.procs) {
		_ = p.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	s.procs = nil
}

// Run runs the load against each system alternately for cfg.Rounds
// rounds, every run on freshly started server processes.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	if cfg.Scenario != ScenarioLoad {
		return Result{}, fmt.Errorf("Run runs the %s scenario (the %s scenario: RunBackend)", ScenarioLoad, cfg.Scenario)
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "bench-compare-")
		if err != nil {
			return Result{}, err
		}
		cfg.Dir = d
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return Result{}, err
	}
	fmt.Fprintf(cfg.Log, "bench-compare: logs in %s\n", cfg.Dir)
	var redisServer string
	if slices.Contains(cfg.Systems, Redis) || slices.Contains(cfg.Systems, Centrifuge) {
		redisServer = cfg.RedisServer
		if redisServer == "" {
			p, err := findRedisServer(cfg.Log)
			if err != nil {
				return Result{}, err
			}
			redisServer = p
		}
	}
	res := Result{Config: map[string]any{"systems": cfg.Systems, "gateways": cfg.Gateways,
		"sessions": cfg.Sessions, "procs": cfg.Procs, "connect_rate": cfg.ConnectRate,
		"heartbeat": cfg.Heartbeat.String(), "timeout": cfg.Timeout.String(), "status_rate": cfg.StatusRate,
		"subscribers": cfg.Subscribers, "watch": cfg.Watch, "silent_failures": cfg.SilentFailures,
		"silent_after": cfg.SilentAfter.String(), "warmup": max(cfg.Warmup, 0).String(), "duration": cfg.Duration.String(),
		"request_rate": cfg.RequestRate, "agent_args": strings.Join(cfg.AgentArgs, " "), "raw": cfg.Raw, "rounds": cfg.Rounds, "load": strings.Join(cfg.Load, " "),
		"server_cpus": cfg.ServerCPUs, "load_cpus": cfg.LoadCPUs}}
	if slices.Contains(cfg.Systems, Centrifuge) {
		res.Config["centrifuge_load"] = strings.Join(cfg.CentrifugeLoad, " ")
		if cfg.SilentFailures > 0 {
			fmt.Fprintln(cfg.Log, "bench-compare: centrifuge: the Centrifuge load has no silent sessions; its offline figures are not measured")
		}
	}
	if out, err := exec.Command(cfg.Rollcall, "version").Output(); err == nil {
		res.Version, _, _ = strings.Cut(string(out), "\n")
	}
	for r := 1; r <= cfg.Rounds; r++ {
		for _, name := range cfg.Systems {
			s, err := runRound(ctx, cfg, name, redisServer, r)
			if err != nil {
				return res, fmt.Errorf("round %d, %s: %w (logs in %s)", r, name, err, cfg.Dir)
			}
			fmt.Fprintln(cfg.Log, s.line())
			res.Samples = append(res.Samples, s)
		}
	}
	res.Figures = summarize(cfg.Systems, res.Samples)
	return res, nil
}

// line is the sample's progress line.
func (s Sample) line() string {
	off := ""
	if s.Silent > 0 {
		off = fmt.Sprintf("  offline %d/%d, +%.0f ms p50 past the timeout", s.Detected, s.Silent, s.BeyondTimeout.P50)
	}
	if p := floorOf(s); p.Count > 0 {
		off = fmt.Sprintf("  floor p50 %.1f p99 %.1f p999 %.1f ms (n=%d)", p.P50, p.P99, p.P999, p.Count) + off
	}
	if p := s.ProbePropagation; p.Count > 0 {
		off = fmt.Sprintf("  probe p50 %.1f p99 %.1f p999 %.1f ms (n=%d)", p.P50, p.P99, p.P999, p.Count) + off
	}
	if p := s.Propagation; p.Count > 0 { // none under the raw load
		off = fmt.Sprintf("  propagation p50 %.1f p99 %.1f p999 %.1f ms (n=%d)", p.P50, p.P99, p.P999, p.Count) + off
	}
	hb := "hb"
	if s.System == Centrifuge {
		hb = "ping" // the server's pings, each answered by a pong
	}
	return fmt.Sprintf("round %d  %-10s  %d/%d sessions, %d lost  %7.0f %s/s  %5.2f cores  %7.0f %s/core-s  rss %5.0f B/session%s  whole-run cpu-s %v",
		s.Round, s.System, s.Established, s.Established+s.Failed, s.Lost, s.HeartbeatsPerSec, hb, s.ServerCores,
		s.HeartbeatsPerCore, hb, s.RSSPerSession, off, s.CPUByProcess)
}

// runRound starts system name, runs the load against it and stops it.
func runRound(ctx context.Context, cfg Config, name, redisServer string, round int) (Sample, error) {
	sys := &system{name: name}
	defer sys.stop()
	var err error
	switch name {
	case Rollcall:
		err = startRollcall(ctx, cfg, sys, round)
	case Redis:
		err = startRedis(ctx, cfg, sys, redisServer, round)
	case Centrifuge:
		err = startCentrifuge(ctx, cfg, sys, redisServer, round)
	}
	if err != nil {
		return Sample{}, err
	}
	var floor *floorRun
	if cfg.Floor {
		floor = &floorRun{system: system{name: "floor"}}
		defer floor.stop()
		if err := floor.startNodes(ctx, cfg, round); err != nil {
			return Sample{}, err
		}
	}
	return runLoad(ctx, cfg, sys, floor, round)
}

// pinned is argv run on cpus (taskset), or argv itself where taskset is
// missing.
func pinned(cpus string, argv []string) []string {
	if _, err := exec.LookPath("taskset"); err != nil {
		return argv
	}
	return append([]string{"taskset", "-c", cpus}, argv...)
}

// start starts one server process of sys, pinned to the server CPUs, its
// output in the log directory.
func (s *system) start(cfg Config, name string, round int, argv ...string) error {
	argv = pinned(cfg.ServerCPUs, argv)
	f, err := os.Create(filepath.Join(cfg.Dir, fmt.Sprintf("%s-%d.log", name, round)))
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	s.procs = append(s.procs, cmd)
	s.pids = append(s.pids, cmd.Process.Pid)
	s.names = append(s.names, name)
	return nil
}

// startRedisServer starts sys's redis-server on loopback without
// persistence, with the keyspace events given (none when empty), and
// returns its address once it answers.
func startRedisServer(ctx context.Context, cfg Config, sys *system, redisServer string, round int, events string) (string, error) {
	rport, err := cfg.ports.freePort()
	if err != nil {
		return "", err
	}
	raddr := "127.0.0.1:" + strconv.Itoa(rport)
	if err := sys.start(cfg, "redis-server", round, redisServer, "--port", strconv.Itoa(rport), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--notify-keyspace-events", events, "--dir", cfg.Dir); err != nil {
		return "", err
	}
	if err := waitRedis(ctx, raddr); err != nil {
		return "", err
	}
	return raddr, nil
}

func startRedis(ctx context.Context, cfg Config, sys *system, redisServer string, round int) error {
	raddr, err := startRedisServer(ctx, cfg, sys, redisServer, round, "Ex")
	if err != nil {
		return err
	}
	return startGateways(ctx, cfg, sys, round, "rgw", func(addr, name string) []string {
		return []string{cfg.Baseline, "--addr", addr, "--redis", raddr, "--name", name,
			"--heartbeat", cfg.Heartbeat.String(), "--timeout", cfg.Timeout.String()}
	})
}

// startGateways starts cfg.Gateways servers named prefix1, prefix2, ...,
// each on a free loopback port with the argv argv gives for its address
// and name, and waits until each accepts connections.
func startGateways(ctx context.Context, cfg Config, sys *system, round int, prefix string, argv func(addr, name string) []string) error {
	for i := range cfg.Gateways {
		p, err := cfg.ports.freePort()
		if err != nil {
			return err
		}
		addr := "127.0.0.1:" + strconv.Itoa(p)
		name := fmt.Sprintf("%s%d", prefix, i+1)
		if err := sys.start(cfg, name, round, argv(addr, name)...); err != nil {
			return err
		}
		sys.addrs = append(sys.addrs, addr)
	}
	for _, a := range sys.addrs {
		if err := waitTCP(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// startCentrifuge starts a redis-server and cfg.Gateways Centrifuge
// nodes sharing it as their presence manager and broker: every node
// sees the presence and the publications of all, as Rollcall's gossip-
// joined agents do. The nodes ping each client every heartbeat and
// refresh each connection's presence as often; a presence entry not
// refreshed expires after the timeout.
func startCentrifuge(ctx context.Context, cfg Config, sys *system, redisServer string, round int) error {
	raddr, err := startRedisServer(ctx, cfg, sys, redisServer, round, "")
	if err != nil {
		return err
	}
	return startGateways(ctx, cfg, sys, round, "cgw", func(addr, _ string) []string {
		return centrifugeServeArgs(cfg, addr, raddr)
	})
}

// centrifugeServeArgs is the argv of a Centrifuge node at addr.
func centrifugeServeArgs(cfg Config, addr, redisAddr string) []string {
	return []string{cfg.Centrifuge, "serve", "--addr", addr, "--redis", redisAddr,
		"--ping", cfg.Heartbeat.String(), "--presence-update", cfg.Heartbeat.String(),
		"--presence-ttl", cfg.Timeout.String()}
}

// startRollcall starts cfg.Gateways gossip-joined agents, each with the
// extra flags given, and waits until every one is ready.
func startRollcall(ctx context.Context, cfg Config, sys *system, round int, extra ...string) error {
	var firstGossip string
	var httpAddrs []string
	for i := range cfg.Gateways {
		ports := make([]int, 3)
		for j := range ports {
			p, err := cfg.ports.freePort()
			if err != nil {
				return err
			}
			ports[j] = p
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		httpAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
		gossip := "127.0.0.1:" + strconv.Itoa(ports[2])
		name := fmt.Sprintf("rc%d", i+1)
		argv := []string{cfg.Rollcall, "agent", "--dev", "--name", name, "--client-addr", addr,
			"--http-addr", httpAddr, "--gossip-addr", gossip,
			"--heartbeat", cfg.Heartbeat.String(), "--timeout", cfg.Timeout.String(),
			"--max-connections-per-ip", strconv.Itoa(cfg.Sessions + 1000), "--log-level", "warn"}
		argv = append(argv, extra...)
		if cfg.RequestRate != 0 {
			argv = append(argv, "--request-rate", strconv.FormatFloat(cfg.RequestRate, 'f', -1, 64))
		}
		argv = append(argv, cfg.AgentArgs...)
		if firstGossip != "" {
			argv = append(argv, "--join", firstGossip)
		} else {
			firstGossip = gossip
		}
		if err := sys.start(cfg, name, round, argv...); err != nil {
			return err
		}
		sys.addrs = append(sys.addrs, addr)
		httpAddrs = append(httpAddrs, httpAddr)
	}
	for i, a := range sys.addrs {
		if err := waitTCP(ctx, a); err != nil {
			return err
		}
		if err := waitReady(ctx, httpAddrs[i]); err != nil {
			return err
		}
	}
	// the agents have joined; give their gossip a moment to settle
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
	}
	return nil
}

// loadArgs is the load's argv against sys.
func loadArgs(cfg Config, sys *system) []string {
	pids := make([]string, len(sys.pids))
	for i, p := range sys.pids {
		pids[i] = strconv.Itoa(p)
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	return append(slices.Clone(cfg.Load),
		"--addrs", strings.Join(sys.addrs, ","), "--sessions", strconv.Itoa(cfg.Sessions),
		"--procs", strconv.Itoa(cfg.Procs), "--connect-rate", f(cfg.ConnectRate),
		"--heartbeat", cfg.Heartbeat.String(), "--status-rate", f(max(cfg.StatusRate, 0)),
		"--subscribers", strconv.Itoa(max(cfg.Subscribers, 0)), "--watch", strconv.Itoa(cfg.Watch),
		"--silent-failures", strconv.Itoa(cfg.SilentFailures), "--silent-after", cfg.SilentAfter.String(),
		"--probe-rate", f(max(cfg.ProbeRate, 0)),
		"--warmup", max(cfg.Warmup, 0).String(), "--duration", cfg.Duration.String(), "--pids", strings.Join(pids, ","), "--format", "json")
}

// centrifugeLoadArgs is the Centrifuge load's argv against sys: the
// same sessions, connect rate, status changes, subscribers, warmup and
// window as loadArgs gives `rollcall bench`; the heartbeat is the
// servers' ping. It has no silent sessions and runs as one process.
func centrifugeLoadArgs(cfg Config, sys *system) []string {
	pids := make([]string, len(sys.pids))
	for i, p := range sys.pids {
		pids[i] = strconv.Itoa(p)
	}
	urls := make([]string, len(sys.addrs))
	for i, a := range sys.addrs {
		urls[i] = "ws://" + a + centrifugebase.Path
	}
	settle := cfg.Warmup
	if settle <= 0 {
		settle = -1 // none
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	return append(slices.Clone(cfg.CentrifugeLoad),
		"--url", strings.Join(urls, ","), "--sessions", strconv.Itoa(cfg.Sessions),
		"--connect-rate", f(cfg.ConnectRate), "--status-rate", f(max(cfg.StatusRate, 0)),
		"--subscribers", strconv.Itoa(max(cfg.Subscribers, 0)), "--watch", strconv.Itoa(cfg.Watch),
		"--settle", settle.String(), "--hold", cfg.Duration.String(), "--pids", strings.Join(pids, ","))
}

// sampleOfCentrifuge reads a sample from the Centrifuge load's stdout:
// one centrifugebase.LoadResult. Its pings stand for the heartbeats;
// it measures no offline detection.
func sampleOfCentrifuge(out []byte) (Sample, error) {
	var r centrifugebase.LoadResult
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return Sample{}, fmt.Errorf("the load's output is not a centrifuge-baseline load JSON result: %w", err)
	}
	switch {
	case r.HoldSeconds <= 0:
		return Sample{}, errors.New("the load's result has no measured window (hold_seconds)")
	case r.Sessions <= 0:
		return Sample{}, errors.New("the load's result has no sessions requested")
	case len(r.PIDs) == 0:
		return Sample{}, errors.New("the load's result has no server processes sampled (server_pids)")
	}
	s := Sample{Established: r.Subscribed, Failed: r.Failed, Lost: uint64(max(r.Lost, 0)),
		Heartbeats: uint64(max(r.Pings, 0)), HeartbeatsPerSec: r.PingsPerSec,
		StatusOK: uint64(max(r.StatusOK, 0)), StatusErrors: uint64(max(r.StatusErrors, 0)), StatusSkipped: uint64(max(r.StatusSkipped, 0)),
		ServerCPUSeconds: r.ServerCPU, ServerCores: r.ServerCPU / r.HoldSeconds,
		RSSPerSession: r.RSSPerSession, Propagation: r.Propagation, Centrifuge: &r}
	if s.ServerCPUSeconds > 0 {
		s.HeartbeatsPerCore = float64(s.Heartbeats) / s.ServerCPUSeconds
	}
	return s, nil
}

// runLoad runs the load once against sys, pinned to the load CPUs.
func runLoad(ctx context.Context, cfg Config, sys *system, floor *floorRun, round int) (Sample, error) {
	argv, decode := loadArgs(cfg, sys), sampleOf
	if sys.name == Centrifuge {
		argv, decode = centrifugeLoadArgs(cfg, sys), sampleOfCentrifuge
	}
	argv = pinned(cfg.LoadCPUs, argv)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	stderr, err := os.Create(filepath.Join(cfg.Dir, fmt.Sprintf("load-%s-%d.log", sys.name, round)))
	if err != nil {
		return Sample{}, err
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = &out, stderr
	cpuAll := func() []float64 {
		out := make([]float64, len(sys.pids))
		for i, p := range sys.pids {
			ps, _ := bench.SampleProc("/proc", p)
			out[i] = ps.CPUSeconds
		}
		return out
	}
	cpu0 := cpuAll()
	if err := cmd.Start(); err != nil {
		return Sample{}, fmt.Errorf("load %v: %w", argv, err)
	}
	var probe *exec.Cmd
	var probeOut bytes.Buffer
	if floor != nil {
		var err error
		if probe, err = floor.startProbe(cfg, round, &probeOut); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return Sample{}, err
		}
	}
	if err := cmd.Wait(); err != nil {
		if probe != nil {
			_ = probe.Process.Kill()
			_ = probe.Wait()
		}
		return Sample{}, fmt.Errorf("load %v: %w (see %s)", argv, err, stderr.Name())
	}
	cpu1 := cpuAll()
	s, err := decode(out.Bytes())
	if err != nil {
		return Sample{}, fmt.Errorf("%w (see %s)", err, stderr.Name())
	}
	if probe != nil {
		if s.Floor, err = floor.report(probe, &probeOut); err != nil {
			return Sample{}, err
		}
	}
	s.System, s.Round = sys.name, round
	s.CPUByProcess = map[string]float64{}
	for i, n := range sys.names {
		s.CPUByProcess[n] = float64(int((cpu1[i]-cpu0[i])*100+0.5)) / 100
	}
	return s, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// findRedisServer finds redis-server, installing Debian's package when
// running as root without one.
func findRedisServer(log io.Writer) (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("redis-server not found (Debian: apt-get install -y redis-server)")
	}
	fmt.Fprintln(log, "bench-compare: installing redis-server (apt-get)")
	cmd := exec.Command("sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("installing redis-server: %w", err)
	}
	return exec.LookPath("redis-server")
}

// portSet hands out the ports of one Run's servers, each once.
type portSet struct {
	mu   sync.Mutex
	used map[int]bool
}

// freePort returns a loopback port that is free for both TCP and UDP
// (a gateway's gossip port takes both) and not handed out before,
// chosen below the kernel's ephemeral range: a port from that range, free
// when chosen, can be taken by any outbound connection before the server
// that was to listen on it starts (seen as "bind: address already in
// use" from an agent).
func (ps *portSet) freePort() (int, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.used == nil {
		ps.used = map[int]bool{}
	}
	lo, hi := 10000, ephemeralLow()
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if ps.used[p] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
		_ = ln.Close()
		if err != nil {
			continue
		}
		_ = pc.Close()
		ps.used[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port in [%d, %d) after 1000 tries", lo, hi)
}

// ephemeralLow is the first port of the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range), 32768 where it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	if p, err := strconv.Atoi(f[0]); err == nil && p > 11000 {
		return p
	}
	return 32768
}

func waitTCP(ctx context.Context, addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s does not accept: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitReady waits for an agent's /readyz to answer 200.
func waitReady(ctx context.Context, httpAddr string) error {
	deadline := time.Now().Add(30 * time.Second)
	cl := &http.Client{Timeout: time.Second}
	for {
		resp, err := cl.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("agent %s not ready: %w", httpAddr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitRedis waits for redis-server at addr to answer PING (over a plain
// connection: a client library would log every refused dial).
func waitRedis(ctx context.Context, addr string) error {
	deadline := time.Now().Add(10 * time.Second)
	ping := func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			return err
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if line != "+PONG\r\n" {
			return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
		}
		return nil
	}
	for {
		err := ping()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis-server %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
