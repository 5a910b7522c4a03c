// Package compare runs Rollcall and the Redis TTL baseline side by side
// under the same presence load (docs/bench-compare.md): one redis-server
// and N baseline gateways (cmd/redis-baseline) against N gossip-joined
// Rollcall agents, servers pinned to one core and the load to another,
// the load run alternately against each system for a few rounds, and the
// CPU of each whole system read from /proc/PID/stat.
package compare

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rollcall/rollcall/bench/baseline/procstat"
)

// Config configures Run. Zero fields take the documented defaults.
type Config struct {
	// Rollcall is the rollcall binary. Default "bin/rollcall".
	Rollcall string
	// Baseline is the redis-baseline binary. Default "bin/redis-baseline".
	Baseline string
	// RedisServer is the redis-server binary. Default: from PATH.
	RedisServer string
	// Gateways is how many gateways each system has. Default 3.
	Gateways int
	// Load is the load generator's argv before its flags; it gets
	// --addrs --sessions --heartbeat --status-rate --subscribers
	// --duration --procs --format json --pids and prints one JSON object
	// with at least "heartbeats" and "server_cpu_seconds". Default: this
	// program's own `load` ([os.Executable(), "load"]); `rollcall bench`
	// is [bin/rollcall, bench].
	Load []string
	// Sessions, Heartbeat, StatusRate, Subscribers, Duration and Procs
	// are passed to the load. Defaults 10000, 5s, 10, 100, 30s, 1.
	Sessions    int
	Heartbeat   time.Duration
	StatusRate  float64
	Subscribers int
	Duration    time.Duration
	Procs       int
	// Rounds is how many times each system runs the load, alternately.
	// Default 3.
	Rounds int
	// ServerCPUs and LoadCPUs are taskset CPU lists. Defaults "0" and "1".
	ServerCPUs, LoadCPUs string
	// Dir holds the processes' logs. Default: a temporary directory.
	Dir string
	// Log receives progress lines. Default os.Stderr.
	Log io.Writer
}

func (c *Config) defaults() error {
	if c.Rollcall == "" {
		c.Rollcall = "bin/rollcall"
	}
	if c.Baseline == "" {
		c.Baseline = "bin/redis-baseline"
	}
	if c.Gateways <= 0 {
		c.Gateways = 3
	}
	if len(c.Load) == 0 {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("own executable: %w", err)
		}
		c.Load = []string{self, "load"}
	}
	if c.Sessions <= 0 {
		c.Sessions = 10000
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = 5 * time.Second
	}
	if c.StatusRate < 0 {
		c.StatusRate = 0
	} else if c.StatusRate == 0 {
		c.StatusRate = 10
	}
	if c.Subscribers < 0 {
		c.Subscribers = 0
	} else if c.Subscribers == 0 {
		c.Subscribers = 100
	}
	if c.Duration <= 0 {
		c.Duration = 30 * time.Second
	}
	if c.Procs <= 0 {
		c.Procs = 1
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
	return nil
}

// System is one side of the comparison.
type System struct {
	Name  string
	Addrs []string // client addresses
	PIDs  []int    // every process of the system
	Names []string // the processes' names, as PIDs
}

// Sample is one load run against one system.
type Sample struct {
	System            string             `json:"system"`
	Round             int                `json:"round"`
	Heartbeats        float64            `json:"heartbeats"`
	ServerCPUSeconds  float64            `json:"server_cpu_seconds"`
	HeartbeatsPerCore float64            `json:"heartbeats_per_core_second"`
	RSSBefore         int64              `json:"rss_before_bytes"`
	RSSPeak           int64              `json:"rss_peak_bytes"`
	CPUByProcess      map[string]float64 `json:"cpu_seconds_by_process_whole_run"`
	Load              map[string]any     `json:"load"`
}

// Result is the whole comparison.
type Result struct {
	Config  map[string]any     `json:"config"`
	Samples []Sample           `json:"samples"`
	Median  map[string]float64 `json:"median_heartbeats_per_core_second"`
	Ratio   float64            `json:"ratio_rollcall_over_redis"`
	// RSS is (peak - before) / sessions of each system's first round:
	// later rounds start from the memory the first one left allocated.
	RSS map[string]float64 `json:"rss_bytes_per_session_first_round"`
}

