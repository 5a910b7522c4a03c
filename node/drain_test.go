package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/protocol"
)

// mesh is an in-process cluster of nodes: each node's published deltas are
// applied at once, in order, by every other node still in the mesh.
type mesh struct {
	mu    sync.Mutex
	nodes map[string]*Node
	sent  map[string][]crdt.Delta // published, by node
}

// meshLink is one node's Cluster in a mesh.
type meshLink struct {
	m    *mesh
	self string
}

var (
	_ Cluster       = (*meshLink)(nil)
	_ GatewayLister = (*meshLink)(nil)
	_ AddressBook   = (*meshLink)(nil)
)

// newMesh starts one node per name, joined in a mesh.
func newMesh(t *testing.T, mut func(*Config), names ...string) (*mesh, []*Node) {
	m := &mesh{nodes: map[string]*Node{}, sent: map[string][]crdt.Delta{}}
	var out []*Node
	for _, name := range names {
		n := newTestNode(t, func(c *Config) {
			c.Name = name
			c.Cluster = &meshLink{m: m, self: name}
			if mut != nil {
				mut(c)
			}
		})
		m.mu.Lock()
		m.nodes[name] = n
		m.mu.Unlock()
		out = append(out, n)
	}
	return m, out
}

func (l *meshLink) others() []*Node {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	var out []*Node
	for name, n := range l.m.nodes {
		if name != l.self {
			out = append(out, n)
		}
	}
	return out
}

func (l *meshLink) Publish(ds []crdt.Delta) {
	l.m.mu.Lock()
	l.m.sent[l.self] = append(l.m.sent[l.self], ds...)
	l.m.mu.Unlock()
	for _, n := range l.others() {
		if err := n.ApplyDeltas(ds); err != nil {
			panic(err)
		}
	}
}

// Route delivers msg to the sessions the gateway named owns.
func (l *meshLink) Route(_ context.Context, gateway string, msg Message) (int, error) {
	l.m.mu.Lock()
	n := l.m.nodes[gateway]
	l.m.mu.Unlock()
	if n == nil {
		return 0, fmt.Errorf("no gateway %s in the mesh", gateway)
	}
	return n.DeliverLocal(msg), nil
}

func (l *meshLink) OtherGateways() []string {
	var out []string
	for _, n := range l.others() {
		out = append(out, n.ClientAddr().String())
	}
	return out
}

func (l *meshLink) ClientAddrOf(gateway string) string {
	l.m.mu.Lock()
	n := l.m.nodes[gateway]
	l.m.mu.Unlock()
	if n == nil || n.ClientAddr() == nil {
		return ""
	}
	return n.ClientAddr().String()
}

// published returns the deltas node name published.
func (m *mesh) published(name string) []crdt.Delta {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sent[name])
}

// expectPresence checks that f is an event for user, online on gateway gw
// only (or offline for gw "").
func expectPresence(t *testing.T, f frame, user, gw string) {
	t.Helper()
	ss, _ := f["sessions"].([]any)
	switch {
	case f.str("op") != protocol.OpEvent || f.str("user") != user:
		t.Fatalf("want an event for %s, got %v", user, f)
	case gw == "" && (f["online"] != false || len(ss) != 0):
		t.Fatalf("want %s offline, got %v", user, f)
	case gw != "" && (f["online"] != true || len(ss) != 1 || ss[0].(map[string]any)["gateway"] != gw):
		t.Fatalf("want %s online on %s only, got %v", user, gw, f)
	}
}

