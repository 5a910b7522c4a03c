package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// TestRequestFloodLimited: one connection pipelining requests past its
// allowance gets rate_limited for each request past it (with its id), and
// nothing is done for them, while its connection stays open and another
// session on the same gateway keeps being answered throughout. The fake
// clock stands still, so the allowance is exactly the burst.
func TestRequestFloodLimited(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock })
	flooder, _ := connect(t, n, "flooder", "bot") // the hello took one request
	other, _ := connect(t, n, "other", "phone")

	const flood = 3 * DefaultRequestBurst
	werr := make(chan error, 1)
	go func() {
		var b strings.Builder
		for i := range flood {
			fmt.Fprintf(&b, `{"op":"get","users":["other"],"id":%d}`+"\n", i)
		}
		flooder.nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, err := io.WriteString(flooder.nc, b.String())
		werr <- err
	}()
	type tally struct {
		answered, limited int
		err               error
	}
	done := make(chan tally, 1)
	go func() {
		var got tally
		for i := range flood {
			flooder.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			line, err := flooder.r.ReadLine()
			if err != nil {
				got.err = fmt.Errorf("reply %d: %w", i, err)
				break
			}
			var f frame
			if err := json.Unmarshal(line, &f); err != nil || f.num("id") != float64(i) {
				got.err = fmt.Errorf("reply %d: %s", i, line)
				break
			}
			switch {
			case f.str("op") == protocol.OpPresence:
				got.answered++
			case f.str("code") == string(protocol.CodeRateLimited):
				got.limited++
			default:
				got.err = fmt.Errorf("reply %d: %s", i, line)
			}
		}
		done <- got
	}()
	// Meanwhile the other session is answered, request after request.
	for i := range 50 {
		if f := other.call(map[string]any{"op": "get", "users": []string{"flooder"}}); f.str("op") != protocol.OpPresence {
			t.Fatalf("other session's request %d: %v", i, f)
		}
	}
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("flood write: %v", err)
	}
	if got.answered != DefaultRequestBurst-1 || got.limited != flood-got.answered {
		t.Fatalf("answered %d and limited %d of %d; want %d answered", got.answered, got.limited, flood, DefaultRequestBurst-1)
	}
	// A request past the allowance does nothing, and says when to retry.
	f := flooder.call(map[string]any{"op": "status", "status": "busy"})
	if f.str("code") != string(protocol.CodeRateLimited) || !strings.Contains(f.str("message"), "100 requests per second (500 at once)") {
		t.Fatalf("refusal %v", f)
	}
	if p := presenceOf(n, "flooder"); p.Status != crdt.UserAvailable {
		t.Fatalf("a refused status was applied: %+v", p)
	}
	// The connection stayed open, and the allowance refills with time.
	clock.Advance(time.Second)
	flooder.ok(map[string]any{"op": "status", "status": "busy"})
	if st := n.Stats(); st.RateLimited != uint64(got.limited+1) || st.SessionsOpened != 2 {
		t.Fatalf("stats: %d rate limited, %d sessions opened", st.RateLimited, st.SessionsOpened)
	}
}

// TestHeartbeatsNeverLimited: a client heartbeating at welcome's
// heartbeat_ms, or twice as often, is never limited, however long it runs
// (here far past the burst), with the default limits and with the lowest
// request rate the config accepts; a rate below that is refused.
func TestHeartbeatsNeverLimited(t *testing.T) {
	lowest := float64(MinRequestsPerHeartbeat) / DefaultHeartbeat.Seconds()
	for _, tc := range []struct {
		name  string
		rate  float64
		burst int
	}{
		{"defaults", 0, 0},
		{"lowest rate", lowest, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			n := newTestNode(t, func(c *Config) {
				c.Clock = clock
				c.RequestRate, c.RequestBurst = tc.rate, tc.burst
			})
			c, w := connect(t, n, "alice", "phone")
			every := time.Duration(w.num("heartbeat_ms")) * time.Millisecond
			for _, interval := range []time.Duration{every, every / 2} {
				for i := range DefaultRequestBurst + 100 {
					// One heartbeat at each instant, handled before the
					// clock moves on: with an id, its reply says so; a plain
					// one (every tenth) refreshes the session's deadline.
					clock.Advance(interval)
					if i%10 == 9 {
						c.sendRaw(`{"op":"hb"}`)
						waitFor(t, "a plain heartbeat to refresh the deadline", func() bool { return lastActiveNow(n, "alice", "phone") })
						continue
					}
					// Replies come in order: an error for an earlier plain
					// heartbeat would come first, and fail the call.
					if f := c.call(map[string]any{"op": "hb"}); f.str("op") != protocol.OpHB {
						t.Fatalf("heartbeat %d every %v: %v", i, interval, f)
					}
				}
			}
			if st := n.Stats(); st.RateLimited != 0 || !presenceOf(n, "alice").Online {
				t.Fatalf("%d requests limited; alice online: %v", st.RateLimited, presenceOf(n, "alice").Online)
			}
		})
	}
	cfg := Config{Name: "n", Dev: true, RequestRate: 0.99 * lowest}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "request rate") {
		t.Fatalf("a request rate below %d per heartbeat accepted: %v", MinRequestsPerHeartbeat, err)
	}
}

