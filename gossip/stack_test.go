package gossip

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/node"
	"github.com/rollcall/rollcall/protocol"
)

// Full-stack tests: real gateways (node.Node) joined by real gossip
// (Cluster) over loopback, with clients speaking the TCP protocol.

type stackNode struct {
	gw      *node.Node
	cluster *Cluster
}

type stack struct {
	t     testing.TB
	net   *FaultNetwork
	nodes []*stackNode
	// timeout is both the session timeout and the peer lease.
	timeout time.Duration
	// nodeConfig, if set, adjusts each gateway's configuration.
	nodeConfig func(*node.Config)
}

func newStack(t testing.TB, n int, timeout time.Duration, opts ...func(*Config)) *stack {
	s := &stack{t: t, net: NewFaultNetwork(7), timeout: timeout}
	for i := range n {
		s.start(fmt.Sprintf("g%d", i), opts...)
	}
	t.Cleanup(func() {
		for _, sn := range s.nodes {
			if sn != nil {
				_ = sn.cluster.Shutdown()
				_ = sn.gw.Close()
			}
		}
	})
	return s
}

func (s *stack) start(name string, opts ...func(*Config)) int {
	s.t.Helper()
	ncfg := node.DefaultConfig()
	ncfg.Name = name
	ncfg.ClientAddr = "127.0.0.1:0"
	ncfg.Dev = true
	ncfg.Timeout = s.timeout
	ncfg.Heartbeat = s.timeout / 4
	if s.nodeConfig != nil {
		s.nodeConfig(&ncfg)
	}
	gw, err := node.New(ncfg)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		s.t.Fatal(err)
	}
	cfg := testConfig(name, gw.Origin().Incarnation)
	cfg.LeaseTimeout = s.timeout
	cfg.ClientAddr = gw.ClientAddr().String()
	cfg.WrapTransport = s.net.Wrap
	for _, o := range opts {
		o(&cfg)
	}
	for _, sn := range s.nodes {
		if sn != nil {
			cfg.Join = []string{sn.cluster.LocalAddr()}
			break
		}
	}
	c, err := New(cfg, gw)
	if err != nil {
		s.t.Fatal(err)
	}
	gw.SetCluster(c)
	s.nodes = append(s.nodes, &stackNode{gw: gw, cluster: c})
	return len(s.nodes) - 1
}

func (s *stack) live() []int {
	var out []int
	for i, sn := range s.nodes {
		if sn != nil {
			out = append(out, i)
		}
	}
	return out
}

func (s *stack) waitMembers(n int) {
	waitFor(s.t, 10*time.Second, fmt.Sprintf("%d members", n), func() bool {
		for _, i := range s.live() {
			// memberlist's view, and ours (built from its events,
			// handled asynchronously), which is what sends go to
			if s.nodes[i].cluster.ml.NumMembers() != n || len(s.nodes[i].cluster.liveMembers()) != n-1 {
				return false
			}
		}
		return true
	})
}

// kill stops a node without a word: no drain, no leave (kill -9).
func (s *stack) kill(i int) {
	_ = s.nodes[i].cluster.Shutdown()
	_ = s.nodes[i].gw.Close()
	s.nodes[i] = nil
}

// client is a protocol client for tests.
type client struct {
	t    testing.TB
	conn net.Conn
	mu   sync.Mutex // guards writes
	in   chan map[string]any
	user string

	welcome map[string]any
	stopHB  chan struct{}
}

func (s *stack) dial(i int, user, device string, extra map[string]any) *client {
	s.t.Helper()
	conn, err := net.Dial("tcp", s.nodes[i].gw.ClientAddr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	c := &client{t: s.t, conn: conn, in: make(chan map[string]any, 1024), user: user, stopHB: make(chan struct{})}
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
				m["_at"] = time.Now() // receipt time, for benchmarks
				c.in <- m
			}
		}
	}()
	hello := map[string]any{"op": protocol.OpHello, "user": user, "device": device}
	for k, v := range extra {
		hello[k] = v
	}
	c.send(hello)
	c.welcome = c.expect("welcome", 5*time.Second)
	s.t.Cleanup(func() { c.close() })
	return c
}

func (c *client) send(m map[string]any) {
	b, _ := protocol.Marshal(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Logf("client %s write: %v", c.user, err)
	}
}

