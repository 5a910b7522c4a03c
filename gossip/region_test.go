package gossip

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/cluster"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// Two or more regions of real gateways on loopback: each region a cluster
// of its own (its own fault network), the bridge-capable gateways also in
// one WAN pool whose packets cross a fault network of their own (a delay,
// partitions between regions).

const (
	testWANAlive = 200 * time.Millisecond
	// over testWANAlive plus a bridge failover (the test lease of 2s):
	// a failover never shows a region expired
	testWANLease = 4 * time.Second
	testWANDelay = 20 * time.Millisecond // one way: a 40ms round trip
)

type regionGateway struct {
	name, region string
	bridge       bool
	inc          uint64
	c            *Cluster
	h            *fakeHost
}

type regionCluster struct {
	t       testing.TB
	regions []string
	lan     map[string]*FaultNetwork
	wan     *FaultNetwork
	gws     []*regionGateway
	onHost  []func(i int, h *fakeHost)
	// wanProfile, when set, is the WAN pool's memberlist profile as the
	// agent's --wan-profile gives it (else the test's quick timings)
	wanProfile string
}

// newRegionCluster starts, in each region, n gateways of which the first
// bridges are bridge-capable, and waits until every region hears every
// other.
func newRegionCluster(t testing.TB, regions []string, n, bridges int, onHost ...func(i int, h *fakeHost)) *regionCluster {
	return newRegionClusterProfile(t, "", regions, n, bridges, onHost...)
}

// newRegionClusterProfile is newRegionCluster with the WAN pool on one of
// the agent's --wan-profile timings ("": the test's quick ones).
func newRegionClusterProfile(t testing.TB, wanProfile string, regions []string, n, bridges int, onHost ...func(i int, h *fakeHost)) *regionCluster {
	rc := &regionCluster{t: t, regions: regions, lan: map[string]*FaultNetwork{}, wan: NewFaultNetwork(7), onHost: onHost,
		wanProfile: wanProfile}
	rc.wan.SetDelay(testWANDelay, 0)
	for _, reg := range regions {
		rc.lan[reg] = NewFaultNetwork(3)
		for i := range n {
			rc.start(&regionGateway{name: fmt.Sprintf("%s%d", reg, i), region: reg, bridge: i < bridges, inc: 1})
		}
	}
	t.Cleanup(func() {
		for _, g := range rc.gws {
			if g.c != nil {
				_ = g.c.Shutdown()
			}
		}
	})
	rc.waitRegions()
	return rc
}

func (rc *regionCluster) start(g *regionGateway) {
	rc.t.Helper()
	h := newFakeHost(rc.t, g.name, g.inc)
	for _, f := range rc.onHost {
		i := slices.Index(rc.gws, g)
		if i < 0 {
			i = len(rc.gws)
		}
		f(i, h)
	}
	cfg := testConfig(g.name, g.inc)
	cfg.WrapTransport = rc.lan[g.region].Wrap
	cfg.Region = g.region
	cfg.ClientAddr = fmt.Sprintf("127.0.0.1:%d", 17400+len(rc.gws))
	cfg.WANAliveInterval, cfg.WANLease = testWANAlive, testWANLease
	if rc.wanProfile != "" {
		// the agent's WAN timings throughout, at every gateway
		cfg.WANAliveInterval, cfg.WANLease = dissem.DefaultWANAliveInterval, dissem.DefaultWANLease
	}
	// memberlist's failure detector, less eager than fastMemberlist's: a
	// false suspicion on a loaded machine moves the active bridge
	cfg.Memberlist = regionMemberlist
	// A routed message crosses three hops, each its own request: a hang
	// guard, not a promise (a loaded machine under -race took over 2s).
	cfg.RouteTimeout = 15 * time.Second
	for _, o := range rc.gws {
		if o.c == nil {
			continue
		}
		if o.region == g.region && len(cfg.Join) == 0 {
			cfg.Join = []string{o.c.LocalAddr()}
		}
	}
	if g.bridge {
		cfg.WANBindAddr = "127.0.0.1:0"
		cfg.WANProfile = "local"
		cfg.WANMemberlist = regionMemberlist
		cfg.WrapWANTransport = rc.wan.Wrap
		if rc.wanProfile != "" {
			cfg.WANProfile, cfg.WANMemberlist = rc.wanProfile, nil
		}
		for _, o := range rc.gws {
			if o.c != nil && o.bridge {
				cfg.WANJoin = append(cfg.WANJoin, o.c.WANAddr())
			}
		}
	}
	c, err := New(cfg, h)
	if err != nil {
		rc.t.Fatal(err)
	}
	h.cluster = c
	g.c, g.h = c, h
	if !slices.Contains(rc.gws, g) {
		rc.gws = append(rc.gws, g)
	}
}