// lastActiveNow reports whether the session of (user, device) made its
// last request at the node's present mono time.
func lastActiveNow(n *Node, user, device string) bool {
	n.mu.Lock()
	c := n.local[user][device]
	n.mu.Unlock()
	return c != nil && c.lastActive.Load() == n.mono()
}

// linkedCluster is an in-process cluster layer: it applies a node's writes
// to its peers, in write order, on a goroutine of its own (never under the
// publisher's locks).
type linkedCluster struct {
	peers []*Node
	queue chan []crdt.Delta
	done  chan struct{}
}

var _ Cluster = (*linkedCluster)(nil)

func (l *linkedCluster) Publish(ds []crdt.Delta) {
	select {
	case l.queue <- slices.Clone(ds):
	case <-l.done:
	}
}

func (l *linkedCluster) Route(context.Context, string, Message) (int, error) { return 0, nil }

// linkNodes joins started nodes into one in-process cluster.
func linkNodes(t *testing.T, nodes ...*Node) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		l := &linkedCluster{queue: make(chan []crdt.Delta, 1024), done: done}
		for _, p := range nodes {
			if p != n {
				l.peers = append(l.peers, p)
			}
		}
		n.SetCluster(l)
		wg.Go(func() {
			for {
				select {
				case ds := <-l.queue:
					for _, p := range l.peers {
						if err := p.ApplyDeltas(ds); err != nil {
							t.Errorf("apply at %s: %v", p.Name(), err)
						}
					}
				case <-done:
					return
				}
			}
		})
	}
	t.Cleanup(func() { close(done); wg.Wait() })
}

// activeSessionsOf returns how many active sessions of user n's projection
// holds.
func activeSessionsOf(n *Node, user string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replica.ActiveSessionCount(user)
}

// TestSessionCapAcrossGateways: a user holding the default cap of active
// sessions, spread over two gateways, is refused too_many_sessions for one
// more on either; a reconnect of one of its devices, on either gateway, is
// served; other users are served; a session that ends frees its slot.
func TestSessionCapAcrossGateways(t *testing.T) {
	gw1 := newTestNode(t, func(c *Config) { c.Name = "gw1" })
	gw2 := newTestNode(t, func(c *Config) { c.Name = "gw2" })
	linkNodes(t, gw1, gw2)
	const max = DefaultMaxSessionsPerUser
	sessions := make([]*client, max)
	for i := range max {
		gw := gw1
		if i >= max/2 {
			gw = gw2
		}
		sessions[i], _ = connect(t, gw, "u", fmt.Sprintf("d%d", i))
	}
	for _, gw := range []*Node{gw1, gw2} {
		waitFor(t, gw.Name()+" to see every session", func() bool { return activeSessionsOf(gw, "u") == max })
	}
	for _, gw := range []*Node{gw1, gw2} {
		c := dial(t, gw)
		c.send(map[string]any{"op": "hello", "user": "u", "device": "one-too-many", "id": 1})
		if f := c.expectError(protocol.CodeTooManySessions); f.num("id") != 1 || !strings.Contains(f.str("message"), "holds 100 active sessions") {
			t.Fatalf("refusal on %s: %v", gw.Name(), f)
		}
		c.expectClosed()
	}
	connect(t, gw1, "someone-else", "d")

	// d0 (on gw1) reconnects through gw2, d99 (on gw2) through gw2 itself:
	// each replaces its session, so neither counts as one more.
	connect(t, gw2, "u", "d0")
	sessions[0].expectError(protocol.CodeSuperseded)
	connect(t, gw2, "u", fmt.Sprintf("d%d", max-1))
	sessions[max-1].expectError(protocol.CodeSuperseded)
	if st := gw1.Stats().TooManySessions + gw2.Stats().TooManySessions; st != 2 {
		t.Fatalf("%d refusals counted, want 2", st)
	}

	// A session that ends frees its slot, on the other gateway too.
	sessions[1].ok(map[string]any{"op": "bye"})
	waitFor(t, "gw2 to see the bye", func() bool { return activeSessionsOf(gw2, "u") == max-1 })
	connect(t, gw2, "u", "new-device")
}