// expect returns the next frame with the given op, skipping others.
func (c *client) expect(op string, d time.Duration) map[string]any {
	c.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-c.in:
			if !ok {
				c.t.Fatalf("%s: connection closed while waiting for %q", c.user, op)
			}
			if m["op"] == op {
				return m
			}
			if m["op"] == "error" && op != "error" {
				c.t.Fatalf("%s: error while waiting for %q: %v", c.user, op, m)
			}
		case <-timer.C:
			c.t.Fatalf("%s: no %q within %v", c.user, op, d)
		}
	}
}

// heartbeat keeps the session alive until stopped or closed.
func (c *client) heartbeat(every time.Duration) {
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-c.stopHB:
				return
			case <-t.C:
				c.send(map[string]any{"op": "hb"})
			}
		}
	}()
}

func (c *client) close() {
	select {
	case <-c.stopHB:
	default:
		close(c.stopHB)
	}
	c.conn.Close()
}

// presence asks node i for users' presence over a fresh client connection's
// view: it uses the node's projection directly through a query client.
func (s *stack) online(i int, user string) bool {
	q := s.queryClient(i)
	q.send(map[string]any{"op": "get", "users": []string{user}, "id": 1})
	m := q.expect("presence", 5*time.Second)
	users, _ := m["users"].([]any)
	if len(users) != 1 {
		s.t.Fatalf("get %s: %v", user, m)
	}
	p := users[0].(map[string]any)
	return p["online"] == true
}

func (s *stack) queryClient(i int) *client {
	return s.dial(i, fmt.Sprintf("observer-%d-%d", i, time.Now().UnixNano()), "probe", nil)
}

// digestsEqual reports whether every live node holds the same records: equal
// digests, and nothing above them (Diff against each other is empty).
func (s *stack) digestsEqual() bool {
	live := s.live()
	first := s.nodes[live[0]].gw
	for _, i := range live[1:] {
		other := s.nodes[i].gw
		if !slices.EqualFunc(other.Digest(), first.Digest(), func(a, b crdt.DigestEntry) bool {
			return a.Origin == b.Origin && a.Watermark == b.Watermark && slices.Equal(a.Held, b.Held)
		}) ||
			other.Diff(first.Digest()).Len() != 0 || first.Diff(other.Digest()).Len() != 0 {
			return false
		}
	}
	return true
}

func TestStackEndToEnd(t *testing.T) {
	s := newStack(t, 3, 2*time.Second)
	s.waitMembers(3)

	// Connect on g0, see it on g2, with an event at a subscriber there.
	sub := s.dial(2, "bob", "laptop", nil)
	sub.heartbeat(300 * time.Millisecond)
	sub.send(map[string]any{"op": "sub", "users": []string{"alice"}, "id": "s1"})
	sub.expect("ok", 5*time.Second)
	first := sub.expect("event", 5*time.Second)
	if first["online"] != false {
		t.Fatalf("alice online before connecting: %v", first)
	}
	alice := s.dial(0, "alice", "phone", map[string]any{"groups": []string{"team-7"}})
	alice.heartbeat(300 * time.Millisecond)
	ev := sub.expect("event", 5*time.Second)
	if ev["online"] != true || ev["status"] != "available" {
		t.Fatalf("event on g2 for alice's connect on g0: %v", ev)
	}
	// Status change travels too.
	alice.send(map[string]any{"op": "status", "status": "away", "id": 2})
	alice.expect("ok", 5*time.Second)
	ev = sub.expect("event", 5*time.Second)
	if ev["status"] != "away" {
		t.Fatalf("status event: %v", ev)
	}
	// locate on g1 names g0 as the gateway.
	q := s.queryClient(1)
	q.send(map[string]any{"op": "locate", "user": "alice", "id": 3})
	loc := q.expect("locate", 5*time.Second)
	sess, _ := loc["sessions"].([]any)
	if len(sess) != 1 || sess[0].(map[string]any)["gateway"] != "g0" {
		t.Fatalf("locate from g1: %v", loc)
	}
	// A message from g2 reaches alice on g0 through g0 only.
	sub.send(map[string]any{"op": "send", "to": "alice", "body": map[string]any{"text": "hi"}, "id": 4})
	ok := sub.expect("ok", 5*time.Second)
	if ok["delivered"] != float64(1) {
		t.Fatalf("send reply: %v", ok)
	}
	msg := alice.expect("message", 5*time.Second)
	if msg["from"] != "bob" {
		t.Fatalf("message: %v", msg)
	}

	// kill -9 the owner: alice goes offline on the survivors within the
	// timeout plus a second.
	killed := time.Now()
	s.kill(0)
	ev = sub.expect("event", s.timeout+5*time.Second)
	if ev["online"] != false {
		t.Fatalf("after killing alice's gateway: %v", ev)
	}
	t.Logf("owner crash to offline event: %v", time.Since(killed))
	if d := time.Since(killed); d > s.timeout+time.Second {
		t.Errorf("crash to offline took %v, bound is timeout+1s = %v", d, s.timeout+time.Second)
	}

	// Reconnect elsewhere with the last epoch: a newer epoch, online again.
	oldEpoch := alice.welcome["epoch"].(float64)
	alice2 := s.dial(1, "alice", "phone", map[string]any{"last_epoch": oldEpoch})
	if ep := alice2.welcome["epoch"].(float64); ep <= oldEpoch {
		t.Fatalf("reconnect epoch %v not above %v", ep, oldEpoch)
	}
	alice2.heartbeat(300 * time.Millisecond)
	ev = sub.expect("event", 5*time.Second)
	if ev["online"] != true {
		t.Fatalf("after reconnect on g1: %v", ev)
	}
}

