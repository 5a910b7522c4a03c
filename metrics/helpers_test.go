package metrics

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	gometrics "github.com/hashicorp/go-metrics"
	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// gateway is one in-process Rollcall gateway (node and gossip) serving
// GET /metrics from its own registry.
type gateway struct {
	n   *node.Node
	c   *gossip.Cluster
	reg *prometheus.Registry
	url string
}

// startGateways starts k gateways joined in one cluster over loopback,
// with session timeout (and peer lease) timeout. When withMemberlist is
// set, go-metrics' global sink reports into the first gateway's registry
// (every gateway's memberlist reports into it) until the test ends.
func startGateways(t *testing.T, k int, timeout time.Duration, withMemberlist bool) []*gateway {
	t.Helper()
	var gws []*gateway
	for i := range k {
		g := &gateway{reg: prometheus.NewRegistry()}
		if i == 0 && withMemberlist {
			if _, err := InstallMemberlistSink(g.reg); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cfg := gometrics.DefaultConfig("")
				cfg.EnableRuntimeMetrics = false
				gometrics.NewGlobal(cfg, &gometrics.BlackholeSink{}) //nolint:errcheck // cannot fail for a blackhole
			})
		}
		ncfg := node.DefaultConfig()
		ncfg.Name = fmt.Sprintf("g%d", i)
		ncfg.ClientAddr = "127.0.0.1:0"
		ncfg.HTTPAddr = "127.0.0.1:0"
		ncfg.Dev = true
		ncfg.Timeout = timeout
		ncfg.Heartbeat = timeout / 4
		ncfg.EventCoalesce = time.Millisecond
		ncfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
		ncfg.HTTPHandlers = map[string]http.Handler{"GET /metrics": Handler(g.reg)}
		n, err := node.New(ncfg)
		if err != nil {
			t.Fatal(err)
		}
		g.n = n
		if err := RegisterProcess(g.reg); err != nil {
			t.Fatal(err)
		}
		g.reg.MustRegister(NewNodeCollector(n))
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		g.url = "http://" + n.HTTPAddr().String() + "/metrics"

		cfg := gossip.DefaultConfig()
		cfg.Name = ncfg.Name
		cfg.Incarnation = n.Origin().Incarnation
		cfg.BindAddr = "127.0.0.1:0"
		cfg.Profile = "local"
		cfg.ClientAddr = n.ClientAddr().String()
		cfg.LeaseTimeout = timeout
		cfg.AliveInterval = 100 * time.Millisecond
		cfg.ReconnectInterval = 300 * time.Millisecond
		// memberlist's goroutines may log after Shutdown returns, when a
		// test logger would panic.
		cfg.Logger = zap.NewNop()
		cfg.Memberlist = func(mlc *memberlist.Config) {
			mlc.ProbeInterval = 100 * time.Millisecond
			mlc.ProbeTimeout = 50 * time.Millisecond
			mlc.GossipInterval = 20 * time.Millisecond
			mlc.PushPullInterval = time.Second
			mlc.TCPTimeout = time.Second
		}
		if len(gws) > 0 {
			cfg.Join = []string{gws[0].c.LocalAddr()}
		}
		c, err := gossip.New(cfg, n)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Shutdown() }) //nolint:errcheck // test teardown
		n.SetCluster(c)
		g.c = c
		g.reg.MustRegister(NewClusterCollector(c))
		gws = append(gws, g)
	}
	waitFor(t, fmt.Sprintf("%d alive members everywhere", k), func() bool {
		for _, g := range gws {
			alive := 0
			for _, m := range g.c.Members() {
				if m.State == "alive" {
					alive++
				}
			}
			if alive != k {
				return false
			}
		}
		return true
	})
	return gws
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// scrape is one GET /metrics, parsed.
type scrape map[string]*dto.MetricFamily

func (g *gateway) scrape(t *testing.T) scrape {
	t.Helper()
	resp, err := http.Get(g.url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", g.url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", g.url, err)
	}
	return fams
}

// value returns the value of the sample of name whose labels include
// labels (name=value pairs), summed over every such sample; a histogram's
// value is its count. It is 0 when there is none.
func (s scrape) value(name string, labels ...string) float64 {
	f := s[name]
	if f == nil {
		return 0
	}
	var sum float64
samples:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue samples
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Summary != nil:
			sum += float64(m.Summary.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum
}

// client is a protocol client for these tests.
type client struct {
	t    *testing.T
	conn net.Conn
	mu   sync.Mutex // guards writes
	in   chan map[string]any
	stop chan struct{}
}

// dial connects to g and says hello as user/device.
func (g *gateway) dial(t *testing.T, user, device string, extra map[string]any) *client {
	t.Helper()
	conn, err := net.Dial("tcp", g.n.ClientAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, conn: conn, in: make(chan map[string]any, 256), stop: make(chan struct{})}
	go func() {
		defer close(c.in)
		lr := protocol.NewReader(conn, 64<<10, 1<<20)
		for {
			line, err := lr.ReadLine()
			if err != nil {
				return
			}
			var m map[string]any
			if json.Unmarshal(line, &m) == nil {
				c.in <- m
			}
		}
	}()
	t.Cleanup(c.close)
	hello := map[string]any{"op": protocol.OpHello, "user": user, "device": device}
	for k, v := range extra {
		hello[k] = v
	}
	c.send(hello)
	c.expect("welcome")
	return c
}

func (c *client) send(m map[string]any) {
	c.t.Helper()
	if err := c.write(m); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) write(m map[string]any) error {
	b, _ := protocol.Marshal(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second)) //nolint:errcheck // a failed write fails Write
	_, err := c.conn.Write(b)
	return err
}

// expect returns the next frame with op, skipping events and messages.
func (c *client) expect(op string) map[string]any {
	c.t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-c.in:
			if !ok {
				c.t.Fatalf("connection closed while waiting for %q", op)
			}
			if m["op"] == op {
				return m
			}
			if m["op"] == "error" {
				c.t.Fatalf("error while waiting for %q: %v", op, m)
			}
		case <-timer.C:
			c.t.Fatalf("no %q within 10s", op)
		}
	}
}

// heartbeat keeps the session alive until the client closes.
func (c *client) heartbeat(every time.Duration) {
	go func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tk.C:
				if c.write(map[string]any{"op": "hb"}) != nil {
					return
				}
			}
		}
	}()
}

func (c *client) close() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	c.conn.Close()
}
