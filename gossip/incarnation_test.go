package gossip

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/node"
)

// offsetClock is a host clock set off the true time by a fixed amount.
type offsetClock time.Duration

func (c offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

// restartAs starts gateway i of the stack again under name, on a host
// whose clock is off by offset, choosing its incarnation as the agent
// does: the clock, and what the members know of the name (Probe).
func (s *stack) restartAs(i int, name string, offset time.Duration, opts ...func(*Config)) {
	s.t.Helper()
	clock := offsetClock(offset)
	cfg := testConfig(name, 0)
	cfg.LeaseTimeout = s.timeout
	cfg.WrapTransport = s.net.Wrap
	cfg.Now = clock.Now
	for _, o := range opts {
		o(&cfg)
	}
	for _, sn := range s.nodes {
		if sn != nil {
			cfg.Join = []string{sn.cluster.LocalAddr()}
			break
		}
	}
	prior, err := Probe(cfg)
	if err != nil {
		s.t.Fatalf("probe before restarting %s: %v", name, err)
	}
	inc, err := NextIncarnation(clock.Now(), prior.Incarnation)
	if err != nil {
		s.t.Fatal(err)
	}

	ncfg := node.DefaultConfig()
	ncfg.Name = name
	ncfg.ClientAddr = "127.0.0.1:0"
	ncfg.Dev = true
	ncfg.Timeout = s.timeout
	ncfg.Heartbeat = s.timeout / 4
	ncfg.Clock = clock
	ncfg.Incarnation = inc
	gw, err := node.New(ncfg)
	if err != nil {
		s.t.Fatal(err)
	}
	if err := gw.Start(); err != nil {
		s.t.Fatal(err)
	}
	cfg.Incarnation = gw.Origin().Incarnation
	cfg.ClientAddr = gw.ClientAddr().String()
	c, err := New(cfg, gw)
	if err != nil {
		s.t.Fatal(err)
	}
	gw.SetCluster(c)
	s.nodes[i] = &stackNode{gw: gw, cluster: c}
}

// watch subscribes to user's presence on gateway i and returns the
// subscriber, past its first event.
func (s *stack) watch(i int, user string) *client {
	s.t.Helper()
	sub := s.queryClient(i)
	sub.heartbeat(s.timeout / 4)
	sub.send(map[string]any{"op": "sub", "users": []string{user}, "id": "w"})
	sub.expect("ok", 5*time.Second)
	sub.expect("event", 5*time.Second)
	return sub
}

// expectOnline waits for the subscriber's next event on its user and
// fails unless it says online is want.
func expectOnline(t *testing.T, sub *client, want bool, what string) {
	t.Helper()
	ev := sub.expect("event", 10*time.Second)
	if ev["online"] != want {
		t.Fatalf("%s: event %v, want online %v", what, ev, want)
	}
}

// expectDevices waits up to 10 s for an event on the subscriber's user
// that shows exactly the given devices online, and fails if none comes.
func expectDevices(t *testing.T, sub *client, want []string, what string) {
	t.Helper()
	timer := time.NewTimer(10 * time.Second)
	defer timer.Stop()
	var last map[string]any
	for {
		select {
		case m, ok := <-sub.in:
			if !ok {
				t.Fatalf("%s: the subscriber's connection closed", what)
			}
			if m["op"] == "event" {
				last = m
			}
		case <-timer.C:
			t.Fatalf("%s: no event showing devices %v online within 10s; last event %v", what, want, last)
		}
		if last == nil {
			continue
		}
		var devices []string
		sessions, _ := last["sessions"].([]any)
		for _, s := range sessions {
			devices = append(devices, s.(map[string]any)["device"].(string))
		}
		slices.Sort(devices)
		if last["online"] == true && slices.Equal(devices, want) {
			return
		}
	}
}

// A gateway restarted on a host whose clock is an hour behind starts as an
// incarnation newer than its previous run (learned from the cluster before
// it joins), so its sessions are shown online on every other gateway.
// With the incarnation taken from the clock alone, the restarted gateway
// is "older" than its previous run and its sessions stay offline
// everywhere else.
func TestRestartWithClockBehindIsShownOnline(t *testing.T) {
	// At once: the other gateways' memberlist still lists the crashed
	// run. Later: memberlist has forgotten it (GossipToTheDeadTime, 30s
	// on a LAN), their replicas still hold its sessions.
	t.Run("at once", func(t *testing.T) { testRestartWithClockBehind(t, false) })
	t.Run("after memberlist forgot it", func(t *testing.T) { testRestartWithClockBehind(t, true) })
}

func testRestartWithClockBehind(t *testing.T, forgotten bool) {
	forget := func(c *Config) {
		c.Memberlist = func(mlc *memberlist.Config) {
			fastMemberlist(mlc)
			mlc.GossipToTheDeadTime = 200 * time.Millisecond
		}
	}
	s := newStack(t, 3, 2*time.Second, forget)
	s.waitMembers(3)
	subs := []*client{s.watch(0, "alice"), s.watch(2, "alice")}

	alice := s.dial(1, "alice", "phone", nil)
	alice.heartbeat(s.timeout / 4)
	for _, sub := range subs {
		expectOnline(t, sub, true, "alice connected to g1")
	}
	before := s.nodes[1].gw.Origin().Incarnation

	// kill -9, and back on a clock an hour behind.
	s.kill(1)
	alice.close()
	for _, sub := range subs {
		expectOnline(t, sub, false, "g1 crashed")
	}
	if forgotten {
		waitFor(t, 15*time.Second, "g1 forgotten by memberlist on g0 and g2", func() bool {
			cfg := testConfig("g1", 0)
			cfg.Join = []string{s.nodes[0].cluster.LocalAddr(), s.nodes[2].cluster.LocalAddr()}
			p, err := Probe(cfg)
			return err == nil && p.Reached == 2 && p.listed == 0
		})
	}
	s.restartAs(1, "g1", -time.Hour, forget)
	s.waitMembers(3)

	// alice's new session, on the restarted g1, is the one shown; the
	// crashed run's is not shown again.
	alice = s.dial(1, "alice", "laptop", nil)
	alice.heartbeat(s.timeout / 4)
	for i, sub := range subs {
		expectDevices(t, sub, []string{"laptop"}, []string{"g0", "g2"}[i]+": alice connected to the restarted g1")
	}
	if after := s.nodes[1].gw.Origin().Incarnation; after <= before {
		t.Errorf("restarted g1 is incarnation %d, not above its previous %d", after, before)
	}
	for _, i := range []int{0, 2} {
		for _, m := range s.nodes[i].cluster.Members() {
			if m.Name == "g1" && m.Incarnation != s.nodes[1].gw.Origin().Incarnation {
				t.Errorf("g%d lists g1 as incarnation %d, want %d", i, m.Incarnation, s.nodes[1].gw.Origin().Incarnation)
			}
		}
	}
}

// A second gateway started under the name of a live one is refused before
// it announces anything, with an error naming the other's address, and
// the live one's sessions stay shown.
func TestProbeRefusesALiveDuplicateName(t *testing.T) {
	s := newStack(t, 2, 2*time.Second)
	s.waitMembers(2)
	sub := s.watch(0, "bob")
	bob := s.dial(1, "bob", "laptop", nil)
	bob.heartbeat(s.timeout / 4)
	expectOnline(t, sub, true, "bob connected to g1")

	cfg := testConfig("g1", 0)
	cfg.WrapTransport = s.net.Wrap
	cfg.Join = []string{s.nodes[0].cluster.LocalAddr()}
	_, err := Probe(cfg)
	var dup *DuplicateError
	if !errors.As(err, &dup) {
		t.Fatalf("probe under a live gateway's name: %v, want a DuplicateError", err)
	}
	if g1 := s.nodes[1].cluster.LocalAddr(); dup.Addr != g1 || !strings.Contains(err.Error(), g1) || !strings.Contains(err.Error(), `"g1"`) {
		t.Fatalf("error %q (addr %q) does not name g1 and its address %s", err, dup.Addr, g1)
	}

	// The probe is no member anywhere, and g1 is untouched.
	for _, i := range []int{0, 1} {
		if n := s.nodes[i].cluster.ml.NumMembers(); n != 2 {
			t.Errorf("g%d counts %d members after the probe, want 2", i, n)
		}
	}
	if !s.online(0, "bob") {
		t.Error("bob (on g1) not shown online on g0 after the probe")
	}
	for _, m := range s.nodes[0].cluster.Members() {
		if m.Name == "g1" && (m.Addr != s.nodes[1].cluster.LocalAddr() || m.State != "alive") {
			t.Errorf("g0 lists g1 as %+v after the probe", m)
		}
	}
}

// Probe reports the largest incarnation the members hold of a name: from
// their member lists, and from their replicas once memberlist has
// forgotten a member gone for a while; 0 for a name never seen. With no
// join address it asks nobody.
func TestProbeLearnsTheLastIncarnation(t *testing.T) {
	tc := newTestCluster(t, 2, func(c *Config) {
		c.Memberlist = func(mlc *memberlist.Config) {
			fastMemberlist(mlc)
			mlc.GossipToTheDeadTime = 200 * time.Millisecond
		}
	})
	tc.waitMembers(2)
	probe := func(name string, join ...string) (Prior, error) {
		cfg := testConfig(name, 0)
		cfg.WrapTransport = tc.net.Wrap
		cfg.Join = join
		return Probe(cfg)
	}
	n2 := tc.start("n2", 5000)
	tc.waitMembers(3)
	tc.hosts[n2].connect(t, "zed", "phone")
	waitFor(t, 5*time.Second, "zed online on n0", func() bool { return tc.hosts[0].presence("zed").Online })
	if p, err := probe("n2", tc.addr(0), tc.addr(1)); err == nil || p.Incarnation != 5000 {
		t.Fatalf("probe under live n2's name: %+v, %v; want incarnation 5000 and an error", p, err)
	}

	tc.crash(n2)
	var p Prior
	waitFor(t, 15*time.Second, "n2 forgotten by memberlist on n0 and n1", func() bool {
		var err error
		p, err = probe("n2", tc.addr(0), tc.addr(1))
		return err == nil && p.Reached == 2 && p.listed == 0
	})
	if p.Incarnation != 5000 {
		t.Fatalf("probe n2 after memberlist forgot it: %+v; want incarnation 5000 (from the replicas)", p)
	}
	if p, err := probe("n7", tc.addr(1)); err != nil || p.Incarnation != 0 || p.Reached != 1 {
		t.Fatalf("probe of a name never seen: %+v, %v", p, err)
	}
	if p, err := probe("n7"); err != nil || p != (Prior{}) {
		t.Fatalf("probe with nothing to join: %+v, %v", p, err)
	}
	for _, i := range []int{0, 1} {
		if n := tc.nodes[i].ml.NumMembers(); n != 2 {
			t.Errorf("n%d counts %d members after the probes, want 2", i, n)
		}
	}
}

// A probe nobody answers says so.
func TestProbeWithNobodyToAsk(t *testing.T) {
	tc := newTestCluster(t, 1)
	addr := tc.addr(0)
	tc.crash(0)
	cfg := testConfig("n1", 0)
	cfg.Join = []string{addr}
	if _, err := Probe(cfg); !errors.Is(err, ErrNoMemberReached) {
		t.Fatalf("probe of a stopped member: %v, want ErrNoMemberReached", err)
	}
}

// Every Rollcall node, of this version or an earlier one, refuses the
// probe's metadata as a member's.
func TestProbeMetaIsNoMemberMeta(t *testing.T) {
	if _, err := dissem.DecodeMeta(probeMeta); err == nil {
		t.Fatal("the probe's metadata decodes as a member's: earlier versions would admit the probe")
	}
}

func TestNextIncarnation(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := uint64(now.UnixNano())
	hourAhead := uint64(now.Add(time.Hour).UnixNano())
	for _, c := range []struct {
		earlier []uint64
		want    uint64
	}{
		{nil, clock},
		{[]uint64{0, 0}, clock},
		{[]uint64{clock - 1}, clock},
		{[]uint64{clock}, clock + 1},
		{[]uint64{hourAhead, 0}, hourAhead + 1},
		{[]uint64{5, hourAhead, clock}, hourAhead + 1},
	} {
		if got, err := NextIncarnation(now, c.earlier...); err != nil || got != c.want {
			t.Errorf("NextIncarnation(%v, %v) = %d, %v; want %d", now, c.earlier, got, err, c.want)
		}
	}
	if got, err := NextIncarnation(now, clock, 1<<64-1); err == nil {
		t.Errorf("NextIncarnation past 2^64-1 = %d, want an error", got)
	}
}

func TestIncarnationFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, IncarnationFileName)
	if inc, err := ReadIncarnationFile(path); err != nil || inc != 0 {
		t.Fatalf("missing file: %d, %v; want 0, nil", inc, err)
	}
	for _, inc := range []uint64{1_700_000_000_000_000_000, 42, 1<<64 - 1} {
		if err := WriteIncarnationFile(path, inc); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadIncarnationFile(path); err != nil || got != inc {
			t.Fatalf("read back %d, %v; want %d", got, err, inc)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %d entries, want the file alone (no temporary files left)", len(ents))
	}

	for _, bad := range []string{"", "\n", "garbage", "-5", "0", "12x", "99999999999999999999999"} {
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := ReadIncarnationFile(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "corrupt") {
			t.Errorf("file holding %q: %v; want an error naming the file as corrupt", bad, err)
		}
	}

	if runtime.GOOS != "windows" && os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if err := WriteIncarnationFile(filepath.Join(ro, IncarnationFileName), 7); err == nil {
			t.Error("writing into a read-only directory succeeded")
		}
	}
	if err := WriteIncarnationFile(filepath.Join(dir, "missing", IncarnationFileName), 7); err == nil {
		t.Error("writing into a missing directory succeeded")
	}
}
