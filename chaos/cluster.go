package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rollcall/rollcall/internal/portpick"
)

// ClusterConfig says how to start the agents.
type ClusterConfig struct {
	Bin          string        // the rollcall binary
	Dir          string        // run directory: one log file per gateway
	Gateways     int           // how many agents (3 to 5)
	Heartbeat    time.Duration // --heartbeat
	Timeout      time.Duration // --timeout
	DrainTimeout time.Duration // --drain-timeout
	// DisconnectGrace is --disconnect-grace (0: none).
	DisconnectGrace time.Duration
	// Net, if set, runs each agent in its own network namespace of it,
	// on fixed ports of its own address (network faults).
	Net *network
}

// Gateway is one agent: its name and ports are fixed for the run; each
// start is a new life (incarnation) under the same name and ports.
type Gateway struct {
	// Static after NewCluster.
	Name       string
	ClientAddr string
	HTTPAddr   string
	GossipAddr string
	logPath    string
	index      int // in Cluster.GWs

	mu       sync.Mutex
	life     int           // how many times it has been started
	cmd      *exec.Cmd     // the current process, nil before the first start
	exited   chan struct{} // closed when the current process has exited
	expected string        // what the harness did that should end it (kill, term, stop)
	stopped  bool          // paused with SIGSTOP
}

// Cluster runs the agents of one run. Its methods may be called from any
// goroutine; one fault at a time touches a gateway.
type Cluster struct {
	cfg   ClusterConfig
	rec   *Recorder
	GWs   []*Gateway
	ports []*portpick.Port // held until Close
}

// NewCluster picks free loopback ports for every gateway. Nothing starts.
func NewCluster(cfg ClusterConfig, rec *Recorder) (*Cluster, error) {
	c := &Cluster{cfg: cfg, rec: rec}
	for i := 1; i <= cfg.Gateways; i++ {
		g := &Gateway{Name: fmt.Sprintf("gw%d", i), index: i - 1}
		g.logPath = filepath.Join(cfg.Dir, g.Name+".log")
		if cfg.Net != nil {
			a := cfg.Net.addr(i - 1)
			g.ClientAddr, g.HTTPAddr, g.GossipAddr = a+":7400", a+":7401", a+":7946"
			c.GWs = append(c.GWs, g)
			continue
		}
		var err error
		if g.ClientAddr, err = c.freePort(false); err != nil {
			return nil, err
		}
		if g.HTTPAddr, err = c.freePort(false); err != nil {
			return nil, err
		}
		if g.GossipAddr, err = c.freePort(true); err != nil {
			return nil, err
		}
		c.GWs = append(c.GWs, g)
	}
	return c, nil
}

// freePort returns a loopback address with a free TCP port (and UDP, for
// gossip), held for the cluster until Close so that no other harness or
// test picks it while a gateway is down between restarts.
func (c *Cluster) freePort(udp bool) (string, error) {
	p, err := portpick.Loopback(udp)
	if err != nil {
		return "", err
	}
	c.ports = append(c.ports, p)
	return p.Addr, nil
}