// A client of a draining gateway A that reconnects to B with last_epoch
// within the grace is never shown offline at a subscriber on C, A never
// writes its old session disconnected, and A's drain ends as soon as every
// session is taken over (the grace here is a minute).
func TestDrainReconnectWithinGraceNeverShowsOffline(t *testing.T) {
	m, ns := newMesh(t, func(c *Config) { c.DrainGrace, c.DrainTimeout = time.Minute, 2*time.Minute }, "A", "B", "C")
	a, b, c := ns[0], ns[1], ns[2]
	w, _ := connect(t, c, "watcher", "w")
	w.ok(map[string]any{"op": "sub", "users": []string{"alice"}})
	expectPresence(t, w.recv(), "alice", "")
	alice, welcome := connect(t, a, "alice", "phone")
	expectPresence(t, w.recv(), "alice", "A")

	drained := make(chan error, 1)
	go func() { drained <- a.Drain(t.Context()) }()
	e := alice.expectError(protocol.CodeShuttingDown)
	var hint []string
	for _, g := range e["gateways"].([]any) {
		hint = append(hint, g.(string))
	}
	slices.Sort(hint)
	want := []string{b.ClientAddr().String(), c.ClientAddr().String()}
	slices.Sort(want)
	if !slices.Equal(hint, want) {
		t.Fatalf("shutting_down lists %v, want B and C %v and not A %v", hint, want, a.ClientAddr())
	}
	alice.expectClosed()
	if ready, status, _ := a.Readiness(); ready || status != "draining" {
		t.Fatalf("draining A: ready %v, %s", ready, status)
	}
	// The connection is gone, but the session holds: C still shows it.
	w.expectQuiet(50 * time.Millisecond)
	if p := presenceOf(c, "alice"); !p.Online {
		t.Fatalf("C shows %+v after alice's connection to A closed within the grace", p)
	}

	connect(t, b, "alice", "phone", map[string]any{"last_epoch": welcome["epoch"]})
	expectPresence(t, w.recv(), "alice", "B")
	select {
	case err := <-drained:
		if err != nil {
			t.Fatalf("Drain: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Drain still waiting after every session was taken over")
	}
	w.expectQuiet(100 * time.Millisecond)
	for _, d := range m.published("A") {
		if d.Session != nil && d.Session.User == "alice" && d.Session.State != crdt.StateActive {
			t.Fatalf("A wrote alice's taken-over session %v", d.Session.State)
		}
	}
	for _, n := range ns {
		checkInvariants(t, n)
	}
}

// A client that does not come back is shown offline at a subscriber on
// another gateway once the grace is over, not before.
func TestDrainGraceEndsUnclaimedSessions(t *testing.T) {
	const grace = 300 * time.Millisecond
	m, ns := newMesh(t, func(c *Config) { c.DrainGrace = grace }, "A", "B")
	a, b := ns[0], ns[1]
	w, _ := connect(t, b, "watcher", "w")
	w.ok(map[string]any{"op": "sub", "users": []string{"bob"}})
	expectPresence(t, w.recv(), "bob", "")
	bob, _ := connect(t, a, "bob", "phone")
	expectPresence(t, w.recv(), "bob", "A")

	start := time.Now()
	drained := make(chan error, 1)
	go func() { drained <- a.Drain(t.Context()) }()
	bob.expectError(protocol.CodeShuttingDown)
	bob.expectClosed()
	expectPresence(t, w.recv(), "bob", "")
	if took := time.Since(start); took < grace {
		t.Fatalf("bob shown offline %v after the drain began, before the grace %v", took, grace)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
	ds := m.published("A") // the last: bob's end, then his last seen
	if last := ds[len(ds)-2].Session; last == nil || last.User != "bob" || last.State != crdt.StateDisconnected {
		t.Fatalf("A's last session write %+v, want bob disconnected", last)
	}
	if ls := ds[len(ds)-1].LastSeen; ls == nil || ls.User != "bob" {
		t.Fatalf("A's last write %+v, want bob's last seen", ds[len(ds)-1])
	}
	checkInvariants(t, a)
}

// A gateway with nowhere to send its clients (standalone, or the last of
// its cluster) ends its sessions at once and lists no gateways.
func TestDrainWithoutOtherGatewaysEndsAtOnce(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.DrainGrace, c.DrainTimeout = time.Minute, 2*time.Minute })
	a, _ := connect(t, n, "alice", "phone")
	done := make(chan error, 1)
	go func() { done <- n.Drain(t.Context()) }()
	e := a.expectError(protocol.CodeShuttingDown)
	if _, ok := e["gateways"]; ok {
		t.Fatalf("shutting_down of a standalone gateway lists gateways: %v", e)
	}
	a.expectClosed()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a standalone gateway waits out the drain grace")
	}
	if presenceOf(n, "alice").Online {
		t.Fatal("alice online after the drain")
	}
}

