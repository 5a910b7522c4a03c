package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/rollcall/rollcall/internal/tlsconf"
)

// Config is one bench run. Addrs is required; zero fields take the
// defaults given.
type Config struct {
	// Addrs are the gateways' client addresses (host:port; ws:// URLs of
	// their /ws with Transport ws). Session i's home is Addrs[i%len].
	Addrs []string
	// Sessions to open (default 1000), at ConnectRate per second in total
	// (default 500), over Procs generators (default 1).
	Sessions    int
	ConnectRate float64
	Procs       int
	// Heartbeat overrides the interval the gateways tell clients in
	// welcome (0: theirs).
	Heartbeat time.Duration
	// StatusRate is status changes per second in total (default 100; a
	// negative value sends none).
	StatusRate float64
	// Subscribers is how many sessions subscribe (default 10, at most
	// half the sessions that are not silent; negative: none), each to Watch users (default 1000) of its own generator,
	// homed on other gateways than its own when there are several.
	Subscribers int
	Watch       int
	// SilentFailures sessions stop writing SilentAfter (default 1s) into
	// the window, their connections left open.
	SilentFailures int
	SilentAfter    time.Duration
	// ProbeRate, when positive, adds a probe: one more generator, apart
	// from the load, of ProbeSessions sessions per gateway (default 3),
	// one of them subscribed to the others' users homed on other
	// gateways; the others change status, ProbeRate changes per second in
	// all. Its propagation and round trips are reported apart
	// (Report.Probe): the load's own subscribers share their generator's
	// CPU with thousands of sessions, so on a loaded machine they measure
	// that generator's scheduling as well as the servers'.
	ProbeRate     float64
	ProbeSessions int
	// ProbePriority has the probe raise its scheduling priority
	// (SCHED_FIFO where permitted, else nice -20), so that the load does
	// not delay its reads. Only for a probe in a process of its own:
	// Spawn(ctx, Procs) starts it.
	ProbePriority bool
	// Warmup is how long to wait between every session tried (and the
	// subscribers subscribed) and the window's start, heartbeats flowing,
	// so that the servers' backlog from the connects and subscriptions
	// does not count in the window (default 0: none).
	Warmup time.Duration
	// Duration is the measured window (default 10s).
	Duration time.Duration
	// Transport is tcp (default), tls or ws; TLS configures tls and wss.
	Transport string
	TLS       tlsconf.ClientFiles
	// SecretFile holds the HS256 key to mint the sessions' tokens with
	// (the agent's --secret-file); empty sends none (a --dev agent).
	SecretFile string
	// PIDs are the server processes whose CPU and RSS are reported; nil
	// looks for the processes listening on Addrs' ports (FindListeners).
	PIDs []int
	// HTTPAddrs are the gateways' HTTP addresses whose /metrics give the
	// server-counted heartbeats and the gossip bytes; optional.
	HTTPAddrs []string
	// ProcRoot is where /proc is (default /proc).
	ProcRoot string
	// Spawn starts generator number i (required).
	Spawn func(ctx context.Context, i int) (*Worker, error)
	// Progress, if set, is given a one-line summary every second.
	Progress func(line string)
	// Logger receives warnings; nil logs nothing.
	Logger *zap.Logger
}

// Worker is a running generator: its protocol input and output.
type Worker struct {
	In   io.WriteCloser
	Out  io.Reader
	Wait func() error // after In is closed: the generator's end
	Kill func()       // stops it at once
}

// InProcess returns a Spawn that runs each generator as goroutines of
// this process (RunWorker over pipes).
func InProcess(log *zap.Logger) func(ctx context.Context, i int) (*Worker, error) {
	return func(ctx context.Context, _ int) (*Worker, error) {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			err := RunWorker(ctx, inR, outW, log)
			outW.Close()
			inR.Close()
			done <- err
		}()
		var werr error
		waited := false
		return &Worker{In: inW, Out: outR, Kill: cancel, Wait: func() error {
			if !waited {
				werr, waited = <-done, true
			}
			return werr
		}}, nil
	}
}