// Start starts every gateway, each joining those started before it, and
// waits until every one lists all of them alive.
func (c *Cluster) Start(ctx context.Context) error {
	for i, g := range c.GWs {
		// Not nil, which start takes for every other gateway: the first
		// one joins nobody, or it would not be ready (/readyz) until the
		// ones started after it are up.
		join := []string{}
		for _, o := range c.GWs[:i] {
			join = append(join, o.GossipAddr)
		}
		if err := c.start(g, join); err != nil {
			return err
		}
		if err := c.WaitReady(ctx, g, 20*time.Second); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, g := range c.GWs {
		for {
			n, err := aliveMembers(ctx, g.HTTPAddr)
			if err == nil && n == len(c.GWs) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s lists %d alive members, want %d (%v); see %s", g.Name, n, len(c.GWs), err, g.logPath)
			}
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// start starts g's next life, joining join (every other gateway if nil).
func (c *Cluster) start(g *Gateway, join []string) error {
	if join == nil {
		for _, o := range c.GWs {
			if o != g {
				join = append(join, o.GossipAddr)
			}
		}
	}
	args := []string{"agent", "--dev", "--name", g.Name,
		"--client-addr", g.ClientAddr, "--http-addr", g.HTTPAddr, "--gossip-addr", g.GossipAddr,
		"--gossip-profile", "local", "--heartbeat", c.cfg.Heartbeat.String(), "--timeout", c.cfg.Timeout.String(),
		"--drain-timeout", c.cfg.DrainTimeout.String(), "--disconnect-grace", c.cfg.DisconnectGrace.String()}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	logf, err := os.OpenFile(g.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.life++
	fmt.Fprintf(logf, "=== chaos: %s life %d at t=%.1fms: %s %s\n", g.Name, g.life, c.rec.Now(), c.cfg.Bin, strings.Join(args, " "))
	name, argv := c.cfg.Bin, args
	if c.cfg.Net != nil {
		name, argv = c.cfg.Net.command(g.index, c.cfg.Bin, args)
	}
	cmd := exec.Command(name, argv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a kill reaches anything it started; and
	// killed with the harness if the harness dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", g.Name, err)
	}
	g.cmd, g.exited, g.expected, g.stopped = cmd, make(chan struct{}), "", false
	life, exited := g.life, g.exited
	c.rec.Write(Record{K: KindGW, GW: g.Name, Ev: "start", Life: life, PID: cmd.Process.Pid})
	go func() {
		err := cmd.Wait()
		logf.Close()
		status := "exit 0"
		if err != nil {
			status = err.Error()
		}
		g.mu.Lock()
		why := g.expected
		g.mu.Unlock()
		c.rec.Write(Record{K: KindGW, GW: g.Name, Ev: "exit", Life: life, Exit: status, Expected: why != "", Detail: why})
		close(exited)
	}()
	return nil
}

// Life returns g's current life (1 after the first start).
func (g *Gateway) Life() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.life
}

// Running reports whether g's current process has not exited.
func (g *Gateway) Running() bool {
	g.mu.Lock()
	ch := g.exited
	g.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// WaitReady waits until g accepts client connections and answers
// /readyz 200 (it has joined and caught up with a member, so its
// projection holds the cluster's sessions), then records it ready.
func (c *Cluster) WaitReady(ctx context.Context, g *Gateway, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if healthy(ctx, g) {
			c.rec.Write(Record{K: KindGW, GW: g.Name, Ev: "ready", Life: g.Life()})
			return nil
		}
		if !g.Running() {
			return fmt.Errorf("%s exited while starting; see %s", g.Name, g.logPath)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v; see %s", g.Name, within, g.logPath)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

func healthy(ctx context.Context, g *Gateway) bool {
	nc, err := dialConn(ctx, g.ClientAddr)
	if err != nil {
		return false
	}
	nc.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+g.HTTPAddr+"/readyz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// aliveMembers asks an agent's /v1/members how many members are alive.
func aliveMembers(ctx context.Context, httpAddr string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+httpAddr+"/v1/members", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var ms []struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ms); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range ms {
		if m.State == "alive" {
			n++
		}
	}
	return n, nil
}

// Members returns an agent's /v1/members answer, raw, for the log.
func (c *Cluster) Members(ctx context.Context, g *Gateway) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+g.HTTPAddr+"/v1/members", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var v any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return err.Error()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Signal sends sig to g's process group and records it. why, if set,
// marks the exit it causes as expected.
func (c *Cluster) Signal(g *Gateway, sig syscall.Signal, why string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cmd == nil {
		return fmt.Errorf("%s never started", g.Name)
	}
	if why != "" {
		g.expected = why
	}
	switch sig {
	case syscall.SIGSTOP:
		g.stopped = true
	case syscall.SIGCONT:
		g.stopped = false
	}
	c.rec.Write(Record{K: KindGW, GW: g.Name, Ev: "signal", Life: g.life, Sig: sigName(sig)})
	return syscall.Kill(-g.cmd.Process.Pid, sig)
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "KILL"
	case syscall.SIGTERM:
		return "TERM"
	case syscall.SIGSTOP:
		return "STOP"
	case syscall.SIGCONT:
		return "CONT"
	}
	return sig.String()
}

// WaitExit waits up to within for g's current process to exit.
func (c *Cluster) WaitExit(ctx context.Context, g *Gateway, within time.Duration) error {
	g.mu.Lock()
	ch := g.exited
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-time.After(within):
		return fmt.Errorf("%s did not exit within %v", g.Name, within)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Launch starts g's next life, joining every other gateway, without
// waiting for it to be ready.
func (c *Cluster) Launch(g *Gateway) error {
	if g.Running() {
		return fmt.Errorf("%s is still running", g.Name)
	}
	return c.start(g, nil)
}

// Restart launches g and waits until it is ready.
func (c *Cluster) Restart(ctx context.Context, g *Gateway) error {
	if err := c.Launch(g); err != nil {
		return err
	}
	return c.WaitReady(ctx, g, 20*time.Second)
}

// Close kills every agent (a stopped one too) and waits for them.
func (c *Cluster) Close() {
	for _, g := range c.GWs {
		if g.Running() {
			_ = c.Signal(g, syscall.SIGKILL, "stop")
		}
	}
	for _, g := range c.GWs {
		g.mu.Lock()
		ch := g.exited
		g.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
			}
		}
	}
	for _, p := range c.ports {
		p.Release()
	}
}

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