func TestStackSupersedeAcrossNodes(t *testing.T) {
	s := newStack(t, 2, 3*time.Second)
	s.waitMembers(2)
	old := s.dial(0, "carol", "phone", nil)
	old.heartbeat(300 * time.Millisecond)
	waitFor(t, 5*time.Second, "carol visible on g1", func() bool { return s.online(1, "carol") })
	// The client reconnects on g1 (without last_epoch: g1's projection
	// already knows epoch 1).
	newer := s.dial(1, "carol", "phone", nil)
	if newer.welcome["epoch"].(float64) <= old.welcome["epoch"].(float64) {
		t.Fatalf("epochs: old %v new %v", old.welcome["epoch"], newer.welcome["epoch"])
	}
	e := old.expect("error", 5*time.Second)
	if e["code"] != "superseded" {
		t.Fatalf("old connection got %v, want superseded", e)
	}
}

// TestStackFaultsNoLossNoGhosts runs clients on every node through loss and
// a partition, then heals and checks: identical projections, every
// heartbeating client online everywhere, and the silent client offline
// everywhere.
func TestStackFaultsNoLossNoGhosts(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-second fault scenario")
	}
	s := newStack(t, 4, 2*time.Second)
	s.waitMembers(4)
	var clients []*client
	for i := range 12 {
		c := s.dial(i%4, fmt.Sprintf("user%d", i), "d", nil)
		c.heartbeat(250 * time.Millisecond)
		clients = append(clients, c)
	}
	silent := s.dial(3, "silent", "d", nil) // never heartbeats: expires
	_ = silent

	s.net.SetLoss(0.2)
	for i, c := range clients {
		c.send(map[string]any{"op": "status", "status": []string{"away", "busy", "available"}[i%3], "id": i})
	}
	time.Sleep(500 * time.Millisecond)
	s.net.Partition([]string{s.nodes[0].cluster.LocalAddr(), s.nodes[1].cluster.LocalAddr()},
		[]string{s.nodes[2].cluster.LocalAddr(), s.nodes[3].cluster.LocalAddr()})
	for i, c := range clients[:4] {
		c.send(map[string]any{"op": "join", "group": "g", "id": 100 + i})
	}
	time.Sleep(time.Second)
	s.net.Heal()
	s.net.SetLoss(0)

	waitFor(t, 20*time.Second, "identical projections after heal", s.digestsEqual)
	waitFor(t, 20*time.Second, "every heartbeating client online everywhere, the silent one nowhere", func() bool {
		for _, i := range s.live() {
			for j := range clients {
				if !s.online(i, fmt.Sprintf("user%d", j)) {
					return false
				}
			}
			if s.online(i, "silent") {
				return false
			}
		}
		return true
	})
}