func (c *Config) withDefaults() (Config, error) {
	o := *c
	if len(o.Addrs) == 0 {
		return o, errors.New("bench: no gateway addresses")
	}
	if o.Spawn == nil {
		return o, errors.New("bench: no Spawn")
	}
	if o.Sessions == 0 {
		o.Sessions = 1000
	}
	if o.ConnectRate == 0 {
		o.ConnectRate = 500
	}
	if o.Procs == 0 {
		o.Procs = 1
	}
	if o.StatusRate == 0 {
		o.StatusRate = 100
	}
	o.StatusRate = max(o.StatusRate, 0)
	if o.Subscribers == 0 {
		o.Subscribers = min(10, (o.Sessions-o.SilentFailures)/2)
		if o.Subscribers <= 0 {
			o.Subscribers = -1
		}
	}
	o.Subscribers = max(o.Subscribers, 0)
	if o.Watch == 0 {
		o.Watch = 1000
	}
	if o.SilentAfter == 0 {
		o.SilentAfter = time.Second
	}
	if o.Duration == 0 {
		o.Duration = 10 * time.Second
	}
	if o.Transport == "" {
		o.Transport = "tcp"
	}
	if o.ProbeSessions == 0 {
		o.ProbeSessions = 3
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	switch {
	case o.Sessions < 0 || o.Procs < 0 || o.ConnectRate < 0 || o.SilentFailures < 0 || o.Watch < 0:
		return o, errors.New("bench: negative sessions, procs, connect rate, watch or silent failures")
	case o.ProbeRate < 0 || o.ProbeSessions < 2:
		return o, errors.New("bench: negative probe rate, or fewer than 2 probe sessions per gateway")
	case o.Procs > o.Sessions:
		return o, fmt.Errorf("bench: %d procs for %d sessions", o.Procs, o.Sessions)
	case o.Subscribers+o.SilentFailures > o.Sessions:
		return o, fmt.Errorf("bench: %d subscribers and %d silent failures exceed %d sessions", o.Subscribers, o.SilentFailures, o.Sessions)
	case o.Duration < 0 || o.Heartbeat < 0 || o.SilentAfter < 0 || o.Warmup < 0:
		return o, errors.New("bench: negative duration, heartbeat, silent-after or warmup")
	case o.Transport != "tcp" && o.Transport != "tls" && o.Transport != "ws":
		return o, fmt.Errorf("bench: transport %q: want tcp, tls or ws", o.Transport)
	case o.Transport == "tls" && !o.TLS.On():
		o.TLS.Enabled = true
	}
	if o.Transport == "ws" {
		addrs := make([]string, len(o.Addrs))
		for i, a := range o.Addrs {
			if !strings.Contains(a, "://") {
				scheme := "ws://"
				if o.TLS.On() {
					scheme = "wss://"
				}
				a = scheme + a + "/ws"
			}
			addrs[i] = a
		}
		o.Addrs = addrs
	}
	return o, nil
}

// share splits n over k parts, the first n%k one larger.
func share(n, k, i int) int {
	s := n / k
	if i < n%k {
		s++
	}
	return s
}

// workerConfigs splits the run over the generators.
func (c *Config) workerConfigs(run string) []WorkerConfig {
	var out []WorkerConfig
	base := 0
	for i := range c.Procs {
		n := share(c.Sessions, c.Procs, i)
		frac := float64(n) / float64(c.Sessions)
		wc := WorkerConfig{
			Index: i, Run: run, Base: base, Sessions: n, Addrs: c.Addrs, Transport: c.Transport,
			SecretFile: c.SecretFile, ConnectRate: c.ConnectRate * frac, Heartbeat: c.Heartbeat,
			StatusRate: c.StatusRate * frac, Subscribers: share(c.Subscribers, c.Procs, i), Watch: c.Watch,
			Silent: share(c.SilentFailures, c.Procs, i), SilentAfter: c.SilentAfter,
		}
		if c.TLS.On() {
			t := c.TLS
			wc.TLS = &t
		}
		base += n
		out = append(out, wc)
	}
	if c.ProbeRate > 0 {
		n := c.ProbeSessions * len(c.Addrs)
		out = append(out, WorkerConfig{
			Index: c.Procs, Run: run, Base: base, Sessions: n, Addrs: c.Addrs, Transport: c.Transport, TLS: out[0].TLS,
			SecretFile: c.SecretFile, ConnectRate: min(c.ConnectRate, 100), Heartbeat: c.Heartbeat,
			StatusRate: c.ProbeRate, Subscribers: len(c.Addrs), Watch: n, Priority: c.ProbePriority,
		})
	}
	return out
}

type workerMsg struct {
	i   int
	m   Msg
	err error
}

// Run runs a bench: it starts the generators, waits until every session
// was tried, measures for Duration, and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := c.Logger
	rep := &Report{Config: reportConfig(c)}

	pids := c.PIDs
	if pids == nil {
		found, err := FindListeners(c.ProcRoot, c.Addrs)
		if err != nil {
			log.Warn("finding the server processes", zap.Error(err))
		}
		pids = found
	}
	rep.Server.PIDs = pids
	if c.Subscribers > 0 && c.Subscribers < c.Procs {
		log.Warn("fewer subscribers than generators: the generators without one measure no propagation or offline detection",
			zap.Int("subscribers", c.Subscribers), zap.Int("procs", c.Procs))
	}
	before, procOK := SampleAll(c.ProcRoot, pids)

	run := fmt.Sprintf("bench%x", time.Now().UnixNano()&0xffffffffff)
	wcs := c.workerConfigs(run)
	workers := make([]*Worker, 0, len(wcs))
	msgs := make(chan workerMsg, 64*len(wcs))
	defer func() {
		for _, w := range workers {
			w.In.Close()
		}
		for _, w := range workers {
			done := make(chan struct{})
			go func() { _ = w.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				w.Kill()
				<-done
			}
		}
	}()
	for i, wc := range wcs {
		w, err := c.Spawn(ctx, i)
		if err != nil {
			return nil, fmt.Errorf("bench: start generator %d: %w", i, err)
		}
		workers = append(workers, w)
		go readWorker(i, w.Out, msgs)
		if err := writeMsg(w.In, Msg{Type: MsgConfig, Config: &wc}); err != nil {
			return nil, fmt.Errorf("bench: generator %d: %w", i, err)
		}
	}
	progress := make([]Progress, len(workers))
	phase := "connecting"
	t0 := time.Now()
	showProgress := func() {
		if c.Progress == nil {
			return
		}
		var p Progress
		for i, q := range progress {
			if i == c.Procs {
				continue // the probe
			}
			p.Established += q.Established
			p.Failed += q.Failed
			p.Heartbeats += q.Heartbeats
			p.Changes += q.Changes
		}
		c.Progress(fmt.Sprintf("%s %4.0fs: %d/%d sessions (%d failed), %d heartbeats, %d changes",
			phase, time.Since(t0).Seconds(), p.Established, c.Sessions, p.Failed, p.Heartbeats, p.Changes))
	}
	// The progress line is drawn from wait, on this goroutine, so it reads
	// phase and progress without a lock.
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	// wait collects one message of type want from every generator.
	wait := func(want string, deadline <-chan time.Time) ([]Msg, error) {
		got := make([]Msg, len(workers))
		n := 0
		for n < len(workers) {
			select {
			case wm := <-msgs:
				if wm.err != nil {
					if errors.Is(wm.err, errOutputEnded) && want == MsgResult && got[wm.i].Type != "" {
						continue // a generator ends once it has sent its result
					}
					return nil, fmt.Errorf("bench: generator %d: %w", wm.i, workerEnd(workers[wm.i], wm.err))
				}
				switch wm.m.Type {
				case MsgProgress:
					progress[wm.i] = *wm.m.Progress
					continue
				case MsgError:
					return nil, fmt.Errorf("bench: generator %d: %s", wm.i, wm.m.Error)
				case want:
					if got[wm.i].Type != "" {
						return nil, fmt.Errorf("bench: generator %d: a second %s", wm.i, want)
					}
					got[wm.i] = wm.m
					n++
				default:
					return nil, fmt.Errorf("bench: generator %d: unexpected %s", wm.i, wm.m.Type)
				}
			case <-ticker.C:
				showProgress()
			case <-deadline:
				if want == "" {
					return nil, nil
				}
				return nil, fmt.Errorf("bench: timed out waiting for the generators' %s", want)
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return got, nil
	}

	connectBound := time.Duration(float64(c.Sessions)/c.ConnectRate*float64(time.Second)) + 2*time.Minute
	conns, err := wait(MsgConnected, time.After(connectBound))
	if err != nil {
		return nil, err
	}
	for i, m := range conns {
		if i == c.Procs {
			rep.Probe = &ProbeReport{Sessions: m.Connected.Established, Subscribed: m.Connected.Subscribed}
			continue
		}
		rep.addConnected(m.Connected)
	}
	if t := time.Duration(rep.Offline.TimeoutMS) * time.Millisecond; c.SilentFailures > 0 && c.SilentAfter+t >= c.Duration {
		log.Warn("the window ends before the silent sessions can expire: give a --duration past --silent-after plus the server timeout",
			zap.Duration("silent_after", c.SilentAfter), zap.Duration("server_timeout", t), zap.Duration("duration", c.Duration))
	}
	after, _ := SampleAll(c.ProcRoot, pids)
	if c.Warmup > 0 {
		phase = "warming up"
		if _, err := wait("", time.After(c.Warmup)); err != nil {
			return nil, err
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	var m0 Scraped
	var scrapeOK bool
	if len(c.HTTPAddrs) > 0 {
		m0, scrapeOK = scrapeAll(ctx, hc, c.HTTPAddrs)
		if !scrapeOK {
			log.Warn("metrics not readable; server-counted rates left out", zap.Strings("http_addrs", c.HTTPAddrs))
		}
	}
	cpu0, cpuOK := SampleAll(c.ProcRoot, pids)
	phase = "measuring"
	start := time.Now()
	for i, w := range workers {
		if err := writeMsg(w.In, Msg{Type: MsgStart}); err != nil {
			return nil, fmt.Errorf("bench: generator %d: %w", i, err)
		}
	}
	if _, err := wait("", time.After(c.Duration)); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	cpu1, cpuOK1 := SampleAll(c.ProcRoot, pids)
	var m1 Scraped
	if scrapeOK {
		m1, scrapeOK = scrapeAll(ctx, hc, c.HTTPAddrs)
	}
	phase = "stopping"
	for i, w := range workers {
		if err := writeMsg(w.In, Msg{Type: MsgStop}); err != nil {
			return nil, fmt.Errorf("bench: generator %d: %w", i, err)
		}
	}
	results, err := wait(MsgResult, time.After(time.Minute))
	if err != nil {
		return nil, err
	}
	ticker.Stop()
	rep.Duration = elapsed.Seconds()
	for i, m := range results {
		if i == c.Procs {
			rep.Probe.add(m.Result)
			continue
		}
		rep.addResult(m.Result)
	}
	if procOK && len(pids) > 0 {
		rep.Server.RSSBeforeBytes = before.RSSBytes
		rep.Server.RSSAfterConnectBytes = after.RSSBytes
		if rep.Sessions.Established > 0 {
			rep.Server.RSSPerSessionBytes = float64(after.RSSBytes-before.RSSBytes) / float64(rep.Sessions.Established)
		}
	}
	if cpuOK && cpuOK1 && len(pids) > 0 {
		cs := cpu1.CPUSeconds - cpu0.CPUSeconds
		rep.Server.CPUCoreSeconds = &cs
		rep.Server.RSSEndBytes = cpu1.RSSBytes
	}
	if scrapeOK {
		rep.addScraped(m0, m1, elapsed)
	}
	rep.finish()
	return rep, nil
}

// SampleAll sums the samples of pids under root (/proc); ok is false if any
// could not be read.
func SampleAll(root string, pids []int) (ProcSample, bool) {
	var t ProcSample
	for _, p := range pids {
		s, err := SampleProc(root, p)
		if err != nil {
			return ProcSample{}, false
		}
		t.CPUSeconds += s.CPUSeconds
		t.RSSBytes += s.RSSBytes
	}
	return t, true
}

// workerEnd adds to err, a generator's output that failed or ended, how
// the generator ended, or that it has not within a few seconds.
func workerEnd(w *Worker, err error) error {
	done := make(chan error, 1)
	go func() { done <- w.Wait() }()
	select {
	case werr := <-done:
		if werr != nil {
			return fmt.Errorf("%w (%v)", err, werr)
		}
		return fmt.Errorf("%w (the generator exited with status 0)", err)
	case <-time.After(3 * time.Second):
		return fmt.Errorf("%w (the generator is still running)", err)
	}
}

func writeMsg(w io.Writer, m Msg) error {
	b, err := EncodeMsg(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// errOutputEnded is a generator's output ending: after its result, how a
// generator ends; before, a failure.
var errOutputEnded = errors.New("output ended")

// readWorker decodes a generator's output until it ends; the first bad
// line or the end of output is sent as an error.
func readWorker(i int, r io.Reader, out chan<- workerMsg) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMsgBytes)
	for sc.Scan() {
		m, err := DecodeMsg(sc.Bytes())
		if err != nil {
			out <- workerMsg{i: i, err: err}
			return
		}
		out <- workerMsg{i: i, m: m}
	}
	err := sc.Err()
	if err == nil {
		err = errOutputEnded
	}
	out <- workerMsg{i: i, err: err}
}
