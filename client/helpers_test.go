package client

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/internal/testcluster"
	"github.com/rollcall/rollcall/internal/testkit"
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

// startCluster starts n --dev gateways joined by gossip over loopback and
// waits until they see each other.
func startCluster(t testing.TB, n int) []*testcluster.Gateway {
	return testcluster.Start(t, n, testcluster.Options{})
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 15*time.Second, what, cond)
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