func regionMemberlist(mlc *memberlist.Config) {
	fastMemberlist(mlc)
	mlc.ProbeInterval = 200 * time.Millisecond
	mlc.ProbeTimeout = 100 * time.Millisecond
	mlc.SuspicionMult = 4
}

func (rc *regionCluster) bridgeChanges() uint64 {
	var n uint64
	for _, g := range rc.live() {
		n += g.c.Stats().BridgeChanges.Load()
	}
	return n
}

func (rc *regionCluster) gw(name string) *regionGateway {
	for _, g := range rc.gws {
		if g.name == name {
			return g
		}
	}
	rc.t.Fatalf("no gateway %s", name)
	return nil
}

func (rc *regionCluster) live() []*regionGateway {
	var out []*regionGateway
	for _, g := range rc.gws {
		if g.c != nil {
			out = append(out, g)
		}
	}
	return out
}

func (rc *regionCluster) crash(g *regionGateway) {
	_ = g.c.Shutdown()
	g.c = nil
}

// waitRegions waits until every live gateway shows every other region up
// with an active bridge in each region.
func (rc *regionCluster) waitRegions() {
	waitFor(rc.t, 10*time.Second, "every region to hear every other", func() bool {
		for _, g := range rc.live() {
			up := 0
			for _, r := range g.c.Regions() {
				if !r.Down && r.Gateways > 0 {
					up++
				}
			}
			if up != len(rc.regions)-1 {
				return false
			}
		}
		for _, reg := range rc.regions {
			if rc.activeBridge(reg) == nil {
				return false
			}
		}
		// Every bridge reported that it sees every other region, and every
		// gateway of its region heard it: the choice is settled.
		for _, g := range rc.live() {
			reach := g.c.BridgeReach()
			for _, b := range rc.live() {
				if b.bridge && b.region == g.region && len(reach[b.name]) != len(rc.regions)-1 {
					return false
				}
			}
		}
		return true
	})
}

// activeBridge returns the region's one active bridge, nil unless exactly
// one gateway is.
func (rc *regionCluster) activeBridge(region string) *regionGateway {
	var out *regionGateway
	for _, g := range rc.live() {
		if g.region == region && g.c.ActiveBridge() {
			if out != nil {
				return nil
			}
			out = g
		}
	}
	return out
}

// online reports whether user is online at every live gateway of regions
// (all when none is named).
func (rc *regionCluster) online(user string, regions ...string) bool {
	for _, g := range rc.live() {
		if (len(regions) == 0 || slices.Contains(regions, g.region)) && !g.h.presence(user).Online {
			return false
		}
	}
	return true
}

// offline reports whether user is offline at every live gateway of regions.
func (rc *regionCluster) offline(user string, regions ...string) bool {
	for _, g := range rc.live() {
		if slices.Contains(regions, g.region) && g.h.presence(user).Online {
			return false
		}
	}
	return true
}

func (rc *regionCluster) converged() bool {
	live := rc.live()
	first := live[0].h.snapshot()
	for _, g := range live[1:] {
		if g.h.snapshot() != first {
			return false
		}
	}
	return true
}

func (rc *regionCluster) wanCopies() uint64 {
	var n uint64
	for _, g := range rc.live() {
		n += g.c.Stats().WANDeltaCopies.Load()
	}
	return n
}

