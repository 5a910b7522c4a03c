package gossip

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/node"
)

// readyz returns GET /readyz's status code and body from a gateway.
func readyz(t *testing.T, gw *node.Node) (int, map[string]string) {
	t.Helper()
	resp, err := http.Get("http://" + gw.HTTPAddr().String() + "/readyz")
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

// A gateway whose --join reaches nobody answers /readyz 503 (and /healthz
// 200: it is alive) for as long as that lasts; once the member it names
// is up, it joins, catches up and answers 200.
func TestReadyzWaitsForTheJoin(t *testing.T) {
	seedAddr := freeAddr(t)
	s := &stack{t: t, net: NewFaultNetwork(3), timeout: 2 * time.Second, nodeConfig: func(c *node.Config) {
		c.HTTPAddr = "127.0.0.1:0"
	}}
	t.Cleanup(func() {
		for _, sn := range s.nodes {
			_ = sn.cluster.Shutdown()
			_ = sn.gw.Close()
		}
	})
	early := s.start("early", func(c *Config) { c.Join = []string{seedAddr} })
	gw := s.nodes[early].gw
	for range 2 { // at once, and after the first retry of the join
		code, body := readyz(t, gw)
		if code != http.StatusServiceUnavailable || body["status"] != "joining" || !strings.Contains(body["reason"], seedAddr) {
			t.Fatalf("/readyz with an unreachable --join: %d %v", code, body)
		}
		if resp, err := http.Get("http://" + gw.HTTPAddr().String() + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz with an unreachable --join: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		time.Sleep(700 * time.Millisecond)
	}
	s.start("seed", func(c *Config) { c.BindAddr = seedAddr })
	waitFor(t, 10*time.Second, "early ready", func() bool {
		code, _ := readyz(t, gw)
		return code == http.StatusOK
	})
	if _, body := readyz(t, gw); body["status"] != "ready" || body["node"] != "early" {
		t.Fatalf("/readyz once joined: %v", body)
	}
}

// slowDiffHost answers digests late: the window in which a joining node
// has joined but not yet caught up.
type slowDiffHost struct {
	*fakeHost
	delay time.Duration
}

func (h *slowDiffHost) DiffPage(peer crdt.Digest, cur crdt.PageCursor, maxRecords, maxBytes int) (crdt.Sync, crdt.PageCursor, bool) {
	time.Sleep(h.delay)
	return h.fakeHost.DiffPage(peer, cur, maxRecords, maxBytes)
}

// A joining gateway is ready only once its replica holds what the member
// it joined holds (the answer to its digest has been applied), not as
// soon as the join returns.
func TestReadyOnlyOnceCaughtUp(t *testing.T) {
	tc := &testCluster{t: t, net: NewFaultNetwork(4)}
	tc.wrapHost = func(i int, h *fakeHost) Host {
		if i == 0 {
			return &slowDiffHost{fakeHost: h, delay: 300 * time.Millisecond}
		}
		return h
	}
	tc.run(1)
	if ok, _ := tc.nodes[0].Readiness(); !ok {
		t.Fatal("a node without Join is not ready")
	}
	for i := range 30 {
		tc.hosts[0].connect(t, fmt.Sprintf("user%02d", i), "d")
	}
	seed := crdt.Origin{Node: "n0", Incarnation: 1}
	want := tc.hosts[0].Watermark(seed)
	late := tc.start("late", 1)
	if ok, why := tc.nodes[late].Readiness(); ok || !strings.Contains(why, "anti-entropy") {
		t.Fatalf("ready (%v, %q) as soon as the join returned", ok, why)
	}
	select {
	case <-tc.nodes[late].Ready():
	case <-time.After(10 * time.Second):
		_, why := tc.nodes[late].Readiness()
		t.Fatalf("not ready after joining: %s", why)
	}
	if got := tc.hosts[late].Watermark(seed); got < want {
		t.Fatalf("ready with the seed's writes up to %d of %d", got, want)
	}
}

func TestCovers(t *testing.T) {
	o1, o2 := crdt.Origin{Node: "a", Incarnation: 1}, crdt.Origin{Node: "b", Incarnation: 1}
	held := map[crdt.Origin]uint64{o1: 5}
	wm := func(o crdt.Origin) uint64 { return held[o] }
	for _, tc := range []struct {
		peer crdt.Digest
		want bool
	}{
		{nil, true},
		{crdt.Digest{{Origin: o1, Watermark: 5}}, true},
		{crdt.Digest{{Origin: o1, Watermark: 6}}, false},
		{crdt.Digest{{Origin: o2}}, true}, // an origin that wrote nothing
		{crdt.Digest{{Origin: o1, Watermark: 3, Held: []crdt.Span{{After: 4, Through: 7}}}}, false},
		{crdt.Digest{{Origin: o1, Watermark: 3, Held: []crdt.Span{{After: 4, Through: 5}}}}, true},
		{crdt.Digest{{Origin: o1, Watermark: 5}, {Origin: o2, Watermark: 1}}, false},
	} {
		if got := covers(tc.peer, wm); got != tc.want {
			t.Errorf("covers(%+v) = %v, want %v", tc.peer, got, tc.want)
		}
	}
}

func TestResolveClientAddr(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		ip     net.IP
		want   string
		change bool
	}{
		{"10.0.0.1:7400", net.ParseIP("10.0.0.9"), "10.0.0.1:7400", false},
		{"0.0.0.0:7400", net.ParseIP("10.0.0.9"), "10.0.0.9:7400", true},
		{":7400", net.ParseIP("10.0.0.9"), "10.0.0.9:7400", true},
		{"[::]:7400", net.ParseIP("fd00::9"), "[fd00::9]:7400", true},
		{"0.0.0.0:7400", nil, "0.0.0.0:7400", false},
		{"0.0.0.0:7400", net.IPv4zero, "0.0.0.0:7400", false},
		{"gw1.example:7400", net.ParseIP("10.0.0.9"), "gw1.example:7400", false},
	} {
		got, changed := resolveClientAddr(tc.addr, tc.ip)
		if got != tc.want || changed != tc.change {
			t.Errorf("resolveClientAddr(%q, %v) = %q, %v; want %q, %v", tc.addr, tc.ip, got, changed, tc.want, tc.change)
		}
	}
}

// Gateways listening on 0.0.0.0 advertise their gossip IP with the client
// port: in members, in locate's gateway_addr (on their own node and on
// others) and in the drain's list of gateways.
func TestUnspecifiedClientAddrIsAdvertisedWithTheGossipIP(t *testing.T) {
	s := &stack{t: t, net: NewFaultNetwork(5), timeout: 2 * time.Second, nodeConfig: func(c *node.Config) {
		c.ClientAddr = "0.0.0.0:0"
	}}
	t.Cleanup(func() {
		for _, sn := range s.nodes {
			_ = sn.cluster.Shutdown()
			_ = sn.gw.Close()
		}
	})
	s.start("g0")
	s.start("g1")
	s.waitMembers(2)
	advertised := func(i int) string {
		_, port, _ := net.SplitHostPort(s.nodes[i].gw.ClientAddr().String())
		return net.JoinHostPort("127.0.0.1", port)
	}
	for i := range 2 {
		if !isUnspecifiedHost(s.nodes[i].gw.ClientAddr().String()) {
			t.Fatalf("g%d listens on %v", i, s.nodes[i].gw.ClientAddr())
		}
	}
	waitFor(t, 5*time.Second, "members list the advertised client addresses", func() bool {
		for _, m := range s.nodes[1].cluster.Members() {
			want := advertised(map[string]int{"g0": 0, "g1": 1}[m.Name])
			if m.ClientAddr != want {
				return false
			}
		}
		return true
	})
	alice := s.dial(0, "alice", "phone", nil)
	alice.heartbeat(300 * time.Millisecond)
	waitFor(t, 5*time.Second, "alice on g1", func() bool { return s.online(1, "alice") })
	for i := range 2 {
		q := s.queryClient(i)
		q.send(map[string]any{"op": "locate", "user": "alice", "id": 1})
		ss, _ := q.expect("locate", 5*time.Second)["sessions"].([]any)
		if len(ss) != 1 || ss[0].(map[string]any)["gateway_addr"] != advertised(0) {
			t.Fatalf("locate on g%d: %v, want gateway_addr %s", i, ss, advertised(0))
		}
	}
	if got := s.nodes[0].cluster.OtherGateways(); len(got) != 1 || got[0] != advertised(1) {
		t.Fatalf("g0's other gateways %v, want [%s]", got, advertised(1))
	}
}
