package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/gossip"
	"github.com/rollcall/rollcall/node"
)

// startNode starts a --dev gateway on loopback.
func startNode(t testing.TB, name string) *node.Node { return startGateway(t, name, "") }

// startNodeHTTP starts a --dev gateway that also serves HTTP (and /ws).
func startNodeHTTP(t testing.TB, name string) *node.Node { return startGateway(t, name, "127.0.0.1:0") }

func startGateway(t testing.TB, name, httpAddr string) *node.Node {
	t.Helper()
	cfg := node.DefaultConfig()
	cfg.Name = name
	cfg.ClientAddr = "127.0.0.1:0"
	cfg.HTTPAddr = httpAddr
	cfg.Dev = true
	cfg.Timeout = 2 * time.Second
	cfg.Heartbeat = 200 * time.Millisecond
	gw, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gw.Close() })
	return gw
}

// member is one gateway of an in-process cluster joined by real gossip.
type member struct {
	gw *node.Node
	cl *gossip.Cluster
}

func (m *member) kill() {
	_ = m.cl.Shutdown()
	_ = m.gw.Close()
}

// startCluster starts n --dev gateways joined by gossip over loopback and
// waits until they see each other.
func startCluster(t testing.TB, n int) []*member {
	t.Helper()
	var ms []*member
	for i := range n {
		gw := startNode(t, fmt.Sprintf("g%d", i))
		cfg := gossip.DefaultConfig()
		cfg.Name = gw.Name()
		cfg.Incarnation = gw.Origin().Incarnation
		cfg.BindAddr = "127.0.0.1:0"
		cfg.Profile = "local"
		cfg.LeaseTimeout = 2 * time.Second
		cfg.AliveInterval = 100 * time.Millisecond
		cfg.ReconnectInterval = 300 * time.Millisecond
		cfg.ClientAddr = gw.ClientAddr().String()
		cfg.Memberlist = func(mlc *memberlist.Config) {
			mlc.ProbeInterval = 100 * time.Millisecond
			mlc.ProbeTimeout = 50 * time.Millisecond
			mlc.SuspicionMult = 2
			mlc.GossipInterval = 20 * time.Millisecond
			mlc.PushPullInterval = time.Second
			mlc.TCPTimeout = time.Second
			mlc.DeadNodeReclaimTime = 10 * time.Millisecond
		}
		if len(ms) > 0 {
			cfg.Join = []string{ms[0].cl.LocalAddr()}
		}
		cl, err := gossip.New(cfg, gw)
		if err != nil {
			t.Fatal(err)
		}
		gw.SetCluster(cl)
		m := &member{gw: gw, cl: cl}
		t.Cleanup(func() { _ = cl.Shutdown() })
		ms = append(ms, m)
	}
	waitFor(t, "cluster membership", func() bool {
		for _, m := range ms {
			alive := 0
			for _, mb := range m.cl.Members() {
				if mb.State == "alive" {
					alive++
				}
			}
			if alive != n {
				return false
			}
		}
		return true
	})
	return ms
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// cutter is a DialFunc that remembers its connections so a test can cut
// them, as a gateway or the network would.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
	dials int
}

func (c *cutter) dial(ctx context.Context, addr string, _ *tls.Config) (Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.conns = append(c.conns, nc)
	c.dials++
	c.mu.Unlock()
	return NewLineConn(nc), nil
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, nc := range c.conns {
		_ = nc.Close()
	}
	c.conns = nil
}

func dialT(t testing.TB, cfg Config) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// nextEvent returns the next event of sub, failing the test after 15s.
func nextEvent(t testing.TB, sub *Subscription) Event {
	t.Helper()
	select {
	case ev, ok := <-sub.Events():
		if !ok {
			t.Fatal("events closed")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no event")
	}
	return Event{}
}

// eventUntil reads events of sub until one satisfies cond, checking that
// versions of each user strictly increase.
func eventUntil(t testing.TB, sub *Subscription, last map[string]uint64, cond func(Event) bool) Event {
	t.Helper()
	for {
		ev := nextEvent(t, sub)
		if ev.Version <= last[ev.User] {
			t.Fatalf("stale event delivered: %s version %d after %d", ev.User, ev.Version, last[ev.User])
		}
		last[ev.User] = ev.Version
		if cond(ev) {
			return ev
		}
	}
}