// A write in one region reaches every gateway of the others, crossing the
// WAN pool once per other region: through the active bridge of its
// region, to the bridge of each other.
func TestRegionsWriteCrossesOncePerRemoteRegion(t *testing.T) {
	rc := newRegionCluster(t, []string{"eu", "us", "ap"}, 3, 2)
	before, changes := rc.wanCopies(), rc.bridgeChanges()
	const writes = 10
	for i := range writes {
		rc.gw(fmt.Sprintf("eu%d", i%3)).h.connect(t, fmt.Sprintf("eu-user%d", i), "phone")
		time.Sleep(20 * time.Millisecond) // separate windows: one change each
	}
	rc.gw("us2").h.connect(t, "us-user", "laptop")
	waitFor(t, 10*time.Second, "every write everywhere", func() bool {
		for i := range writes {
			if !rc.online(fmt.Sprintf("eu-user%d", i)) {
				return false
			}
		}
		return rc.online("us-user")
	})
	waitFor(t, 10*time.Second, "identical projections", rc.converged)
	// eu's writes cross to us and ap, us's to eu and ap: one copy each,
	// counted before it is sent, so all counted once every gateway has
	// it. While the active bridges stay put: a false suspicion on a
	// loaded machine moves one (two regions' views disagree for a moment,
	// and a change crosses twice, or is left to repair).
	want := uint64(writes*2 + 2)
	if rc.bridgeChanges() != changes {
		t.Skipf("an active bridge moved during the writes (memberlist suspected a member): copies %d, not comparable with %d",
			rc.wanCopies()-before, want)
	}
	if got := rc.wanCopies() - before; got != want {
		for _, g := range rc.live() {
			st := g.c.Stats()
			t.Logf("%s: WAN copies %d, leases expired %d, members failed %d, bridge changes %d", g.name,
				st.WANDeltaCopies.Load(), st.LeasesExpired.Load(), st.MembersFailed.Load(), st.BridgeChanges.Load())
		}
		t.Errorf("deltas sent over the WAN pool: %d, want %d (one per change per other region)", got, want)
	}
	// A gateway of another region is no member here: not in the list.
	for _, m := range rc.gw("eu2").c.Members() {
		if m.Name[:2] != "eu" {
			t.Errorf("eu2 lists %s as a member", m.Name)
		}
	}
	if addr := rc.gw("eu2").c.ClientAddrOf("us2"); addr != rc.gw("us2").c.cfg.ClientAddr {
		t.Errorf("eu2 has us2's client address as %q, want %q", addr, rc.gw("us2").c.cfg.ClientAddr)
	}
}

// A message for a session in another region is delivered through the
// bridges, from a plain gateway and from a bridge.
func TestRegionsCrossRegionSend(t *testing.T) {
	rc := newRegionCluster(t, []string{"eu", "us"}, 3, 2)
	rc.gw("us2").h.connect(t, "bob", "laptop")
	rc.gw("us0").h.connect(t, "carol", "laptop")
	waitFor(t, 10*time.Second, "bob and carol seen in eu", func() bool { return rc.online("bob", "eu") && rc.online("carol", "eu") })
	for _, from := range []string{"eu2", "eu0", "eu1"} {
		for _, to := range []struct{ user, gw string }{{"bob", "us2"}, {"carol", "us0"}} {
			n, err := rc.gw(from).c.Route(context.Background(), to.gw, cluster.Message{To: to.user, From: "alice", Body: []byte(`"hi from ` + from + `"`)})
			if err != nil || n != 1 {
				t.Errorf("%s -> %s at %s: delivered %d, %v; want 1", from, to.user, to.gw, n, err)
			}
		}
	}
	if got := len(rc.gw("us2").h.deliveredMessages()); got != 3 {
		t.Errorf("us2 got %d messages, want 3", got)
	}
	// A kick (the HTTP API's disconnect) goes the same way.
	kicked := make(chan string, 4)
	rc.gw("us2").h.OnKick = func(user, device string) { kicked <- user + "/" + device }
	for _, from := range []string{"eu2", "eu1"} {
		if n, err := rc.gw(from).c.Kick(context.Background(), "us2", "bob", "laptop"); err != nil || n != 1 {
			t.Errorf("%s kicks bob/laptop at us2: %d, %v; want 1", from, n, err)
		}
		if got := <-kicked; got != "bob/laptop" {
			t.Errorf("us2 kicked %s", got)
		}
	}
}

