package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/internal/testkit"
	"github.com/rollcall/rollcall/protocol"
)

// testSecret is the HS256 key of token tests.
var testSecret = []byte("0123456789abcdef0123456789abcdef")

// fakeClock is a Clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// clockEpoch reports whether epoch is what the first hello of a (user,
// device) between start and now is issued: the clock in milliseconds
// (crdt.ClockEpochFloor).
func clockEpoch(epoch float64, start time.Time) bool {
	e := int64(epoch)
	return e >= start.UnixMilli() && e <= time.Now().UnixMilli()
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 9, 24, 17, 45, 0, 0, time.UTC)}
}

func (f *fakeClock) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.t
}

func (f *fakeClock) Advance(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

// fakeCluster records what a node hands the cluster layer.
type fakeCluster struct {
	mu      sync.Mutex
	deltas  []crdt.Delta
	calls   int
	routes  []string
	routeFn func(ctx context.Context, gateway string, msg Message) (int, error)
}

var _ Cluster = (*fakeCluster)(nil)

func (f *fakeCluster) Publish(ds []crdt.Delta) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.deltas = append(f.deltas, ds...)
}

func (f *fakeCluster) Route(ctx context.Context, gateway string, msg Message) (int, error) {
	f.mu.Lock()
	f.routes = append(f.routes, gateway)
	fn := f.routeFn
	f.mu.Unlock()
	if fn == nil {
		return 0, errors.New("no route")
	}
	return fn(ctx, gateway, msg)
}

func (f *fakeCluster) published() []crdt.Delta {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]crdt.Delta(nil), f.deltas...)
}

// fakeStallClock stands in for the real monotonic clock the sweeper's stall
// detector reads (Node.stallNow). It only moves when a test says so: a test
// that advances it with the fake Clock simulates a stall of the gateway.
type fakeStallClock struct{ ns atomic.Int64 }

func (f *fakeStallClock) now() int64              { return f.ns.Load() }
func (f *fakeStallClock) Advance(d time.Duration) { f.ns.Add(int64(d)) }

// newTestNode starts a node on 127.0.0.1:0 in dev mode with short timings;
// mut adjusts the config first. A node given a fake Clock gets a stall
// detector that sees no stalls: such a test owns time, and a stall of the
// test process (a loaded machine) must not move its deadlines. Use
// newStallTestNode to simulate stalls.
func newTestNode(t testing.TB, mut func(*Config)) *Node {
	t.Helper()
	n, _ := newStallTestNode(t, mut)
	return n
}

// newStallTestNode is newTestNode that also returns the clock the stall
// detector reads when the node has a fake Clock (nil otherwise).
func newStallTestNode(t testing.TB, mut func(*Config)) (*Node, *fakeStallClock) {
	t.Helper()
	return newHookedTestNode(t, mut, nil)
}

