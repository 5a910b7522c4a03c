package compare

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rollcall/rollcall/bench"
	"github.com/rollcall/rollcall/client"
)

// The scenarios Run and RunBackend know.
const (
	ScenarioLoad    = "load"    // rollcall bench's client load (Run)
	ScenarioBackend = "backend" // a backend tier holding users present (RunBackend)
)

// BackendSample is one run of the backend scenario against one system.
type BackendSample struct {
	System string `json:"system"`
	Round  int    `json:"round"`
	Users  int    `json:"users"`
	// Present is how many users the reader saw present before the window.
	Present int `json:"present"`
	// WindowSeconds is the CPU window's length; ServerCPUSeconds the CPU
	// of every server process over it (Rollcall: the gateways; Redis: the
	// redis-server), BackendCPUSeconds the backend worker's (the load
	// core's one process).
	WindowSeconds     float64 `json:"window_seconds"`
	ServerCPUSeconds  float64 `json:"server_cpu_seconds"`
	BackendCPUSeconds float64 `json:"backend_cpu_seconds"`
	// IdleServerCores is the servers' cores (CPU-seconds per second) over
	// a window as long, before the worker started: what they cost with no
	// user present.
	IdleServerCores float64 `json:"idle_server_cores"`
	// ServerCoresPer10k and BackendCoresPer10k are cores (CPU-seconds
	// per second) per 10,000 users present.
	ServerCoresPer10k  float64 `json:"server_cores_per_10k_users"`
	BackendCoresPer10k float64 `json:"backend_cores_per_10k_users"`
	// RSSPerUser is the servers' summed VmRSS after the window less
	// before the backend started, per user.
	RSSPerUser float64 `json:"server_rss_per_user_bytes"`
	// OfflineFirstMS and OfflineAllMS are the times from the kill -9 (of
	// the gateway holding the backend's connection; of the Redis worker)
	// to a reader (on another gateway; a Redis client) reading the first
	// user, and every user, offline.
	OfflineFirstMS float64 `json:"offline_first_ms"`
	OfflineAllMS   float64 `json:"offline_all_ms"`
	// NotifiedAllMS (Redis) is the time from the kill to the last of the
	// users' keyspace expiry events (__keyevent@0__:expired) reaching a
	// subscriber: when an application told of expiries, rather than
	// reading, learns that every user is gone; 0 if not every event came.
	NotifiedAllMS float64 `json:"notified_all_ms,omitempty"`
	// Notified (Redis) counts the users' expiry events received.
	Notified int `json:"notified,omitempty"`
	// ReaderStallMS (Rollcall) is how long the reader's gateway logged
	// itself stalled (its gossip loop late; "peer leases extended by the
	// stall") between the kill and the offline: a gateway that was not
	// running extends its peers' leases by as much, so that its own stall
	// never shows a live peer's users offline. On an idle machine it is 0.
	ReaderStallMS float64 `json:"reader_stall_ms,omitempty"`
	// CPUByProcess is each process's CPU over the window.
	CPUByProcess map[string]float64 `json:"cpu_seconds_by_process"`
}

// BackendResult is the whole backend comparison.
type BackendResult struct {
	Config  map[string]any  `json:"config"`
	Version string          `json:"rollcall_version"`
	Samples []BackendSample `json:"samples"`
	Figures []Figure        `json:"figures"`
}

// backendMetrics are the figures the backend scenario reports.
var backendMetrics = []metric[BackendSample]{
	{"server_cores_per_10k_users", func(s BackendSample) (float64, bool) { return s.ServerCoresPer10k, true }},
	{"idle_server_cores", func(s BackendSample) (float64, bool) { return s.IdleServerCores, true }},
	{"server_cores_per_10k_users_above_idle", func(s BackendSample) (float64, bool) {
		return s.ServerCoresPer10k - s.IdleServerCores*10_000/float64(s.Users), s.Users > 0
	}},
	{"backend_cores_per_10k_users", func(s BackendSample) (float64, bool) { return s.BackendCoresPer10k, true }},
	{"server_rss_per_user_bytes", func(s BackendSample) (float64, bool) { return s.RSSPerUser, true }},
	{"offline_first_ms", func(s BackendSample) (float64, bool) { return s.OfflineFirstMS, s.OfflineAllMS > 0 }},
	{"offline_all_ms", func(s BackendSample) (float64, bool) { return s.OfflineAllMS, s.OfflineAllMS > 0 }},
	{"notified_all_ms", func(s BackendSample) (float64, bool) { return s.NotifiedAllMS, s.NotifiedAllMS > 0 }},
	{"reader_stall_ms", func(s BackendSample) (float64, bool) {
		return s.ReaderStallMS, s.System == Rollcall && s.OfflineAllMS > 0
	}},
}

