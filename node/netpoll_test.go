package node

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// On Linux the event loop serves plain TCP clients: an idle session holds
// no goroutine of its own (docs/performance.md), where a connection served
// by goroutines holds its reader.
func TestIdleSessionsHoldNoGoroutine(t *testing.T) {
	if runtime.GOOS != "linux" || (testTransport != "tcp" && testTransport != "tcpgo" && testTransport != "uring") {
		t.Skip("the event loop serves plain TCP on Linux")
	}
	const sessions = 100
	n := newTestNode(t, nil)
	before := readerGoroutines()
	clients := make([]*client, sessions)
	for i := range clients {
		clients[i], _ = connect(t, n, "u"+strconv.Itoa(i), "d")
	}
	// Each session answers a request: its reader is alive.
	for _, c := range clients {
		c.sendRaw(`{"op":"hb","id":1}`)
		c.expect("hb")
	}
	added := readerGoroutines() - before
	if testTransport == "tcpgo" {
		if added != sessions {
			t.Fatalf("%d sessions served by goroutines added %d reader goroutines, want one each", sessions, added)
		}
		return
	}
	if added > sessions/10 {
		t.Fatalf("%d idle sessions on the event loop added %d reader goroutines, want none per session", sessions, added)
	}
}

// readerGoroutines counts the goroutines reading a client connection. It
// counts them by their stacks, not runtime.NumGoroutine, which also counts
// whatever else starts or ends meanwhile (timers, the node's own loops).
func readerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "node.(*conn).readLoop(")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A send routed to another gateway waits for its answer without holding up
// the other connections (on the event loop, those of its poller), and the
// sender's next request is answered after the send.
func TestRoutedSendHoldsUpNoOneElse(t *testing.T) {
	release := make(chan struct{})
	fc := &fakeCluster{routeFn: func(ctx context.Context, _ string, _ Message) (int, error) {
		select {
		case <-release:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc; c.RouteTimeout = 10 * time.Second })
	a, _ := connect(t, n, "alice", "phone")
	// One more connection than pollers: some share alice's.
	others := make([]*client, runtime.GOMAXPROCS(0)+1)
	for i := range others {
		others[i], _ = connect(t, n, "o"+strconv.Itoa(i), "d")
	}
	n.ApplyDeltas([]crdt.Delta{newRemote(t, "n2").put("bob", "x", 1, crdt.StateActive, crdt.StatusAvailable)})
	a.sendRaw(`{"op":"send","to":"bob","body":1,"id":1}`)
	a.sendRaw(`{"op":"hb","id":2}`)
	for _, o := range others {
		o.sendRaw(`{"op":"hb","id":7}`)
		o.expect("hb")
	}
	close(release)
	if f := a.expect("ok"); f.num("delivered") != 1 {
		t.Fatalf("send %v", f)
	}
	a.expect("hb")
}

// A session whose routed send waits on another gateway does not expire
// for the wait: the gateway, not the client, is holding up its requests
// (the heartbeats it sent meanwhile are read after the send). Its silence
// counts again from the send's answer.
func TestRoutedSendWaitDoesNotExpireTheSender(t *testing.T) {
	clock := newFakeClock()
	release, routing := make(chan struct{}), make(chan struct{}, 1)
	fc := &fakeCluster{routeFn: func(ctx context.Context, _ string, _ Message) (int, error) {
		routing <- struct{}{}
		select {
		case <-release:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}}
	n := newTestNode(t, func(c *Config) { c.Cluster = fc; c.RouteTimeout = time.Minute; c.Clock = clock })
	a, _ := connect(t, n, "alice", "phone")
	n.ApplyDeltas([]crdt.Delta{newRemote(t, "n2").put("bob", "x", 1, crdt.StateActive, crdt.StatusAvailable)})
	a.sendRaw(`{"op":"send","to":"bob","body":1,"id":1}`)
	<-routing
	clock.Advance(n.cfg.Timeout + time.Second)
	waitSweeps(t, n)
	if n.stats.expired.Load() != 0 {
		t.Fatal("alice expired while the gateway routed her send")
	}
	close(release)
	if f := a.expect("ok"); f.num("delivered") != 1 {
		t.Fatalf("send %v", f)
	}
	a.sendRaw(`{"op":"hb","id":2}`)
	a.expect("hb")
	// Silent from the answer on, she expires after the timeout.
	clock.Advance(n.cfg.Timeout + time.Second)
	waitFor(t, "alice expired once silent past the timeout", func() bool { return n.stats.expired.Load() == 1 })
}