// newHookedTestNode is newStallTestNode that calls hook, if set, between
// New and Start (to replace a seam such as eventAfter).
func newHookedTestNode(t testing.TB, mut func(*Config), hook func(*Node)) (*Node, *fakeStallClock) {
	t.Helper()
	cfg := Config{
		Name:          "n1",
		ClientAddr:    "127.0.0.1:0",
		Dev:           true,
		SweepInterval: 5 * time.Millisecond,
		EventCoalesce: time.Millisecond,
		Logger:        zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)),
	}
	if testTransport == "ws" {
		cfg.HTTPAddr = "127.0.0.1:0" // dial connects to GET /ws
	}
	if testTransport == "tcpgo" {
		cfg.GoroutineIO = true
	}
	if testTransport == "uring" {
		cfg.IOUring, cfg.IOUringBatch = true, DefaultIOUringBatch
	}
	if mut != nil {
		mut(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var stalls *fakeStallClock
	if _, fake := cfg.Clock.(*fakeClock); fake {
		stalls = &fakeStallClock{}
		n.stallNow = stalls.now
	}
	if hook != nil {
		hook(n)
	}
	if err := n.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n, stalls
}

// waitSweeps returns once the sweeper has run a whole sweep that began
// after the call: every sweep's effect (a stall counted, a session expired)
// of the state before the call has happened.
func waitSweeps(t testing.TB, n *Node) {
	t.Helper()
	// The sweep under way may have read its clocks before the call; the one
	// after it began after the call.
	target := n.sweeps.Load() + 2
	waitFor(t, "two sweeps", func() bool { return n.sweeps.Load() >= target })
}

// frame is one decoded line from the gateway.
type frame map[string]any

func (f frame) str(k string) string {
	s, _ := f[k].(string)
	return s
}

func (f frame) num(k string) float64 {
	v, _ := f[k].(float64)
	return v
}

// client is a test client speaking the protocol over TCP.
type client struct {
	t  testing.TB
	nc net.Conn
	r  *protocol.Reader
}

// maxReplyLine bounds a line a test client reads: replies (a large get or
// group) are longer than requests.
const maxReplyLine = 64 << 20

// newClient is a test client on an open connection.
func newClient(t testing.TB, nc net.Conn) *client {
	return &client{t: t, nc: nc, r: protocol.NewReader(nc, 64<<10, maxReplyLine)}
}

// dial connects a test client to n over the transport under test
// (-transport, ws_test.go): TCP to the client address, or a WebSocket to
// GET /ws on the HTTP address.
func dial(t testing.TB, n *Node) *client {
	t.Helper()
	if testTransport == "ws" {
		if n.HTTPAddr() == nil {
			t.Fatal("-transport=ws: the node serves no HTTP")
		}
		return dialWS(t, "ws://"+n.HTTPAddr().String()+"/ws", nil)
	}
	return dialAddr(t, n.ClientAddr().String())
}

// dialAddr connects a test client to a gateway's client address.
func dialAddr(t testing.TB, addr string) *client {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, ioWait)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { nc.Close() })
	return newClient(t, nc)
}

func (c *client) sendRaw(line string) {
	c.t.Helper()
	c.nc.SetWriteDeadline(time.Now().Add(ioWait))
	if _, err := io.WriteString(c.nc, line+"\n"); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *client) send(v any) {
	c.t.Helper()
	b, err := protocol.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.nc.SetWriteDeadline(time.Now().Add(ioWait))
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// ioWait bounds a test client's dial, write or read: a guard against a
// test that would hang, long enough for a loaded machine (the race
// detector beside a busy loop), not a timing assertion.
const ioWait = 30 * time.Second

// recv reads the next frame, failing the test after ioWait.
func (c *client) recv() frame {
	c.t.Helper()
	f, err := c.tryRecv(ioWait)
	if err != nil {
		// What every goroutine waits on, for a failure's diagnosis.
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 1) //nolint:errcheck // a strings.Builder does not fail
		c.t.Logf("goroutines when the read timed out:\n%s", b.String())
		c.t.Fatalf("recv: %v", err)
	}
	return f
}

func (c *client) tryRecv(d time.Duration) (frame, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadLine()
	if err != nil {
		return nil, err
	}
	var f frame
	if err := json.Unmarshal(line, &f); err != nil {
		return nil, errors.New("bad frame " + string(line) + ": " + err.Error())
	}
	return f, nil
}

// keepBeating sends plain heartbeats (which get no reply) on c every
// interval until the returned stop is called: for a client that must stay
// live while it reads nothing.
func keepBeating(c *client, every time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-done:
				return
			case <-tk.C:
			}
			c.nc.SetWriteDeadline(time.Now().Add(ioWait))
			if _, err := io.WriteString(c.nc, "{\"op\":\"hb\"}\n"); err != nil {
				return
			}
		}
	}()
	return func() { close(done); <-finished }
}

// expect reads frames until one with op arrives, failing on an error frame
// (unless op is "error") and skipping events and messages.
func (c *client) expect(op string) frame {
	c.t.Helper()
	for {
		f := c.recv()
		switch {
		case f.str("op") == op:
			return f
		case f.str("op") == protocol.OpEvent || f.str("op") == protocol.OpMessage:
			continue
		default:
			c.t.Fatalf("want %q, got %v", op, f)
		}
	}
}

// expectError reads until an error frame and checks its code.
func (c *client) expectError(code protocol.ErrorCode) frame {
	c.t.Helper()
	f := c.expect(protocol.OpError)
	if f.str("code") != string(code) {
		c.t.Fatalf("want error %s, got %v", code, f)
	}
	return f
}

// expectEvent reads until an event about user.
func (c *client) expectEvent(user string) frame {
	c.t.Helper()
	for {
		f := c.recv()
		if f.str("op") == protocol.OpEvent && f.str("user") == user {
			return f
		}
		if f.str("op") == protocol.OpError {
			c.t.Fatalf("want event for %s, got %v", user, f)
		}
	}
}