func summarizeBackend(systems []string, samples []BackendSample) []Figure {
	return summarizeOf(systems, samples, func(s BackendSample) (string, int) { return s.System, s.Round }, backendMetrics)
}

// line is the sample's progress line.
func (s BackendSample) line() string {
	notified := ""
	if s.ReaderStallMS > 0 {
		notified = fmt.Sprintf(" (the reader's gateway stalled %.0f ms meanwhile)", s.ReaderStallMS)
	}
	if s.System == Redis {
		notified = fmt.Sprintf(", expiry events %d/%d, the last at %.0f ms", s.Notified, s.Users, s.NotifiedAllMS)
	}
	return fmt.Sprintf("round %d  %-8s  %d/%d users present  server %.4f cores/10k users (%.4f cores idle)  backend %.4f cores/10k users  rss %.0f B/user  kill -9 -> offline: first %.0f ms, all %.0f ms%s  window cpu-s %v",
		s.Round, s.System, s.Present, s.Users, s.ServerCoresPer10k, s.IdleServerCores, s.BackendCoresPer10k, s.RSSPerUser,
		s.OfflineFirstMS, s.OfflineAllMS, notified, s.CPUByProcess)
}

// RunBackend runs the backend scenario (docs/bench-compare.md): for
// cfg.Rounds rounds, each system of cfg.Systems (Rollcall, Redis) in turn
// on fresh servers, the servers' CPU is read over cfg.Duration with no
// user, then a backend worker on the load CPUs holds cfg.Users users
// present and their servers' CPU is read over cfg.Duration after
// cfg.Warmup, then the worker's holder is killed -9 (Rollcall: the
// gateway the worker's connection is on; Redis: the worker) and a reader
// times every user going offline.
func RunBackend(ctx context.Context, cfg Config) (BackendResult, error) {
	cfg.Scenario = ScenarioBackend
	if err := cfg.defaults(); err != nil {
		return BackendResult{}, err
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "bench-compare-")
		if err != nil {
			return BackendResult{}, err
		}
		cfg.Dir = d
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return BackendResult{}, err
	}
	fmt.Fprintf(cfg.Log, "bench-compare: backend scenario, %d users; logs in %s\n", cfg.Users, cfg.Dir)
	var redisServer string
	if slices.Contains(cfg.Systems, Redis) {
		redisServer = cfg.RedisServer
		if redisServer == "" {
			p, err := findRedisServer(cfg.Log)
			if err != nil {
				return BackendResult{}, err
			}
			redisServer = p
		}
	}
	res := BackendResult{Config: map[string]any{"scenario": ScenarioBackend, "systems": cfg.Systems,
		"gateways": cfg.Gateways, "users": cfg.Users, "heartbeat": cfg.Heartbeat.String(),
		"timeout": cfg.Timeout.String(), "warmup": max(cfg.Warmup, 0).String(), "duration": cfg.Duration.String(),
		"rounds": cfg.Rounds, "server_cpus": cfg.ServerCPUs, "load_cpus": cfg.LoadCPUs}}
	if out, err := exec.Command(cfg.Rollcall, "version").Output(); err == nil {
		res.Version, _, _ = strings.Cut(string(out), "\n")
	}
	for r := 1; r <= cfg.Rounds; r++ {
		for _, name := range cfg.Systems {
			s, err := runBackendRound(ctx, cfg, name, redisServer, r)
			if err != nil {
				return res, fmt.Errorf("round %d, %s: %w (logs in %s)", r, name, err, cfg.Dir)
			}
			fmt.Fprintln(cfg.Log, s.line())
			res.Samples = append(res.Samples, s)
		}
	}
	res.Figures = summarizeBackend(cfg.Systems, res.Samples)
	return res, nil
}

// holdArgs is the backend worker's argv against sys (its first address:
// the first gateway; the redis-server).
func holdArgs(cfg Config, sys *system) []string {
	return append(slices.Clone(cfg.HoldCommand), "--system", sys.name, "--addr", sys.addrs[0],
		"--users", strconv.Itoa(cfg.Users), "--refresh", cfg.Heartbeat.String(), "--ttl", cfg.Timeout.String())
}