// Killing the active bridge moves the traffic to the other bridge: writes
// made after (and during the failover) cross, and no session of the
// gateways that live is lost on either side.
func TestRegionsActiveBridgeFailover(t *testing.T) {
	rc := newRegionCluster(t, []string{"eu", "us"}, 3, 2)
	old := rc.activeBridge("eu")
	var stay *regionGateway
	for _, g := range rc.gws {
		if g.region == "eu" && g != old {
			stay = g
			break
		}
	}
	stay.h.connect(t, "before", "d")
	rc.gw("us2").h.connect(t, "us-before", "d")
	waitFor(t, 10*time.Second, "the first sessions everywhere", func() bool { return rc.online("before") && rc.online("us-before") })
	killed := time.Now()
	rc.crash(old)
	stay.h.connect(t, "during", "d") // within the failover: left to repair
	waitFor(t, 10*time.Second, "eu to elect a new active bridge", func() bool {
		b := rc.activeBridge("eu")
		return b != nil && b != old
	})
	t.Logf("eu's new active bridge after %v", time.Since(killed).Round(time.Millisecond))
	stay.h.connect(t, "after", "d")
	rc.gw("us1").h.connect(t, "us-after", "d")
	waitFor(t, 15*time.Second, "every session of the live gateways everywhere", func() bool {
		for _, u := range []string{"before", "during", "after", "us-before", "us-after"} {
			if !rc.online(u) {
				return false
			}
		}
		return true
	})
	t.Logf("converged %v after the kill", time.Since(killed).Round(time.Millisecond))
	for _, g := range rc.live() {
		for _, r := range g.c.Regions() {
			if r.Down {
				t.Errorf("%s shows %s expired after a bridge failover", g.name, r.Region)
			}
		}
	}
}

// Killing every gateway of a region shows its sessions expired in the
// others once the WAN lease passes (not before); restarted, it is back.
func TestRegionsWholeRegionDownAndBack(t *testing.T) {
	rc := newRegionCluster(t, []string{"eu", "us"}, 3, 2)
	rc.gw("us2").h.connect(t, "bob", "laptop")
	rc.gw("us0").h.connect(t, "carol", "phone")
	rc.gw("eu1").h.connect(t, "alice", "phone")
	waitFor(t, 10*time.Second, "everyone everywhere", func() bool {
		return rc.online("bob") && rc.online("carol") && rc.online("alice")
	})
	var lastHeard time.Time = time.Now()
	for _, g := range rc.gws {
		if g.region == "us" {
			rc.crash(g)
		}
	}
	waitFor(t, 30*time.Second, "us's sessions shown expired in eu", func() bool {
		return rc.offline("bob", "eu") && rc.offline("carol", "eu")
	})
	took := time.Since(lastHeard)
	t.Logf("us shown expired in eu %v after its last gateway died (WAN lease %v, bound %v)",
		took.Round(time.Millisecond), testWANLease, dissem.WANCrashBound(testWANLease))
	if took < testWANLease-testWANAlive {
		t.Errorf("us shown expired after %v, before its lease %v could pass", took, testWANLease)
	}
	if !rc.online("alice", "eu") {
		t.Error("eu lost its own session")
	}
	for _, g := range rc.gws {
		if g.region == "us" {
			g.inc++
			rc.start(g)
		}
	}
	rc.gw("us2").h.connect(t, "bob", "laptop")
	waitFor(t, 15*time.Second, "us back: bob online everywhere, alice in us", func() bool {
		return rc.online("bob") && rc.online("alice", "us")
	})
	if !rc.offline("carol", "eu", "us") {
		t.Error("carol, of us's old incarnation, shown online again")
	}
}