// A drain whose context ends during the grace writes the held sessions at
// once.
func TestDrainContextEndsTheGrace(t *testing.T) {
	_, ns := newMesh(t, func(c *Config) { c.DrainGrace, c.DrainTimeout = time.Minute, 2*time.Minute }, "A", "B")
	connect(t, ns[0], "alice", "phone")
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := ns[0].Drain(ctx); err == nil {
		t.Fatal("Drain past its context returned nil")
	}
	if presenceOf(ns[1], "alice").Online {
		t.Fatal("alice still online on B after A's drain gave up")
	}
}

func TestDrainGraceConfig(t *testing.T) {
	c := Config{Name: "n", Dev: true, DrainTimeout: time.Second}
	if err := c.Validate(); err == nil {
		t.Fatal("the default 2s grace accepted with a 1s drain timeout")
	}
	c = Config{Name: "n", Dev: true, DrainGrace: -1, DrainTimeout: time.Second}
	if err := c.Validate(); err != nil {
		t.Fatalf("a disabled grace: %v", err)
	}
	for _, a := range []string{"0.0.0.0:7400", "[::]:7400", "nohost", ":7400"} {
		c := Config{Name: "n", Dev: true, ClientAdvertise: a}
		if err := c.Validate(); err == nil {
			t.Errorf("ClientAdvertise %q accepted", a)
		}
	}
	c = Config{Name: "n", Dev: true, ClientAdvertise: "gw1.example:7400"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// readiness is a Cluster that reports readiness.
type readiness struct {
	fakeCluster
	mu    sync.Mutex
	ready bool
}

func (r *readiness) Readiness() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ready, "waiting for the test"
}

func (r *readiness) set(ready bool) {
	r.mu.Lock()
	r.ready = ready
	r.mu.Unlock()
}

// GET /readyz: 503 while the cluster is joining (while /healthz says
// alive), 200 once it is ready, 503 again while draining; a standalone
// node is ready once it listens.
func TestReadyz(t *testing.T) {
	get := func(n *Node, path string) (int, map[string]string) {
		t.Helper()
		resp, err := http.Get("http://" + n.HTTPAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]string
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, body
	}
	cl := &readiness{}
	n := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0"; c.Cluster = cl })
	if code, body := get(n, "/readyz"); code != http.StatusServiceUnavailable || body["status"] != "joining" ||
		body["reason"] != "waiting for the test" || body["node"] != "n1" {
		t.Fatalf("/readyz while joining: %d %v", code, body)
	}
	if code, _ := get(n, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz while joining: %d", code)
	}
	cl.set(true)
	if code, body := get(n, "/readyz"); code != http.StatusOK || body["status"] != "ready" {
		t.Fatalf("/readyz once ready: %d %v", code, body)
	}
	go n.Drain(t.Context())
	waitFor(t, "draining", func() bool { ready, _, _ := n.Readiness(); return !ready })
	if code, body := get(n, "/readyz"); code != http.StatusServiceUnavailable || body["status"] != "draining" {
		t.Fatalf("/readyz while draining: %d %v", code, body)
	}

	alone := newTestNode(t, func(c *Config) { c.HTTPAddr = "127.0.0.1:0" })
	if code, body := get(alone, "/readyz"); code != http.StatusOK || body["status"] != "ready" {
		t.Fatalf("/readyz of a standalone node: %d %v", code, body)
	}
}

// locate names the node's own client address as ClientAdvertise says.
func TestLocateUsesClientAdvertise(t *testing.T) {
	n := newTestNode(t, func(c *Config) { c.ClientAdvertise = "gw1.example:7400" })
	a, _ := connect(t, n, "alice", "phone")
	loc := a.call(map[string]any{"op": "locate", "user": "alice"})
	if ss, _ := loc["sessions"].([]any); len(ss) != 1 || ss[0].(map[string]any)["gateway_addr"] != "gw1.example:7400" {
		t.Fatalf("locate %v", loc)
	}
	if got := n.AdvertisedClientAddr(); got != "gw1.example:7400" {
		t.Fatalf("AdvertisedClientAddr %q", got)
	}
}
