// Package testcluster starts in-process Rollcall gateways joined by real
// gossip over loopback, for the tests of packages that drive a whole
// cluster from outside (client, node's external tests).
package testcluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/node"
)

// Gateway is one gateway of a test cluster: the node and its gossip.
type Gateway struct {
	GW *node.Node
	CL *gossip.Cluster
}

// Kill stops the gateway without a goodbye, as a crash does.
func (g *Gateway) Kill() {
	_ = g.CL.Shutdown()
	_ = g.GW.Close()
}

// WS is the gateway's WebSocket endpoint URL (it needs an HTTP address).
func (g *Gateway) WS() string { return "ws://" + g.GW.HTTPAddr().String() + "/ws" }

// Options tune the gateways.
type Options struct {
	HTTP      bool          // serve HTTP (and /ws) on a loopback port
	Timeout   time.Duration // session timeout; default 2s
	Heartbeat time.Duration // default 200ms
	// EventCoalesce and GossipBatch, when non-zero, set node.Config's
	// EventCoalesce and gossip.Config's BatchDelay (negative: no wait).
	EventCoalesce time.Duration
	GossipBatch   time.Duration
	// Configure, when set, adjusts each gateway's node.Config last (a
	// token secret instead of --dev, say).
	Configure func(*node.Config)
}

// Start starts n --dev gateways named g0..gN-1, joins them by gossip with
// fast memberlist timings, and waits (up to 15s) until each sees all n
// alive. Everything is stopped at the test's end.
func Start(t testing.TB, n int, o Options) []*Gateway {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = 200 * time.Millisecond
	}
	var gs []*Gateway
	for i := range n {
		var join []string
		if len(gs) > 0 {
			join = []string{gs[0].CL.LocalAddr()}
		}
		gs = append(gs, start(t, fmt.Sprintf("g%d", i), o, func(gc *gossip.Config) { gc.Join = join }))
	}
	deadline := time.Now().Add(15 * time.Second)
	for !allAlive(gs, n) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d gateways to see each other", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return gs
}

// StartRegions starts, in each region, n --dev gateways named
// <region>0..<region>N-1, each region a cluster of its own, the first
// bridges of each bridge-capable (a WAN pool on loopback with quick
// timings), and waits (up to 20s) until every gateway sees its region's n
// gateways alive and hears every other region. Gateways are listed region
// by region.
func StartRegions(t testing.TB, regions []string, n, bridges int, o Options) []*Gateway {
	t.Helper()
	var gs, wan []*Gateway
	for _, reg := range regions {
		var first *Gateway
		for i := range n {
			var join []string
			if first != nil {
				join = []string{first.CL.LocalAddr()}
			}
			var wanJoin []string
			for _, b := range wan {
				wanJoin = append(wanJoin, b.CL.WANAddr())
			}
			bridge := i < bridges
			g := start(t, fmt.Sprintf("%s%d", reg, i), o, func(gc *gossip.Config) {
				gc.Join, gc.Region = join, reg
				gc.WANAliveInterval, gc.WANLease = 200*time.Millisecond, 4*time.Second
				if bridge {
					gc.WANBindAddr, gc.WANProfile, gc.WANJoin = "127.0.0.1:0", "local", wanJoin
					gc.WANMemberlist = FastMemberlist
				}
			})
			if first == nil {
				first = g
			}
			if bridge {
				wan = append(wan, g)
			}
			gs = append(gs, g)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !regionsUp(gs, regions, n) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d regions of %d gateways to hear each other", len(regions), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return gs
}

func regionsUp(gs []*Gateway, regions []string, n int) bool {
	if !allAlive(gs, n) {
		return false
	}
	for _, g := range gs {
		up := 0
		for _, r := range g.CL.Regions() {
			if !r.Down && r.Gateways == n {
				up++
			}
		}
		if up != len(regions)-1 {
			return false
		}
	}
	return true
}

// start starts one gateway; mut adjusts its gossip configuration.
func start(t testing.TB, name string, o Options, mut func(*gossip.Config)) *Gateway {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = 200 * time.Millisecond
	}
	cfg := node.DefaultConfig()
	cfg.Name = name
	cfg.ClientAddr = "127.0.0.1:0"
	cfg.HTTPAddr = ""
	if o.HTTP {
		cfg.HTTPAddr = "127.0.0.1:0"
	}
	cfg.Dev = true
	cfg.Timeout = o.Timeout
	cfg.Heartbeat = o.Heartbeat
	if o.EventCoalesce != 0 {
		cfg.EventCoalesce = o.EventCoalesce
	}
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	gw, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	gc := gossip.DefaultConfig()
	gc.Name = gw.Name()
	gc.Incarnation = gw.Origin().Incarnation
	gc.BindAddr = "127.0.0.1:0"
	gc.Profile = "local"
	gc.LeaseTimeout = 2 * time.Second
	gc.AliveInterval = 100 * time.Millisecond
	gc.ReconnectInterval = 300 * time.Millisecond
	gc.ClientAddr = gw.ClientAddr().String()
	gc.Memberlist = FastMemberlist
	if o.GossipBatch != 0 {
		gc.BatchDelay = o.GossipBatch
	}
	mut(&gc)
	cl, err := gossip.New(gc, gw)
	if err != nil {
		t.Fatal(err)
	}
	gw.SetCluster(cl)
	t.Cleanup(func() { _ = cl.Shutdown() })
	return &Gateway{GW: gw, CL: cl}
}

func allAlive(gs []*Gateway, n int) bool {
	for _, g := range gs {
		alive := 0
		for _, m := range g.CL.Members() {
			if m.State == "alive" {
				alive++
			}
		}
		if alive != n {
			return false
		}
	}
	return true
}

// FastMemberlist sets memberlist's timings for tests on loopback.
func FastMemberlist(mlc *memberlist.Config) {
	mlc.ProbeInterval = 100 * time.Millisecond
	mlc.ProbeTimeout = 50 * time.Millisecond
	mlc.SuspicionMult = 2
	mlc.GossipInterval = 20 * time.Millisecond
	mlc.PushPullInterval = time.Second
	mlc.TCPTimeout = time.Second
	mlc.DeadNodeReclaimTime = 10 * time.Millisecond
}
