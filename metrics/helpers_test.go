package metrics

import (
	"fmt"
	"net/http"
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
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/node"
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
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%d alive members everywhere", k), func() bool {
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

// dial connects to g and says hello as user/device.
func (g *gateway) dial(t *testing.T, user, device string, extra map[string]any) *testkit.LineClient {
	t.Helper()
	return testkit.DialLine(t, g.n.ClientAddr().String(), user, device, extra)
}

// replyWithin bounds a test's wait for a frame.
const replyWithin = 10 * time.Second
