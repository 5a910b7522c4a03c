package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testcluster"
)

// TestRunAgainstTwoGateways runs a short bench, in-process generators
// included, against two gossip-joined gateways and checks that what it
// reports holds together.
func TestBenchRunAgainstTwoGateways(t *testing.T) {
	gs := testcluster.Start(t, 2, testcluster.Options{Timeout: time.Second, Heartbeat: 100 * time.Millisecond})
	cfg := Config{
		Addrs:       []string{gs[0].GW.ClientAddr().String(), gs[1].GW.ClientAddr().String()},
		Sessions:    40,
		ConnectRate: 400,
		StatusRate:  50,
		Subscribers: 4,
		// two sessions go quiet at once; the gateways expire them after 1s
		SilentFailures: 2,
		SilentAfter:    time.Millisecond,
		Warmup:         200 * time.Millisecond,
		Duration:       2 * time.Second,
		Spawn:          InProcess(nil),
	}
	rep, err := Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Config.WarmupS != 0.2 || rep.Config.DurationS != 2 {
		t.Errorf("config %+v", rep.Config)
	}
	if rep.Sessions.Established != 40 || rep.Sessions.Failed != 0 || rep.Connect.Count != 40 {
		t.Fatalf("sessions %+v, connect %+v", rep.Sessions, rep.Connect)
	}
	if rep.Heartbeats.Sent == 0 || rep.Heartbeats.IntervalMS != 100 || rep.Heartbeats.ServerPerSec != nil {
		t.Errorf("heartbeats %+v", rep.Heartbeats)
	}
	if rep.StatusChanges.OK == 0 || rep.Request.Count != rep.StatusChanges.OK || rep.StatusChanges.Errors != 0 {
		t.Errorf("status changes %+v, request %+v", rep.StatusChanges, rep.Request)
	}
	if rep.Propagation.Count == 0 || rep.Propagation.P50 <= 0 || rep.Propagation.P99 < rep.Propagation.P50 {
		t.Errorf("propagation %+v", rep.Propagation)
	}
	if rep.Subscribers.Subscribed != 4 || rep.Subscribers.Watched != 36 {
		t.Errorf("subscribers %+v", rep.Subscribers)
	}
	// Silent sessions are watched; one that expired within the window
	// shows offline no sooner than the server timeout after its last line
	// (the maximum: a gateway wrongly suspected by the other under load
	// shows its sessions offline early, and that is what a subscriber saw).
	if rep.Offline.Silent != 2 || rep.Offline.Detected > 2 || rep.Offline.TimeoutMS != 1000 {
		t.Errorf("offline %+v", rep.Offline)
	}
	if rep.Offline.Detected > 0 && rep.Offline.Detection.Max < float64(rep.Offline.TimeoutMS) {
		t.Errorf("offline detected before the server timeout: %+v", rep.Offline)
	}
	// the gateways are this process
	if len(rep.Server.PIDs) != 1 || rep.Server.PIDs[0] != os.Getpid() || rep.Server.CPUCoreSeconds == nil {
		t.Errorf("server %+v", rep.Server)
	}
	if rep.Gossip.Bytes != nil {
		t.Errorf("gossip bytes without /metrics: %v", *rep.Gossip.Bytes)
	}

	var tab bytes.Buffer
	if err := rep.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", tab.String())
	for _, want := range []string{"40 established, 0 failed", "propagation", "offline detection", "server cpu", "n/a bytes sent"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"sessions", "connect_ms", "heartbeats", "status_changes", "request_ms", "propagation_ms", "offline", "server", "gossip", "timeline"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	svg := filepath.Join(t.TempDir(), "bench.svg")
	if err := rep.WritePlot(svg); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("Propagation")) {
		t.Fatalf("plot: %v", err)
	}
	if err := rep.WritePlot(filepath.Join(t.TempDir(), "bench.png")); err == nil {
		t.Fatal("a .png plot accepted")
	}
}