// A partition between the regions leaves each working inside itself; once
// it heals, every gateway converges.
func TestRegionsPartitionAndHeal(t *testing.T) {
	rc := newRegionCluster(t, []string{"eu", "us"}, 3, 2)
	var euWAN, usWAN []string
	for _, g := range rc.live() {
		if !g.bridge {
			continue
		}
		if g.region == "eu" {
			euWAN = append(euWAN, g.c.WANAddr())
		} else {
			usWAN = append(usWAN, g.c.WANAddr())
		}
	}
	rc.gw("us2").h.connect(t, "bob", "laptop")
	waitFor(t, 10*time.Second, "bob everywhere", func() bool { return rc.online("bob") })
	rc.wan.Partition(euWAN, usWAN)
	cut := time.Now()
	rc.gw("eu2").h.connect(t, "alice", "phone")
	rc.gw("us1").h.connect(t, "dan", "phone")
	rc.gw("us2").h.write(t, "bob", "laptop", crdt.StateActive, crdt.StatusAway, nil)
	waitFor(t, 10*time.Second, "each region's writes inside it", func() bool {
		return rc.online("alice", "eu") && rc.online("dan", "us") && rc.online("bob", "us")
	})
	waitFor(t, 30*time.Second, "each region to show the other's sessions expired", func() bool {
		return rc.offline("bob", "eu") && rc.offline("alice", "us") && rc.offline("dan", "eu")
	})
	t.Logf("the regions show each other expired %v after the partition", time.Since(cut).Round(time.Millisecond))
	rc.wan.Heal()
	healed := time.Now()
	waitFor(t, 30*time.Second, "convergence after the heal", func() bool {
		return rc.online("alice") && rc.online("dan") && rc.online("bob") && rc.converged()
	})
	t.Logf("converged %v after the heal (bound %v)", time.Since(healed).Round(time.Millisecond), dissem.WANHealBound(testWANAlive, testWANLease))
	for _, g := range rc.live() {
		if st := g.h.presence("bob").Status; st != crdt.UserAway {
			t.Errorf("%s shows bob %v, want away (written during the partition)", g.name, st)
		}
	}
}

// BenchmarkRegionPropagation: time from a connect written on a gateway of
// one region (a bridge or not, in turn) to its appearance at every gateway
// of the other, two regions of three gateways (two bridge-capable) with
// 20ms each way between them (a 40ms round trip); and the deltas sent over
// the WAN pool per change.
//
//	go test -run '^$' -bench RegionPropagation -benchtime 300x ./gossip
func BenchmarkRegionPropagation(b *testing.B) {
	w := newWatcher()
	rc := newRegionCluster(b, []string{"eu", "us"}, 3, 2, w.attach)
	var us []int
	for i, g := range rc.gws {
		if g.region == "us" {
			us = append(us, i)
		}
	}
	copies0 := rc.wanCopies()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		user := fmt.Sprintf("user-%d", i)
		start := time.Now()
		rc.gws[i%3].h.connect(b, user, "phone")
		last := w.waitAll(b, user, true, us, 10*time.Second)
		lat = append(lat, last.Sub(start))
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(rc.wanCopies()-copies0)/float64(b.N), "wan-copies/change")
}