// runBackendRound starts system name, holds the users present through a
// backend worker, reads the CPU, kills the holder and times the offline.
func runBackendRound(ctx context.Context, cfg Config, name, redisServer string, round int) (BackendSample, error) {
	s := BackendSample{System: name, Round: round, Users: cfg.Users}
	sys := &system{name: name}
	defer sys.stop()
	var reader backendReader
	switch name {
	case Rollcall:
		// The worker's connection may track every user; the watcher reads
		// from the last gateway, not the worker's.
		if err := startRollcall(ctx, cfg, sys, round,
			"--max-tracked-per-connection", strconv.Itoa(max(cfg.Users, 100_000))); err != nil {
			return s, err
		}
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cl, err := client.Dial(dctx, client.Config{Addrs: []string{sys.addrs[len(sys.addrs)-1]}, User: "bt-watcher", Device: "reader"})
		cancel()
		if err != nil {
			return s, fmt.Errorf("watcher: %w", err)
		}
		defer cl.Close()
		reader = &rollcallReader{c: cl}
	case Redis:
		raddr, err := startRedisServer(ctx, cfg, sys, redisServer, round, "Ex")
		if err != nil {
			return s, err
		}
		sys.addrs = []string{raddr}
		rr := newRedisReader(raddr, cfg.Users)
		defer rr.close()
		reader = rr
	default:
		return s, fmt.Errorf("the backend scenario has no system %q", name)
	}
	// The servers' cost with no user present, over a window as long.
	idle0, ok := cpuOf(sys.pids)
	if !ok {
		return s, errors.New("cannot read a server's /proc")
	}
	ti := time.Now()
	if err := sleep(ctx, cfg.Duration); err != nil {
		return s, err
	}
	idle1, ok := cpuOf(sys.pids)
	if !ok {
		return s, errors.New("cannot read a server's /proc (did one exit?)")
	}
	for i := range idle0 {
		s.IdleServerCores += idle1[i] - idle0[i]
	}
	s.IdleServerCores /= time.Since(ti).Seconds()
	rss0 := sumRSS(sys.pids)

	argv := pinned(cfg.LoadCPUs, holdArgs(cfg, sys))
	logf, err := os.Create(filepath.Join(cfg.Dir, fmt.Sprintf("backend-%s-%d.log", name, round)))
	if err != nil {
		return s, err
	}
	defer logf.Close()
	worker := exec.Command(argv[0], argv[1:]...)
	worker.Stderr = logf
	stdout, err := worker.StdoutPipe()
	if err != nil {
		return s, err
	}
	if err := worker.Start(); err != nil {
		return s, fmt.Errorf("backend worker %v: %w", argv, err)
	}
	exited := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				ready <- sc.Text()
			}
		}
		exited <- worker.Wait()
	}()
	defer func() {
		_ = worker.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
		}
	}()
	select {
	case <-ready:
	case err := <-exited:
		return s, fmt.Errorf("the backend worker exited before its users were present: %v (see %s)", err, logf.Name())
	case <-time.After(5 * time.Minute):
		return s, fmt.Errorf("the backend worker did not report its users present in 5 minutes (see %s)", logf.Name())
	case <-ctx.Done():
		return s, ctx.Err()
	}
	// Every user present for the reader, then the warmup.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		n, err := reader.present(ctx)
		if err != nil {
			return s, fmt.Errorf("reader: %w", err)
		}
		s.Present = n
		if n == cfg.Users {
			break
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("the reader sees %d of %d users present after 2 minutes", n, cfg.Users)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return s, err
		}
	}
	if err := sleep(ctx, max(cfg.Warmup, 0)); err != nil {
		return s, err
	}

	pids := append(slices.Clone(sys.pids), worker.Process.Pid)
	names := append(slices.Clone(sys.names), "backend")
	cpu0, ok := cpuOf(pids)
	if !ok {
		return s, errors.New("cannot read a process's /proc at the window's start")
	}
	t0 := time.Now()
	if err := sleep(ctx, cfg.Duration); err != nil {
		return s, err
	}
	cpu1, ok := cpuOf(pids)
	s.WindowSeconds = time.Since(t0).Seconds()
	if !ok {
		return s, errors.New("cannot read a process's /proc at the window's end (did one exit?)")
	}
	s.CPUByProcess = map[string]float64{}
	for i, n := range names {
		d := cpu1[i] - cpu0[i]
		s.CPUByProcess[n] = float64(int(d*100+0.5)) / 100
		if n == "backend" {
			s.BackendCPUSeconds += d
		} else {
			s.ServerCPUSeconds += d
		}
	}
	per10k := 10_000 / float64(cfg.Users) / s.WindowSeconds
	s.ServerCoresPer10k = s.ServerCPUSeconds * per10k
	s.BackendCoresPer10k = s.BackendCPUSeconds * per10k
	s.RSSPerUser = float64(sumRSS(sys.pids)-rss0) / float64(cfg.Users)

	// kill -9 the holder at a random point of a refresh period (the
	// window's length is no guide to where a Redis worker is in its
	// cycle), then time the offline.
	if err := reader.arm(ctx); err != nil {
		return s, fmt.Errorf("reader: %w", err)
	}
	if err := sleep(ctx, rand.N(cfg.Heartbeat)); err != nil {
		return s, err
	}
	victim := worker.Process
	if name == Rollcall {
		victim = sys.procs[0].Process // the gateway of the worker's connection
	}
	tKill := time.Now()
	if err := victim.Kill(); err != nil {
		return s, fmt.Errorf("kill -9: %w", err)
	}
	first, all, err := reader.offline(ctx, tKill, cfg.Timeout+time.Minute)
	if err != nil {
		return s, fmt.Errorf("reader: %w", err)
	}
	s.OfflineFirstMS, s.OfflineAllMS = ms(first.Sub(tKill)), ms(all.Sub(tKill))
	if name == Rollcall {
		last := len(sys.names) - 1
		s.ReaderStallMS = ms(stallsIn(filepath.Join(cfg.Dir, fmt.Sprintf("%s-%d.log", sys.names[last], round)), tKill, all))
	}
	if rr, ok := reader.(*redisReader); ok {
		n, last := rr.notifiedBy(ctx, time.Now().Add(10*time.Second))
		s.Notified = n
		if n == cfg.Users {
			s.NotifiedAllMS = ms(last.Sub(tKill))
		}
	}
	return s, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// stallsIn sums the stalls an agent's log reports between from and to