func TestBenchReportFromWorkerReports(t *testing.T) {
	var conn, req, prop, off Histogram
	for i := 1; i <= 100; i++ {
		conn.Record(time.Duration(i) * time.Millisecond)
		req.Record(time.Duration(i) * 100 * time.Microsecond)
		prop.Record(time.Duration(i) * time.Millisecond)
	}
	off.Record(15250 * time.Millisecond)
	r := &Report{Config: RunConfig{Sessions: 120, StatusRate: 50, Addrs: []string{"a:1"}, Silent: 1}}
	r.addConnected(&ConnectReport{Established: 100, Failed: 20, Errors: map[string]int{"refused": 20}, Connect: conn, TimeoutMS: 15000, HeartbeatMS: 5000})
	r.addResult(&WorkerResult{Elapsed: 2 * time.Second, Heartbeats: 400, Changes: 100, Request: req, Propagation: prop, Offline: off, Silent: 1,
		Timeline: []Second{{Changes: 50, Request: req}, {Changes: 50, Request: req}}})
	r.addResult(&WorkerResult{Elapsed: 2 * time.Second, Heartbeats: 400})
	cpu := 2.0
	r.Server.PIDs, r.Server.CPUCoreSeconds = []int{7}, &cpu
	r.addScraped(Scraped{metricHeartbeats: 100, metricGossipBytes: 1000}, Scraped{metricHeartbeats: 900, metricGossipBytes: 6000}, 2*time.Second)
	r.finish()
	if r.Heartbeats.PerSec != 400 || *r.Heartbeats.ServerPerSec != 400 || r.StatusChanges.PerSec != 50 {
		t.Errorf("rates %+v %+v", r.Heartbeats, r.StatusChanges)
	}
	if *r.Server.CPUPerHeartbeatUS != 2.0/800*1e6 || *r.Gossip.PerChange != 50 {
		t.Errorf("per heartbeat %v, per change %v", *r.Server.CPUPerHeartbeatUS, *r.Gossip.PerChange)
	}
	if d := r.Offline.Beyond.P50; d < 240 || d > 260 {
		t.Errorf("beyond the timeout %v ms, want about 250", d)
	}
	if len(r.Timeline) != 2 || r.Timeline[1].Changes != 50 {
		t.Errorf("timeline %+v", r.Timeline)
	}
	var tab bytes.Buffer
	if err := r.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"100 established, 20 failed", "20× refused", "400 counted by the servers", "2500.0 µs per heartbeat", "50 per change", "1/1 detected"} {
		if !strings.Contains(tab.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tab.String())
		}
	}
}