// A bridge cut off from the WAN pool alone (its region's LAN fine) hands
// over: once its memberlist holds the other region's bridges dead, it
// reports to its region that it sees no other region, and the region's
// other bridge, which does, takes over; the region's writes cross again.
// A bridge sees a region while one of its bridges answered its pings
// within dissem.WANReachWindow: the handover does not wait for
// memberlist's failure detection, and fits in the WAN lease.
//
// ROLLCALL_HANDOVER_PROFILE=wan (or lan) runs it on the agent's WAN pool
// timings instead of the test's, to measure them (minutes, not a test to
// run every time); ROLLCALL_HANDOVER_REGIONS=3 with a third region.
func TestRegionsBridgeCutFromWANHandsOver(t *testing.T) {
	profile := os.Getenv("ROLLCALL_HANDOVER_PROFILE")
	wait := 30 * time.Second
	if profile != "" {
		wait = 5 * time.Minute
	}
	regions := []string{"eu", "us"}
	if os.Getenv("ROLLCALL_HANDOVER_REGIONS") == "3" {
		regions = append(regions, "ap") // six WAN members: memberlist expects confirmations
	}
	rc := newRegionClusterProfile(t, profile, regions, 3, 2)
	old := rc.activeBridge("eu")
	var rest []string
	for _, g := range rc.live() {
		if g.bridge && g != old {
			rest = append(rest, g.c.WANAddr())
		}
	}
	rc.gw("eu2").h.connect(t, "before", "d")
	waitFor(t, 10*time.Second, "the first session in us", func() bool { return rc.online("before", "us") })
	expired := func() (n uint64) {
		for _, g := range rc.live() {
			n += g.c.Stats().RegionsExpired.Load()
		}
		return n
	}
	expired0 := expired()
	rc.wan.Partition([]string{old.c.WANAddr()}, rest)
	cut := time.Now()
	waitFor(t, wait, "eu's other bridge to take over", func() bool {
		b := rc.activeBridge("eu")
		return b != nil && b != old
	})
	took := time.Since(cut)
	alive, lease := testWANAlive, testWANLease
	if profile != "" {
		alive, lease = dissem.DefaultWANAliveInterval, dissem.DefaultWANLease
	}
	t.Logf("eu's bridge cut off from the WAN pool handed over after %v (WAN profile %q, bound %v)", took.Round(time.Millisecond), profile,
		dissem.BridgeHandover(alive, lease))
	rc.gw("eu2").h.connect(t, "after", "d")
	waitFor(t, wait, "eu's writes in the other regions after the handover", func() bool {
		return rc.online("after", regions[1:]...) && rc.online("before", regions[1:]...)
	})
	t.Logf("converged %v after the cut", time.Since(cut).Round(time.Millisecond))
	// The handover fits in the WAN lease: no region was shown expired.
	if n := expired() - expired0; n != 0 {
		for _, g := range rc.live() {
			t.Logf("%s: regions expired %d, bridge changes %d", g.name, g.c.Stats().RegionsExpired.Load(), g.c.Stats().BridgeChanges.Load())
		}
		t.Errorf("regions shown expired %d times during the handover", n)
	}
	// eu's gateways know which bridge sees the others: the members list and the
	// region status say so.
	active := rc.activeBridge("eu")
	reach := rc.gw("eu2").c.BridgeReach()
	if len(reach[old.name]) != 0 || !slices.Contains(reach[active.name], "us") {
		t.Errorf("eu2's view of its bridges' reach: %v", reach)
	}
	for _, m := range rc.gw("eu2").c.Members() {
		want := Member{Region: "eu"}
		switch m.Name {
		case old.name:
			want.Bridge, want.NoWAN = "standby", true
		case active.name:
			want.Bridge = "active"
		}
		if m.Region != want.Region || m.Bridge != want.Bridge || m.NoWAN != want.NoWAN {
			t.Errorf("eu2 lists %s as region %q bridge %q no WAN %v; want %q %q %v", m.Name, m.Region, m.Bridge, m.NoWAN,
				want.Region, want.Bridge, want.NoWAN)
		}
	}
	waitFor(t, wait, "eu2 to show us up", func() bool {
		st, ok := rc.gw("eu2").c.RegionStatus()
		return ok && len(st.Others) == len(regions)-1 && st.Others[0].Lease == "up" && st.Others[len(st.Others)-1].Lease == "up"
	})
	st, _ := rc.gw("eu2").c.RegionStatus()
	if st.Region != "eu" || st.ActiveBridge != active.name || len(st.Bridges) != 2 || st.Others[len(st.Others)-1].Region != "us" ||
		st.Others[0].Gateways != 3 || st.Others[0].HeardAgoMS < 0 {
		t.Errorf("eu2's region status: %+v", st)
	}
}

// A single-region cluster's members carry no region or bridge, and its
// region status says it is of one region.
func TestSingleRegionMembersCarryNoRegion(t *testing.T) {
	tc := newTestCluster(t, 2)
	for _, m := range tc.nodes[0].Members() {
		if m.Region != "" || m.Bridge != "" || m.NoWAN {
			t.Errorf("single-region member %+v", m)
		}
	}
	if st, ok := tc.nodes[0].RegionStatus(); ok || st.Region != dissem.DefaultRegion || len(st.Others) != 0 {
		t.Errorf("single-region status %+v, %v", st, ok)
	}
}