// (lines "this gateway was stalled; ..." {"stall": "1.2s"}, timestamped
// when the stall was seen).
func stallsIn(logPath string, from, to time.Time) time.Duration {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	var sum time.Duration
	for line := range strings.Lines(string(b)) {
		if !strings.Contains(line, "this gateway was stalled") {
			continue
		}
		ts, _, _ := strings.Cut(line, "\t")
		at, err := time.Parse("2006-01-02T15:04:05.000Z0700", ts)
		if err != nil || at.Before(from) || at.After(to) {
			continue
		}
		_, rest, ok := strings.Cut(line, `"stall": "`)
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, `"`)
		if d, err := time.ParseDuration(v); err == nil {
			sum += d
		}
	}
	return sum
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cpuOf reads every process's CPU seconds; false if one cannot be read.
func cpuOf(pids []int) ([]float64, bool) {
	out := make([]float64, len(pids))
	for i, p := range pids {
		ps, err := bench.SampleProc("/proc", p)
		if err != nil {
			return nil, false
		}
		out[i] = ps.CPUSeconds
	}
	return out, true
}

// sumRSS is the processes' summed VmRSS (those that can be read).
func sumRSS(pids []int) int64 {
	var n int64
	for _, p := range pids {
		if ps, err := bench.SampleProc("/proc", p); err == nil {
			n += ps.RSSBytes
		}
	}
	return n
}

// backendReader reads the users' presence the way an application reading
// the system does.
type backendReader interface {
	// present counts the users present.
	present(ctx context.Context) (int, error)
	// arm prepares for offline, before the kill.
	arm(ctx context.Context) error
	// offline returns when it read the first user and every user offline,
	// waiting at most bound past since.
	offline(ctx context.Context, since time.Time, bound time.Duration) (first, all time.Time, err error)
}

// rollcallReader reads the users' group on a gateway other than the
// backend's: its online count, every 10 ms.
type rollcallReader struct{ c *client.Client }

func (r *rollcallReader) present(ctx context.Context) (int, error) {
	return r.c.GroupCount(ctx, BackendGroup)
}

func (r *rollcallReader) arm(context.Context) error { return nil }