func TestBenchConfigChecks(t *testing.T) {
	ok := Config{Addrs: []string{"127.0.0.1:1"}, Spawn: InProcess(nil)}
	for name, mod := range map[string]func(*Config){
		"no addrs":        func(c *Config) { c.Addrs = nil },
		"no spawn":        func(c *Config) { c.Spawn = nil },
		"procs>sessions":  func(c *Config) { c.Sessions, c.Procs = 2, 3 },
		"too many roles":  func(c *Config) { c.Sessions, c.Subscribers, c.SilentFailures = 5, 3, 3 },
		"transport":       func(c *Config) { c.Transport = "quic" },
		"negative":        func(c *Config) { c.Duration = -time.Second },
		"negative warmup": func(c *Config) { c.Warmup = -time.Second },
	} {
		c := ok
		mod(&c)
		if _, err := Run(t.Context(), c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c := ok
	c.Transport = "ws"
	d, err := c.withDefaults()
	if err != nil || d.Addrs[0] != "ws://127.0.0.1:1/ws" {
		t.Fatalf("ws addrs %v %v", d.Addrs, err)
	}
	d.Procs, d.Sessions, d.Subscribers, d.StatusRate = 3, 10, 4, 30
	ws := d.workerConfigs("r")
	if ws[0].Sessions != 4 || ws[1].Base != 4 || ws[2].Base != 7 || ws[0].Subscribers != 2 || ws[2].StatusRate != 9 {
		t.Fatalf("split %+v", ws)
	}
}

// A generator that answers its configuration with a bad line ends the
// run with an error naming it, not a hang or a crash.
func TestBenchRunRefusesBadGeneratorOutput(t *testing.T) {
	for _, out := range []string{
		"not json\n",
		`{"type":"connected","connected":{"established":1,"connect":{}}}` + "\n",
		`{"type":"error","error":"cannot dial"}` + "\n",
		"",
	} {
		cfg := Config{Addrs: []string{"127.0.0.1:1"}, Sessions: 1, ProcRoot: t.TempDir(),
			Spawn: func(ctx context.Context, i int) (*Worker, error) {
				return &Worker{In: nopWriteCloser{}, Out: strings.NewReader(out), Wait: func() error { return nil }, Kill: func() {}}, nil
			}}
		_, err := Run(t.Context(), cfg)
		if err == nil || !strings.Contains(err.Error(), "generator 0") {
			t.Errorf("output %q: %v", out, err)
		}
	}
}

type nopWriteCloser struct{}

func (nopWriteCloser) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriteCloser) Close() error                { return nil }

// TestBenchProbeIsReportedApart runs a bench with a probe: its sessions,
// changes and propagation are its own, and the load's counts leave them
// out.
func TestBenchProbeIsReportedApart(t *testing.T) {
	gs := testcluster.Start(t, 3, testcluster.Options{Timeout: 5 * time.Second, Heartbeat: time.Second})
	var addrs []string
	for _, g := range gs {
		addrs = append(addrs, g.GW.ClientAddr().String())
	}
	rep, err := Run(t.Context(), Config{
		Addrs: addrs, Sessions: 12, ConnectRate: 400, StatusRate: -1, Subscribers: -1,
		ProbeRate: 40, Duration: 1500 * time.Millisecond, Spawn: InProcess(nil),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions.Established != 12 || rep.StatusChanges.OK != 0 || rep.Propagation.Count != 0 {
		t.Errorf("the load counted the probe: sessions %+v, changes %+v, propagation %+v", rep.Sessions, rep.StatusChanges, rep.Propagation)
	}
	p := rep.Probe
	if p == nil {
		t.Fatal("no probe in the report")
	}
	// 3 sessions per gateway: one subscriber each, watching the 4
	// changers homed on the two other gateways.
	if p.Sessions != 9 || p.Subscribed != 3 || p.Priority != "normal" || p.Errors != 0 {
		t.Errorf("probe %+v", p)
	}
	if p.Changes == 0 || p.Request.Count != p.Changes {
		t.Errorf("probe changes %d, round trips %+v", p.Changes, p.Request)
	}
	// each change is seen by the 2 subscribers not on its gateway
	if p.Propagation.Count == 0 || p.Propagation.Count > 2*p.Changes || p.Propagation.P99 < p.Propagation.P50 {
		t.Errorf("probe propagation %+v for %d changes", p.Propagation, p.Changes)
	}
	var tab bytes.Buffer
	if err := rep.WriteTable(&tab); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.String(), "9 sessions, 3 subscribed, normal priority") {
		t.Errorf("table without the probe:\n%s", tab.String())
	}
}

// TestBenchGeneratorEndingAfterItsResult: a generator process exits once
// it has sent its result, possibly while another is still sending its
// own; that end is not a failure.
func TestBenchGeneratorEndingAfterItsResult(t *testing.T) {
	gs := testcluster.Start(t, 1, testcluster.Options{Timeout: 5 * time.Second, Heartbeat: time.Second})
	inProc := InProcess(nil)
	spawn := func(ctx context.Context, i int) (*Worker, error) {
		w, err := inProc(ctx, i)
		if err != nil {
			return nil, err
		}
		out := w.Out
		pr, pw := io.Pipe()
		go func() {
			// Pass the lines on; generator 0 ends its output right after
			// its result, generator 1 holds its result back a while.
			sc := bufio.NewScanner(out)
			sc.Buffer(make([]byte, 0, 64<<10), maxMsgBytes)
			for sc.Scan() {
				line := append(sc.Bytes(), '\n')
				isResult := bytes.Contains(line, []byte(`"type":"result"`))
				if isResult && i == 1 {
					time.Sleep(300 * time.Millisecond)
				}
				if _, err := pw.Write(line); err != nil {
					return
				}
				if isResult && i == 0 {
					pw.Close()
					go io.Copy(io.Discard, out) //nolint:errcheck // drained
					return
				}
			}
			pw.Close()
		}()
		w.Out = pr
		return w, nil
	}
	rep, err := Run(t.Context(), Config{
		Addrs: []string{gs[0].GW.ClientAddr().String()}, Sessions: 4, Procs: 2, ConnectRate: 400,
		StatusRate: -1, Subscribers: -1, Duration: 200 * time.Millisecond, Spawn: spawn,
	})
	if err != nil {
		t.Fatalf("a generator that ended after its result failed the run: %v", err)
	}
	if rep.Sessions.Established != 4 || rep.Heartbeats.IntervalMS != 1000 {
		t.Errorf("sessions %+v, heartbeats %+v", rep.Sessions, rep.Heartbeats)
	}
}