// TestSessionCapExactOnOneGateway: concurrent hellos of one user on one
// gateway are counted exactly: of 150 new devices at once with a cap of
// 100, 100 are welcomed and 50 refused.
func TestSessionCapExactOnOneGateway(t *testing.T) {
	// The user's hello rate (its burst is the cap's default too) is not
	// what is under test.
	n := newTestNode(t, func(c *Config) { c.UserHelloRate = -1 })
	const hellos = DefaultMaxSessionsPerUser + 50
	results := make(chan string, hellos)
	var wg sync.WaitGroup
	for i := range hellos {
		wg.Go(func() {
			nc, err := net.DialTimeout("tcp", n.ClientAddr().String(), 5*time.Second)
			if err != nil {
				results <- err.Error()
				return
			}
			t.Cleanup(func() { nc.Close() })
			nc.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(nc, `{"op":"hello","user":"u","device":"d%d"}`+"\n", i)
			var f frame
			line, err := bufio.NewReader(nc).ReadBytes('\n')
			if err == nil {
				err = json.Unmarshal(line, &f)
			}
			if err != nil {
				results <- err.Error()
				return
			}
			results <- f.str("op") + f.str("code")
		})
	}
	wg.Wait()
	close(results)
	got := map[string]int{}
	for r := range results {
		got[r]++
	}
	if got[protocol.OpWelcome] != DefaultMaxSessionsPerUser || got[protocol.OpError+string(protocol.CodeTooManySessions)] != hellos-DefaultMaxSessionsPerUser {
		t.Fatalf("replies %v", got)
	}
	if k := activeSessionsOf(n, "u"); k != DefaultMaxSessionsPerUser {
		t.Fatalf("%d active sessions", k)
	}
}

// dialFrom connects a test client to n from a local address of the
// loopback network (127.0.0.0/8).
func dialFrom(t *testing.T, n *Node, ip string) *client {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	nc, err := d.Dial("tcp", n.ClientAddr().String())
	if err != nil {
		t.Fatalf("dial from %s: %v", ip, err)
	}
	t.Cleanup(func() { nc.Close() })
	return newClient(t, nc)
}

// TestConnectionsPerIP: an address holding MaxConnectionsPerIP connections
// (handshakes included) is refused too_many_connections for one more, at
// once and closed; other addresses are served, the sessions already there
// are untouched, and a slot freed is usable again.
func TestConnectionsPerIP(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.MaxConnectionsPerIP = 3 })
	a := dialFrom(t, n, "127.0.0.1")
	a.hello("ann", "d")
	b := dialFrom(t, n, "127.0.0.1")
	b.hello("ben", "d")
	handshaking := dialFrom(t, n, "127.0.0.1") // no hello yet: it counts too

	refused := dialFrom(t, n, "127.0.0.1")
	if f := refused.recv(); f.str("code") != string(protocol.CodeTooManyConnections) {
		t.Fatalf("fourth connection from 127.0.0.1 got %v, want too_many_connections", f)
	}
	refused.expectClosed()
	if st := n.Stats(); st.TooManyConnections != 1 || st.Connections != 3 {
		t.Fatalf("stats: %d refused, %d connections", st.TooManyConnections, st.Connections)
	}

	dialFrom(t, n, "127.0.0.2").hello("cat", "d")
	handshaking.hello("dan", "d")
	if p := a.call(map[string]any{"op": "get", "users": []string{"ben", "cat", "dan"}}); len(p["users"].([]any)) != 3 {
		t.Fatalf("get %v", p)
	}
	b.ok(map[string]any{"op": "bye"})
	b.expectClosed()
	waitFor(t, "ben's connection to go", func() bool { return n.Stats().Connections == 3 })
	dialFrom(t, n, "127.0.0.1").hello("eve", "d")
}