func (r *rollcallReader) offline(ctx context.Context, since time.Time, bound time.Duration) (first, all time.Time, err error) {
	users := -1
	for {
		n, err := r.c.GroupCount(ctx, BackendGroup)
		if err != nil {
			return first, all, err
		}
		now := time.Now()
		if users < 0 {
			users = n
		}
		if n < users && first.IsZero() {
			first = now
		}
		if n == 0 {
			if first.IsZero() {
				first = now
			}
			return first, now, nil
		}
		if now.Sub(since) > bound {
			return first, all, fmt.Errorf("%d users still online %v after the kill", n, bound)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return first, all, err
		}
	}
}

// redisReader reads the users' keys: a user is offline once a read of
// its key finds none (Redis expires a key on access once its TTL has
// passed, whether or not its active expiry has removed it yet). It also
// counts the keys' expiry events.
type redisReader struct {
	rdb   *redis.Client
	users int
	keys  []string

	sub      *redis.PubSub
	mu       sync.Mutex
	notified int
	last     time.Time
	subDone  chan struct{}
}

func newRedisReader(addr string, users int) *redisReader {
	keys := make([]string, users)
	for i := range keys {
		keys[i] = RedisPresenceKey(BackendUser(i))
	}
	return &redisReader{rdb: redis.NewClient(&redis.Options{Addr: addr, PoolSize: 2}), users: users, keys: keys}
}

func (r *redisReader) close() {
	if r.sub != nil {
		_ = r.sub.Close()
		<-r.subDone
	}
	_ = r.rdb.Close()
}

func (r *redisReader) present(ctx context.Context) (int, error) {
	n, err := r.rdb.DBSize(ctx).Result()
	return int(n), err
}

// arm subscribes to the expiry events.
func (r *redisReader) arm(ctx context.Context) error {
	r.sub = r.rdb.Subscribe(ctx, "__keyevent@0__:expired")
	if _, err := r.sub.Receive(ctx); err != nil { // the subscription's confirmation
		return err
	}
	r.subDone = make(chan struct{})
	go func() {
		defer close(r.subDone)
		for {
			m, err := r.sub.ReceiveMessage(context.Background())
			if err != nil {
				return
			}
			if strings.HasPrefix(m.Payload, "presence:") {
				now := time.Now()
				r.mu.Lock()
				r.notified++
				r.last = now
				r.mu.Unlock()
			}
		}
	}()
	return nil
}

// notifiedBy waits until every user's expiry event came, or deadline.
func (r *redisReader) notifiedBy(ctx context.Context, deadline time.Time) (int, time.Time) {
	for {
		r.mu.Lock()
		n, last := r.notified, r.last
		r.mu.Unlock()
		if n >= r.users || time.Now().After(deadline) || sleep(ctx, 20*time.Millisecond) != nil {
			return n, last
		}
	}
}

// offline reads every key's remaining TTL (PTTL), sleeps until 100 ms
// before the first is due, then reads the keys still there (EXISTS) every
// 10 ms until none is.
func (r *redisReader) offline(ctx context.Context, since time.Time, bound time.Duration) (first, all time.Time, err error) {
	var soonest time.Time // the earliest a key can expire: sent before it was read
	for start := 0; start < len(r.keys); start += redisPipeline {
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.DurationCmd, 0, redisPipeline)
		for _, k := range r.keys[start:min(start+redisPipeline, len(r.keys))] {
			cmds = append(cmds, pipe.PTTL(ctx, k))
		}
		sent := time.Now()
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return first, all, err
		}
		for _, c := range cmds {
			if d := c.Val(); d > 0 && (soonest.IsZero() || sent.Add(d).Before(soonest)) {
				soonest = sent.Add(d)
			}
		}
	}
	if wait := time.Until(soonest) - 100*time.Millisecond; !soonest.IsZero() && wait > 0 {
		if err := sleep(ctx, wait); err != nil {
			return first, all, err
		}
	}
	left := slices.Clone(r.keys)
	for {
		pipe := r.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(left))
		for i, k := range left {
			cmds[i] = pipe.Exists(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return first, all, err
		}
		now := time.Now()
		kept := left[:0]
		for i, c := range cmds {
			if c.Val() > 0 {
				kept = append(kept, left[i])
			}
		}
		if len(kept) < r.users && first.IsZero() {
			first = now
		}
		left = kept
		if len(left) == 0 {
			return first, now, nil
		}
		if now.Sub(since) > bound {
			return first, all, fmt.Errorf("%d keys still there %v after the kill", len(left), bound)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return first, all, err
		}
	}
}