// Run starts both systems, runs the load alternately against each, and
// stops them.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.defaults(); err != nil {
		return Result{}, err
	}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "bench-compare-")
		if err != nil {
			return Result{}, err
		}
		cfg.Dir = d
	}
	fmt.Fprintf(cfg.Log, "bench-compare: logs in %s\n", cfg.Dir)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range slices.Backward(procs) {
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
	}()
	start := func(name string, argv ...string) (*exec.Cmd, error) {
		if _, err := exec.LookPath("taskset"); err == nil {
			argv = append([]string{"taskset", "-c", cfg.ServerCPUs}, argv...)
		}
		f, err := os.Create(filepath.Join(cfg.Dir, name+".log"))
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		f.Close()
		procs = append(procs, cmd)
		return cmd, nil
	}

	// the baseline: one redis-server, N gateways sharing it
	rs := cfg.RedisServer
	if rs == "" {
		p, err := findRedisServer(cfg.Log)
		if err != nil {
			return Result{}, err
		}
		rs = p
	}
	rport, err := freePort()
	if err != nil {
		return Result{}, err
	}
	raddr := "127.0.0.1:" + strconv.Itoa(rport)
	rcmd, err := start("redis-server", rs, "--port", strconv.Itoa(rport), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--notify-keyspace-events", "Ex", "--dir", cfg.Dir)
	if err != nil {
		return Result{}, err
	}
	if err := waitRedis(ctx, raddr); err != nil {
		return Result{}, err
	}
	redisSys := System{Name: "redis", PIDs: []int{rcmd.Process.Pid}, Names: []string{"redis-server"}}
	timeout := 3 * cfg.Heartbeat
	for i := range cfg.Gateways {
		p, err := freePort()
		if err != nil {
			return Result{}, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(p)
		name := fmt.Sprintf("rgw%d", i+1)
		c, err := start(name, cfg.Baseline, "--addr", addr, "--redis", raddr, "--name", name,
			"--heartbeat", cfg.Heartbeat.String(), "--timeout", timeout.String())
		if err != nil {
			return Result{}, err
		}
		redisSys.Addrs = append(redisSys.Addrs, addr)
		redisSys.PIDs = append(redisSys.PIDs, c.Process.Pid)
		redisSys.Names = append(redisSys.Names, name)
	}

	// Rollcall: N gossip-joined agents
	rcSys := System{Name: "rollcall"}
	var firstGossip string
	for i := range cfg.Gateways {
		ports := make([]int, 3)
		for j := range ports {
			if ports[j], err = freePort(); err != nil {
				return Result{}, err
			}
		}
		addr := "127.0.0.1:" + strconv.Itoa(ports[0])
		gossip := "127.0.0.1:" + strconv.Itoa(ports[2])
		name := fmt.Sprintf("rc%d", i+1)
		argv := []string{cfg.Rollcall, "agent", "--dev", "--name", name, "--client-addr", addr,
			"--http-addr", "127.0.0.1:" + strconv.Itoa(ports[1]), "--gossip-addr", gossip,
			"--heartbeat", cfg.Heartbeat.String(), "--timeout", timeout.String(),
			"--max-connections-per-ip", strconv.Itoa(cfg.Sessions + 1000), "--log-level", "warn"}
		if firstGossip != "" {
			argv = append(argv, "--join", firstGossip)
		} else {
			firstGossip = gossip
		}
		c, err := start(name, argv...)
		if err != nil {
			return Result{}, err
		}
		rcSys.Addrs = append(rcSys.Addrs, addr)
		rcSys.PIDs = append(rcSys.PIDs, c.Process.Pid)
		rcSys.Names = append(rcSys.Names, name)
	}
	for _, a := range append(slices.Clone(redisSys.Addrs), rcSys.Addrs...) {
		if err := waitTCP(ctx, a); err != nil {
			return Result{}, fmt.Errorf("%w (logs in %s)", err, cfg.Dir)
		}
	}
	fmt.Fprintf(cfg.Log, "bench-compare: redis-server %s, baseline gateways %v, rollcall agents %v\n",
		raddr, redisSys.Addrs, rcSys.Addrs)

	res := Result{Config: map[string]any{"gateways": cfg.Gateways, "sessions": cfg.Sessions,
		"heartbeat": cfg.Heartbeat.String(), "status_rate": cfg.StatusRate, "subscribers": cfg.Subscribers,
		"duration": cfg.Duration.String(), "rounds": cfg.Rounds, "load": strings.Join(cfg.Load, " "),
		"server_cpus": cfg.ServerCPUs, "load_cpus": cfg.LoadCPUs}}
	for r := 1; r <= cfg.Rounds; r++ {
		for _, sys := range []System{rcSys, redisSys} {
			s, err := runLoad(ctx, cfg, sys, r)
			if err != nil {
				return res, fmt.Errorf("round %d, %s: %w", r, sys.Name, err)
			}
			fmt.Fprintf(cfg.Log, "round %d  %-8s  %8.0f heartbeats  %6.2f cpu-s  %8.0f hb/core-s  rss %4.0f -> %4.0f MB  whole-run cpu-s %v\n",
				r, sys.Name, s.Heartbeats, s.ServerCPUSeconds, s.HeartbeatsPerCore,
				float64(s.RSSBefore)/(1<<20), float64(s.RSSPeak)/(1<<20), s.CPUByProcess)
			res.Samples = append(res.Samples, s)
		}
	}
	res.Median = map[string]float64{}
	res.RSS = map[string]float64{}
	for _, name := range []string{"rollcall", "redis"} {
		var hb []float64
		for _, s := range res.Samples {
			if s.System == name {
				hb = append(hb, s.HeartbeatsPerCore)
				if s.Round == 1 {
					res.RSS[name] = float64(s.RSSPeak-s.RSSBefore) / float64(cfg.Sessions)
				}
			}
		}
		res.Median[name] = median(hb)
	}
	if res.Median["redis"] > 0 {
		res.Ratio = res.Median["rollcall"] / res.Median["redis"]
	}
	return res, nil
}

// runLoad runs the load generator once against sys, pinned to the load
// CPUs, and samples the system's RSS halfway through its window.
func runLoad(ctx context.Context, cfg Config, sys System, round int) (Sample, error) {
	pids := make([]string, len(sys.PIDs))
	for i, p := range sys.PIDs {
		pids[i] = strconv.Itoa(p)
	}
	argv := append(slices.Clone(cfg.Load),
		"--addrs", strings.Join(sys.Addrs, ","), "--sessions", strconv.Itoa(cfg.Sessions),
		"--heartbeat", cfg.Heartbeat.String(), "--status-rate", strconv.FormatFloat(cfg.StatusRate, 'f', -1, 64),
		"--subscribers", strconv.Itoa(cfg.Subscribers), "--duration", cfg.Duration.String(),
		"--procs", strconv.Itoa(cfg.Procs), "--format", "json", "--pids", strings.Join(pids, ","))
	if _, err := exec.LookPath("taskset"); err == nil {
		argv = append([]string{"taskset", "-c", cfg.LoadCPUs}, argv...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	stderr, err := os.Create(filepath.Join(cfg.Dir, fmt.Sprintf("load-%s-%d.log", sys.Name, round)))
	if err != nil {
		return Sample{}, err
	}
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = &out, stderr
	rssSum := func() int64 {
		var sum int64
		for _, p := range sys.PIDs {
			if r, err := procstat.RSS(p); err == nil {
				sum += r
			}
		}
		return sum
	}
	cpuAll := func() []float64 {
		out := make([]float64, len(sys.PIDs))
		for i, p := range sys.PIDs {
			out[i], _ = procstat.CPU(p)
		}
		return out
	}
	before := rssSum()
	cpu0 := cpuAll()
	if err := cmd.Start(); err != nil {
		return Sample{}, fmt.Errorf("load: %w", err)
	}
	// the system's RSS, every second: the peak is kept
	rssc := make(chan int64, 1)
	stop := make(chan struct{})
	go func() {
		var best int64
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				rssc <- best
				return
			case <-t.C:
				best = max(best, rssSum())
			}
		}
	}()
	err = cmd.Wait()
	close(stop)
	rss := <-rssc
	cpu1 := cpuAll()
	byProc := map[string]float64{}
	for i, n := range sys.Names {
		byProc[n] = float64(int((cpu1[i]-cpu0[i])*100+0.5)) / 100
	}
	if err != nil {
		return Sample{}, fmt.Errorf("load %v: %w (see %s)", argv, err, stderr.Name())
	}
	m, err := lastJSON(out.Bytes())
	if err != nil {
		return Sample{}, fmt.Errorf("load output: %w", err)
	}
	s := Sample{System: sys.Name, Round: round, RSSBefore: before, RSSPeak: rss, CPUByProcess: byProc, Load: m}
	s.Heartbeats, _ = m["heartbeats"].(float64)
	s.ServerCPUSeconds, _ = m["server_cpu_seconds"].(float64)
	if s.ServerCPUSeconds > 0 {
		s.HeartbeatsPerCore = s.Heartbeats / s.ServerCPUSeconds
	}
	return s, nil
}

// lastJSON is the last line of out that is a JSON object.
func lastJSON(out []byte) (map[string]any, error) {
	var m map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var v map[string]any
		if json.Unmarshal(sc.Bytes(), &v) == nil {
			m = v
		}
	}
	if m == nil {
		var v map[string]any
		if json.Unmarshal(out, &v) == nil { // one indented object
			return v, nil
		}
		return nil, errors.New("no JSON object in the load's output")
	}
	return m, nil
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

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
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

func waitRedis(ctx context.Context, addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis-server %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