// TestSetLimits: limits changed while the node runs apply to the
// connections and sessions already open, at once, and drop nobody.
func TestSetLimits(t *testing.T) {
	clock := newFakeClock()
	n := newTestNode(t, func(c *Config) { c.Clock = clock })
	a, _ := connect(t, n, "u", "phone")
	b, _ := connect(t, n, "u", "laptop")
	get := map[string]any{"op": "get", "users": []string{"u"}}
	a.call(get)

	l := n.Limits()
	if l != DefaultConfig().Limits() {
		t.Fatalf("limits at start %+v, want the defaults", l)
	}
	if changed, err := n.SetLimits(l); err != nil || len(changed) != 0 {
		t.Fatalf("SetLimits of the same limits: %v, %v", changed, err)
	}
	// Lower every rate and cap below what is in use.
	l.RequestRate, l.RequestBurst = 1, 3
	l.SendRate, l.SendBurst = 1, 1
	l.MaxSessionsPerUser = 1
	l.MaxConnectionsPerIP = 1
	changed, err := n.SetLimits(l)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"RequestRate 100 -> 1", "RequestBurst 500 -> 3", "SendRate 50 -> 1", "SendBurst 100 -> 1",
		"MaxConnectionsPerIP 10000 -> 1", "MaxSessionsPerUser 100 -> 1"}
	if !slices.Equal(changed, want) {
		t.Fatalf("changed %q, want %q", changed, want)
	}
	if got := n.Config(); got.RequestRate != 1 || got.MaxSessionsPerUser != 1 {
		t.Fatalf("Config() shows %+v", got.Limits())
	}

	// a's bucket holds at most the new burst, and refills at the new rate.
	for range 3 {
		if f := a.call(get); f.str("op") != protocol.OpPresence {
			t.Fatalf("within the new burst: %v", f)
		}
	}
	a.expectErrorReply(get, protocol.CodeRateLimited)
	clock.Advance(time.Second)
	// One token: the send takes it, and the send bucket (burst 1) allows it.
	a.ok(map[string]any{"op": "send", "to": "u", "body": 1})
	clock.Advance(2 * time.Second)
	a.ok(map[string]any{"op": "send", "to": "u", "body": 2})
	a.expectErrorReply(map[string]any{"op": "send", "to": "u", "body": 3}, protocol.CodeRateLimited)

	// Both of u's sessions and both connections stay; new ones are refused.
	b.call(get)
	c := dialFrom(t, n, "127.0.0.2") // the cap is per address: 127.0.0.2 holds none
	c.send(map[string]any{"op": "hello", "user": "u", "device": "tablet"})
	c.expectError(protocol.CodeTooManySessions)
	if testTransport == "ws" {
		// Over WebSocket the upgrade request is an HTTP connection, which
		// counts against the same cap and is refused at accept with 429.
		code, body := dialHTTP(t, n).get("/ws")
		expectHTTPError(t, code, body, http.StatusTooManyRequests, protocol.CodeTooManyConnections, "connections to the gateway")
	} else if f := dial(t, n).recv(); f.str("code") != string(protocol.CodeTooManyConnections) {
		t.Fatalf("connection past the lowered per-address cap got %v", f)
	}

	// Invalid limits change nothing.
	bad := l
	bad.RequestRate = 0.1
	if _, err := n.SetLimits(bad); err == nil || !strings.Contains(err.Error(), "request rate") {
		t.Fatalf("SetLimits of a rate below the heartbeat's: %v", err)
	}
	if n.Limits() != l {
		t.Fatalf("limits %+v after a refused SetLimits", n.Limits())
	}
	// Back to the defaults (zero fields): everyone is served again.
	if changed, err := n.SetLimits(Limits{}); err != nil || len(changed) != 6 {
		t.Fatalf("SetLimits(Limits{}): %q, %v", changed, err)
	}
	clock.Advance(10 * time.Second)
	connect(t, n, "u", "tablet")
	for range 10 {
		a.call(get)
	}
	if st := n.Stats(); st.SessionsOpened != 3 || st.Disconnected != 0 {
		t.Fatalf("sessions opened %d, disconnected %d", st.SessionsOpened, st.Disconnected)
	}
}

// expectErrorReply sends req and checks its reply is an error with code.
func (c *client) expectErrorReply(req map[string]any, code protocol.ErrorCode) {
	c.t.Helper()
	if f := c.call(req); f.str("op") != protocol.OpError || f.str("code") != string(code) {
		c.t.Fatalf("%v: want %s, got %v", req, code, f)
	}
}

// TestHTTPJSONShapes: every key of /v1/stats is snake_case, and a session
// without groups shows "groups": [] in /v1/sessions, never null.
func TestHTTPJSONShapes(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	base := "http://" + n.HTTPAddr().String()
	connect(t, n, "alice", "phone")

	var stats map[string]any
	getJSON(t, base+"/v1/stats", http.StatusOK, &stats)
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	var check func(path string, v any)
	check = func(path string, v any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for k, sub := range m {
			if !snake.MatchString(k) {
				t.Errorf("/v1/stats key %s%s is not snake_case", path, k)
			}
			check(path+k+".", sub)
		}
	}
	check("", stats)
	if r, _ := stats["replica"].(map[string]any); r["active"] != float64(1) {
		t.Fatalf("replica stats %v", stats["replica"])
	}

	resp, err := http.Get(base + "/v1/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sessions struct {
		Sessions []map[string]json.RawMessage `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sessions); err != nil {
		t.Fatal(err)
	}
	if len(sessions.Sessions) != 1 || string(sessions.Sessions[0]["groups"]) != "[]" {
		t.Fatalf("sessions %s", sessions.Sessions)
	}
}