// expectClosed reads until EOF, failing on more frames than skip allows.
func (c *client) expectClosed() {
	c.t.Helper()
	for {
		f, err := c.tryRecv(ioWait)
		if err == nil {
			if f.str("op") == protocol.OpEvent || f.str("op") == protocol.OpMessage {
				continue
			}
			c.t.Fatalf("want EOF, got %v", f)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("connection still open")
		}
		c.nc.Close() // as a real client does on EOF
		return
	}
}

// expectQuiet checks that nothing arrives for d.
func (c *client) expectQuiet(d time.Duration) {
	c.t.Helper()
	f, err := c.tryRecv(d)
	if err == nil {
		c.t.Fatalf("want silence, got %v", f)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		c.t.Fatalf("want silence, got %v", err)
	}
}

// hello authenticates and returns the welcome.
func (c *client) hello(user, device string, extra ...map[string]any) frame {
	c.t.Helper()
	req := map[string]any{"op": "hello", "user": user}
	if device != "" {
		req["device"] = device
	}
	for _, e := range extra {
		for k, v := range e {
			req[k] = v
		}
	}
	c.send(req)
	return c.expect(protocol.OpWelcome)
}

// call sends a request with an id and returns the reply carrying it,
// skipping the events and messages that arrive first. A test that expects
// an event which may arrive before the reply uses callEvents instead.
func (c *client) call(req map[string]any) frame {
	c.t.Helper()
	f, _ := c.callEvents(req)
	return f
}

// callEvents is call that also returns the events and messages read before
// the reply, in order.
func (c *client) callEvents(req map[string]any) (frame, []frame) {
	c.t.Helper()
	req["id"] = "c"
	c.send(req)
	var skipped []frame
	for {
		f := c.recv()
		if f.str("id") == "c" {
			return f, skipped
		}
		if f.str("op") != protocol.OpEvent && f.str("op") != protocol.OpMessage {
			c.t.Fatalf("unexpected frame %v waiting for reply to %v", f, req)
		}
		skipped = append(skipped, f)
	}
}

// ok sends a request and checks the reply is ok.
func (c *client) ok(req map[string]any) frame {
	c.t.Helper()
	f := c.call(req)
	if f.str("op") != protocol.OpOK {
		c.t.Fatalf("%v: want ok, got %v", req, f)
	}
	return f
}

// connect dials and says hello.
func connect(t testing.TB, n *Node, user, device string, extra ...map[string]any) (*client, frame) {
	t.Helper()
	c := dial(t, n)
	w := c.hello(user, device, extra...)
	return c, w
}

// waitFor polls cond until it holds or 30s pass: a bound against a hang,
// not a timing assertion, so one a loaded machine running the race
// detector meets (a WebSocket close, for one, is a handshake the node sees
// only when both sides' goroutines have run).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, what, cond)
}

// waitConns waits until n holds k client connections: a dial returns once
// the kernel has the connection, before the node's accept loop takes it.
func waitConns(t testing.TB, n *Node, k int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the node to hold %d client connections", k), func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return len(n.conns) == k
	})
}

// presenceOf returns the node's view of user.
func presenceOf(n *Node, user string) crdt.Presence {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replica.Presence(user, n.clock.Now().UnixNano())
}

// sessionOf returns the node's record for a key.
func sessionOf(n *Node, k crdt.Key) (crdt.Session, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.replica.Session(k)
}

// checkInvariants checks the replica's invariants and the node's indexes.
func checkInvariants(t testing.TB, n *Node) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.replica.CheckInvariants(); err != nil {
		t.Fatalf("replica: %v", err)
	}
	count := 0
	for u, devs := range n.local {
		for d, c := range devs {
			count++
			s, ok := n.replica.Session(crdt.Key{User: u, Device: d})
			if !ok || s.State != crdt.StateActive || s.ID != c.sess.id || s.Origin != n.origin {
				t.Fatalf("local session %s/%s not active and ours in the replica: %+v", u, d, s)
			}
		}
	}
	if count != n.localCount {
		t.Fatalf("localCount %d, indexed %d", n.localCount, count)
	}
	checkTrackedLocked(t, n)
}

func joinLines(lines ...string) string { return strings.Join(lines, "\n") }
