package dissem

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// Every member that sees the same bridges picks the same one, whatever
// their order, and a bridge's going changes only the regions it was the
// bridge of (rendezvous hashing).
func TestActiveBridgeIsOneChoiceThatMovesOnlyWithItsBridge(t *testing.T) {
	if got := ActiveBridge("eu", nil); got != "" {
		t.Fatalf("no candidates: %q, want none", got)
	}
	names := []string{"b1", "b2", "b3", "b4", "b5"}
	regions := make([]string, 50)
	for i := range regions {
		regions[i] = fmt.Sprintf("r%d", i)
	}
	chosen := map[string]int{}
	for _, reg := range regions {
		first := ActiveBridge(reg, names)
		rev := slices.Clone(names)
		slices.Reverse(rev)
		if got := ActiveBridge(reg, rev); got != first {
			t.Fatalf("region %s: %q in one order, %q in another", reg, first, got)
		}
		chosen[first]++
		// Take away a bridge other than the chosen one: the choice stays.
		for _, gone := range names {
			rest := slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == gone })
			got := ActiveBridge(reg, rest)
			if gone != first && got != first {
				t.Errorf("region %s: %s left, the bridge moved from %s to %s", reg, gone, first, got)
			}
			if gone == first && got == first {
				t.Errorf("region %s: its bridge %s left but is still chosen", reg, first)
			}
		}
	}
	if len(chosen) < 3 {
		t.Errorf("50 regions over 5 candidates chose only %v: the hash does not spread", chosen)
	}
}

// The documented bounds follow from the defaults: a bridge failover on both
// sides fits in the WAN lease, so it never shows a region expired.
func TestWANDefaultsRideOutBridgeFailover(t *testing.T) {
	failover := BridgeFailover(DefaultLeaseTimeout, DefaultWANLease)
	// The region is silent at most from its bridge's last announcement
	// until its successor's first: one interval, then the failover.
	if silent := DefaultWANAliveInterval + failover; silent >= DefaultWANLease {
		t.Errorf("a bridge failover silences a region for up to %v, not under the WAN lease %v", silent, DefaultWANLease)
	}
	// A bridge cut off from the WAN pool alone hands over before the
	// other regions' lease on its region passes.
	if silent := DefaultWANAliveInterval + BridgeHandover(DefaultWANAliveInterval, DefaultWANLease); silent >= DefaultWANLease {
		t.Errorf("a bridge's handover silences a region for up to %v, not under the WAN lease %v", silent, DefaultWANLease)
	}
	if got := WANCrashBound(DefaultWANLease); got != DefaultWANLease+LeaseTick(DefaultWANLease) {
		t.Errorf("WANCrashBound = %v", got)
	}
}

// regionHarness is gateways of several regions, each a Regions over a
// replica of its own, with the network in the test's hands: WAN sends are
// delivered to their target, LAN relays to every other member of the
// region.
type regionHarness struct {
	t       *testing.T
	now     int64
	gws     map[string]*regionGW
	order   []string
	wanSent map[string]int // region -> WAN delta batches received
	cut     map[[2]string]bool
	wanCut  map[string]bool // gateways cut off from the WAN pool (their LAN fine)
}

type regionGW struct {
	name, region string
	bridge       bool
	dead         bool
	r            *Regions
	rep          *crdt.Replica
	h            *regionHarness
	down         map[string]bool // nodes shown down by Regions
	pulls        []RegionPull
}

func (g *regionGW) Watermark(o crdt.Origin) uint64 { return g.rep.Watermark(o) }
func (g *regionGW) SessionCount() int              { return 0 }

func (g *regionGW) Bridges() []string {
	var out []string
	for _, n := range g.h.order {
		o := g.h.gws[n]
		if o.region == g.region && o.bridge && !o.dead {
			out = append(out, n)
		}
	}
	return out
}

func (g *regionGW) Nodes() []RegionNode {
	var out []RegionNode
	for _, n := range g.h.order {
		o := g.h.gws[n]
		if o.region == g.region && !o.dead {
			org := o.rep.Self()
			out = append(out, RegionNode{Node: n, Incarnation: org.Incarnation, Watermark: g.rep.Watermark(org)})
		}
	}
	return out
}

func (g *regionGW) WAN() map[string][]string {
	out := map[string][]string{}
	for _, n := range g.h.order {
		o := g.h.gws[n]
		if o.region != g.region && o.bridge {
			out[o.region] = append(out[o.region], n)
		}
	}
	return out
}

// Reach: the regions with a live bridge not cut off from the WAN pool,
// none for a gateway that is.
func (g *regionGW) Reach() []string {
	if g.h.wanCut[g.name] {
		return nil
	}
	var out []string
	for _, n := range g.h.order {
		o := g.h.gws[n]
		if o.region != g.region && o.bridge && !o.dead && !g.h.wanCut[n] && !slices.Contains(out, o.region) {
			out = append(out, o.region)
		}
	}
	return out
}

func newRegionHarness(t *testing.T) *regionHarness {
	return &regionHarness{t: t, now: 1e9, gws: map[string]*regionGW{}, wanSent: map[string]int{}, cut: map[[2]string]bool{},
		wanCut: map[string]bool{}}
}

var testRegionCfg = RegionConfig{AliveInterval: time.Second, Lease: 10 * time.Second, BatchDelay: 5 * time.Millisecond, PacketBudget: 1300}

func (h *regionHarness) add(name, region string, bridge bool) *regionGW {
	rep, err := crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: name, Incarnation: 1}})
	if err != nil {
		h.t.Fatal(err)
	}
	g := &regionGW{name: name, region: region, bridge: bridge, rep: rep, h: h, down: map[string]bool{}}
	cfg := testRegionCfg
	cfg.Name, cfg.Region, cfg.Bridge = name, region, bridge
	if g.r, err = NewRegions(cfg, g, g); err != nil {
		h.t.Fatal(err)
	}
	g.r.Start(h.now)
	h.gws[name] = g
	h.order = append(h.order, name)
	return g
}

// write makes an owner's write at g and delivers it to g's region (as its
// LAN would) and to g's region's bridges' Forward.
func (h *regionHarness) write(g *regionGW, user string) {
	d, err := g.rep.PutLocal(crdt.Session{User: user, Device: "d", ID: user, Epoch: 1, State: crdt.StateActive}, h.now)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, n := range h.order {
		o := h.gws[n]
		if o.region != g.region || o.dead {
			continue
		}
		if o != g {
			if _, _, err := o.rep.Apply(d, h.now); err != nil {
				h.t.Fatal(err)
			}
		}
		o.r.Forward([]crdt.Delta{d}, h.now)
	}
	h.run()
}

// run executes every Ready until none is left.
func (h *regionHarness) run() {
	for again := true; again; {
		again = false
		for _, n := range h.order {
			g := h.gws[n]
			if g.dead {
				continue
			}
			g.r.Advance(h.now)
			for g.r.HasReady() {
				again = true
				h.execute(g, g.r.Ready())
				g.r.Advance(h.now)
			}
		}
	}
}

func (h *regionHarness) execute(g *regionGW, rd RegionReady) {
	for _, a := range rd.Apply {
		switch a.Kind {
		case ApplyDeltas:
			for _, d := range a.Deltas {
				if _, _, err := g.rep.Apply(d, h.now); err != nil {
					h.t.Fatal(err)
				}
			}
		case ApplySync:
			if _, err := g.rep.ApplySync(a.Sync, h.now); err != nil {
				h.t.Fatal(err)
			}
		case MarkDown:
			g.down[a.Node] = true
		case MarkUp:
			delete(g.down, a.Node)
		}
	}
	g.pulls = append(g.pulls, rd.Pulls...)
	for _, s := range rd.WAN {
		to := h.gws[s.To]
		if to == nil || to.dead || h.cut[[2]string{g.region, to.region}] || h.wanCut[g.name] || h.wanCut[to.name] {
			continue
		}
		if s.Msg.Type == TypeRegionDeltas {
			h.wanSent[to.region]++
		}
		m, err := Decode(s.Msg.Bytes)
		if err != nil {
			h.t.Fatal(err)
		}
		to.r.Step(m, true, h.now)
	}
	for _, msg := range rd.LAN {
		for _, n := range h.order {
			o := h.gws[n]
			if o != g && o.region == g.region && !o.dead {
				m, err := Decode(msg.Bytes)
				if err != nil {
					h.t.Fatal(err)
				}
				o.r.Step(m, false, h.now)
			}
		}
	}
}

// advance moves time on by d in steps of 50ms, ticking every gateway.
func (h *regionHarness) advance(d time.Duration) {
	end := h.now + int64(d)
	for h.now < end {
		h.now = min(h.now+int64(50*time.Millisecond), end)
		for _, n := range h.order {
			if g := h.gws[n]; !g.dead && g.r.Deadline() <= h.now {
				g.r.Tick(h.now)
			}
		}
		h.run()
	}
}

func (g *regionGW) online(user string) bool {
	for _, s := range g.rep.UserSessions(user) {
		if s.State == crdt.StateActive && !g.down[s.Gateway] {
			return true
		}
	}
	return false
}

func twoRegions(t *testing.T) *regionHarness {
	h := newRegionHarness(t)
	for _, reg := range []string{"eu", "us"} {
		for i := range 3 {
			h.add(fmt.Sprintf("%s%d", reg, i), reg, i < 2)
		}
	}
	h.advance(2 * time.Second)
	return h
}

// A write crosses once to each other region and reaches every member there.
func TestRegionWriteCrossesOncePerRegion(t *testing.T) {
	h := newRegionHarness(t)
	for _, reg := range []string{"eu", "us", "ap"} {
		for i := range 3 {
			h.add(fmt.Sprintf("%s%d", reg, i), reg, i < 2)
		}
	}
	h.advance(2 * time.Second)
	h.write(h.gws["eu2"], "alice")
	h.advance(100 * time.Millisecond)
	for _, n := range h.order {
		if !h.gws[n].online("alice") {
			t.Errorf("alice not online at %s", n)
		}
	}
	if h.wanSent["us"] != 1 || h.wanSent["ap"] != 1 || h.wanSent["eu"] != 0 {
		t.Errorf("WAN delta batches by receiving region: %v, want us 1, ap 1", h.wanSent)
	}
	// Only the active bridge forwards.
	active := 0
	for _, n := range h.order {
		if g := h.gws[n]; g.region == "eu" && g.r.Active() {
			active++
		}
	}
	if active != 1 {
		t.Errorf("%d active bridges in eu, want 1", active)
	}
}

// A region that goes silent is shown expired after the lease, at no
// earlier check; heard again it is shown up once what it wrote meanwhile is
// pulled.
func TestRegionSilentPastLeaseIsShownExpiredThenRevives(t *testing.T) {
	h := twoRegions(t)
	h.write(h.gws["us2"], "bob")
	h.advance(100 * time.Millisecond)
	eu := h.gws["eu2"]
	if !eu.online("bob") {
		t.Fatal("bob never reached eu")
	}
	h.cut[[2]string{"us", "eu"}] = true
	h.cut[[2]string{"eu", "us"}] = true
	cutAt := h.now
	for eu.online("bob") {
		h.advance(50 * time.Millisecond)
		if h.now-cutAt > int64(WANCrashBound(testRegionCfg.Lease)+testRegionCfg.AliveInterval) {
			t.Fatal("bob still shown online past the WAN lease")
		}
	}
	if silent := time.Duration(h.now - cutAt); silent < testRegionCfg.Lease {
		t.Errorf("us shown expired after %v of silence, within the lease %v", silent, testRegionCfg.Lease)
	}
	// us writes during the partition: carol is missed by eu.
	h.write(h.gws["us1"], "carol")
	clear(h.cut)
	healed := h.now
	for !eu.online("bob") {
		h.advance(50 * time.Millisecond)
		if h.now-healed > int64(WANHealBound(testRegionCfg.AliveInterval, testRegionCfg.Lease)) {
			t.Fatal("us not shown up again within the heal bound")
		}
	}
	if len(h.gws["eu0"].pulls)+len(h.gws["eu1"].pulls) == 0 {
		t.Error("eu's bridge did not pull what us wrote during the partition")
	}
}

// A gateway its region's announcement no longer lists is shown expired in
// the others at once, the rest of its region staying up.
func TestRegionGatewayDroppedFromAnnouncementShownExpired(t *testing.T) {
	h := twoRegions(t)
	h.write(h.gws["us2"], "bob")
	h.write(h.gws["us1"], "dan")
	h.advance(100 * time.Millisecond)
	h.gws["us2"].dead = true
	h.advance(1100 * time.Millisecond)
	eu := h.gws["eu2"]
	if eu.online("bob") {
		t.Error("bob still shown online after us stopped listing us2")
	}
	if !eu.online("dan") {
		t.Error("dan shown offline: only us2 left")
	}
}

// A dead active bridge's successor takes over: writes made after cross
// again, and the successor's first announcement points the other region
// at it.
func TestRegionBridgeFailover(t *testing.T) {
	h := twoRegions(t)
	var active *regionGW
	for _, n := range []string{"eu0", "eu1"} {
		if h.gws[n].r.Active() {
			active = h.gws[n]
		}
	}
	if active == nil {
		t.Fatal("no active bridge in eu")
	}
	active.dead = true
	h.advance(300 * time.Millisecond) // past a lease tick: the successor elects itself
	h.write(h.gws["eu2"], "erin")
	h.advance(100 * time.Millisecond)
	if !h.gws["us2"].online("erin") {
		t.Error("erin did not cross after the failover")
	}
	for _, n := range []string{"us0", "us1"} {
		if g := h.gws[n]; g.r.Active() {
			if tgt := g.r.Target("eu", h.now); tgt == active.name || tgt == "" {
				t.Errorf("us's bridge targets %q, want eu's successor", tgt)
			}
		}
	}
}

// A message for a gateway of another region goes to the local active
// bridge, and from a bridge to the other region's.
func TestRegionNextHop(t *testing.T) {
	h := twoRegions(t)
	h.write(h.gws["us2"], "bob")
	h.advance(100 * time.Millisecond)
	to, wan, ok := h.gws["eu2"].r.NextHop("us2", h.now)
	if !ok || wan || !strings.HasPrefix(to, "eu") || !h.gws[to].r.Active() {
		t.Errorf("eu2's hop to us2: %q wan %v ok %v, want eu's active bridge", to, wan, ok)
	}
	to, wan, ok = h.gws[to].r.NextHop("us2", h.now)
	if !ok || !wan || !h.gws[to].r.Active() || h.gws[to].region != "us" {
		t.Errorf("eu's bridge's hop to us2: %q wan %v ok %v, want us's active bridge", to, wan, ok)
	}
	if _, _, ok := h.gws["eu2"].r.NextHop("eu1", h.now); ok {
		t.Error("a hop to a gateway of our own region")
	}
	if got := slices.Collect(maps.Keys(h.gws["eu2"].WAN())); len(got) != 1 {
		t.Errorf("WAN view %v", got)
	}
}

// Region messages round-trip the wire, and garbage is an error.
func TestRegionWire(t *testing.T) {
	rep, err := crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: "n", Incarnation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := rep.PutLocal(crdt.Session{User: "u", Device: "d", ID: "x", Epoch: 1, State: crdt.StateActive}, 1)
	if err != nil {
		t.Fatal(err)
	}
	msgs := []func() (*Message, error){
		func() (*Message, error) { return NewRegionDeltas(RegionMsg{Region: "eu", From: "b"}, []crdt.Delta{d}) },
		func() (*Message, error) {
			return NewRegionAlive(RegionMsg{Region: "eu", From: "b", Via: "c", Nodes: []RegionNode{{Node: "n", Incarnation: 1, Watermark: 5, ClientAddr: "h:1"}}})
		},
		func() (*Message, error) {
			return NewRegionSync(RegionMsg{Region: "eu", From: "b"}, crdt.Sync{{Origin: crdt.Origin{Node: "n", Incarnation: 1}, Watermark: 3}})
		},
		func() (*Message, error) {
			b, err := EncodeKickVia(KickVia{KickReq: KickReq{ID: 8, FromNode: "a", User: "u", Device: "d"}, Gateway: "g"})
			return &Message{Type: TypeKickVia, Bytes: b}, err
		},
		func() (*Message, error) {
			return NewBridgeWAN(RegionMsg{Region: "eu", From: "b", Reach: []string{"ap", "us"}})
		},
		func() (*Message, error) {
			b, err := EncodeRouteVia(RouteVia{RouteReq: RouteReq{ID: 7, FromNode: "a", To: "u", Body: []byte("hi")}, Gateway: "g"})
			return &Message{Type: TypeRouteVia, Bytes: b}, err
		},
	}
	for _, mk := range msgs {
		m, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(m.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", m.Type, err)
		}
		if got.Type != m.Type {
			t.Errorf("type %s, want %s", got.Type, m.Type)
		}
		switch m.Type {
		case TypeRegionAlive:
			if len(got.Region.Nodes) != 1 || got.Region.Nodes[0] != (RegionNode{Node: "n", Incarnation: 1, Watermark: 5, ClientAddr: "h:1"}) || got.Region.Via != "c" {
				t.Errorf("alive decoded as %+v", got.Region)
			}
		case TypeRegionDeltas:
			if len(got.Deltas) != 1 || got.Region.Region != "eu" {
				t.Errorf("deltas decoded as %+v", got)
			}
		case TypeBridgeWAN:
			if got.Region.Region != "eu" || got.Region.From != "b" || !slices.Equal(got.Region.Reach, []string{"ap", "us"}) {
				t.Errorf("bridge-wan decoded as %+v", got.Region)
			}
		case TypeKickVia:
			if got.KickVia.Gateway != "g" || got.KickVia.ID != 8 || got.KickVia.User != "u" || got.KickVia.Device != "d" {
				t.Errorf("kick-via decoded as %+v", got.KickVia)
			}
		case TypeRouteVia:
			if got.Via.Gateway != "g" || got.Via.ID != 7 || string(got.Via.Body) != "hi" {
				t.Errorf("route-via decoded as %+v", got.Via)
			}
		}
		for cut := 2; cut < len(m.Bytes); cut++ {
			if _, err := Decode(m.Bytes[:cut]); err == nil {
				t.Errorf("%s cut at %d decoded", m.Type, cut)
			}
		}
	}
}

// The choice prefers the bridges that see the most other regions, by the
// same rendezvous hash among them; one that has not reported counts as
// seeing them all; when none sees any, the rule is ActiveBridge's.
func TestChooseBridgePrefersBridgesThatSeeTheOtherRegions(t *testing.T) {
	names := []string{"b1", "b2", "b3", "b4"}
	for i := range 30 {
		reg := fmt.Sprintf("r%d", i)
		first := ActiveBridge(reg, names)
		if got := ChooseBridge(reg, names, nil); got != first {
			t.Fatalf("%s, no reports: %q, want ActiveBridge's %q", reg, got, first)
		}
		all := map[string]int{"b1": 2, "b2": 2, "b3": 2, "b4": 2}
		if got := ChooseBridge(reg, names, all); got != first {
			t.Fatalf("%s, every bridge sees both regions: %q, want %q", reg, got, first)
		}
		none := map[string]int{"b1": 0, "b2": 0, "b3": 0, "b4": 0}
		if got := ChooseBridge(reg, names, none); got != first {
			t.Fatalf("%s, no bridge sees any region: %q, want the fallback %q", reg, got, first)
		}
		// The chosen bridge is cut off from the WAN pool: the choice
		// moves to the one the hash picks among the rest, the same one
		// whatever the order of the candidates.
		cut := maps.Clone(all)
		cut[first] = 0
		rest := slices.DeleteFunc(slices.Clone(names), func(s string) bool { return s == first })
		want := ActiveBridge(reg, rest)
		rev := slices.Clone(names)
		slices.Reverse(rev)
		if got, gotRev := ChooseBridge(reg, names, cut), ChooseBridge(reg, rev, cut); got != want || gotRev != want {
			t.Fatalf("%s, %s cut off: %q (reversed %q), want %q", reg, first, got, gotRev, want)
		}
		// One bridge sees both other regions, the others one: it wins.
		partial := map[string]int{"b1": 1, "b2": 1, "b3": 1, "b4": 1}
		partial["b3"] = 2
		if got := ChooseBridge(reg, names, partial); got != "b3" {
			t.Fatalf("%s: %q chosen, want b3, the only one that sees both regions", reg, got)
		}
		// A bridge that has not reported (an earlier version) counts as
		// seeing as many as the best: with every other bridge seeing the
		// regions the choice is the earlier rule's, the one a gateway of
		// the earlier version makes; with one cut off, it is among the
		// rest.
		if got := ChooseBridge(reg, names, map[string]int{"b1": 2, "b2": 2, "b3": 2}); got != first {
			t.Fatalf("%s, b4 not reported: %q chosen, want the earlier rule's %q", reg, got, first)
		}
		if got, want := ChooseBridge(reg, names, map[string]int{"b1": 1, "b2": 0, "b3": 0}), ActiveBridge(reg, []string{"b1", "b4"}); got != want {
			t.Fatalf("%s: %q chosen, want %q, between b1 (the only reporter that sees a region) and b4 (no report)", reg, got, want)
		}
	}
	if got := ChooseBridge("eu", nil, map[string]int{"x": 3}); got != "" {
		t.Errorf("no candidates: %q", got)
	}
}

// A bridge that loses only its WAN link (its region's LAN fine) hands
// over: it reports that it sees no other region, its region's choice moves
// to a bridge that does, whose first announcement points the other region
// at it; the region's writes cross again and it is never shown expired.
func TestRegionBridgeCutFromWANHandsOver(t *testing.T) {
	h := twoRegions(t)
	var active *regionGW
	for _, n := range []string{"eu0", "eu1"} {
		if h.gws[n].r.Active() {
			active = h.gws[n]
		}
	}
	if active == nil {
		t.Fatal("no active bridge in eu")
	}
	h.write(h.gws["eu2"], "before")
	h.wanCut[active.name] = true
	cutAt := h.now
	// The WAN pool's view changes (memberlist holds the other region's
	// members dead): the driver tells the cut bridge.
	active.r.CheckReach(h.now)
	h.run()
	if active.r.Active() {
		t.Fatalf("%s, cut off from the WAN pool, is still eu's active bridge", active.name)
	}
	var successor *regionGW
	for _, n := range []string{"eu0", "eu1"} {
		if g := h.gws[n]; g != active && g.r.Active() {
			successor = g
		}
	}
	if successor == nil {
		t.Fatal("no bridge took over")
	}
	if to, _, ok := h.gws["eu2"].r.NextHop("us2", h.now); !ok || to != successor.name {
		t.Errorf("eu2's hop to us: %q (ok %v), want the successor %s", to, ok, successor.name)
	}
	h.write(h.gws["eu2"], "after")
	h.advance(100 * time.Millisecond)
	for _, n := range []string{"us0", "us1", "us2"} {
		if !h.gws[n].online("after") || !h.gws[n].online("before") {
			t.Errorf("%s: eu's writes did not cross after the handover", n)
		}
	}
	t.Logf("handed over within %v of the WAN view's change", time.Duration(h.now-cutAt))
	h.advance(2 * testRegionCfg.Lease)
	for _, n := range []string{"us0", "us1", "us2"} {
		for _, ri := range h.gws[n].r.Regions() {
			if ri.Down {
				t.Errorf("%s shows %s expired though one of its bridges sees it", n, ri.Region)
			}
		}
	}
	// The link comes back: the choice returns to the rendezvous hash's.
	delete(h.wanCut, active.name)
	active.r.CheckReach(h.now)
	h.run()
	if !active.r.Active() || successor.r.Active() {
		t.Errorf("after the WAN link's return: %s active %v, %s active %v", active.name, active.r.Active(), successor.name, successor.r.Active())
	}
}

// Without a CheckReach (a driver that gives none), the periodic report
// hands over within an announcement interval; and when every bridge of a
// region is cut off, the choice falls back to the rendezvous hash's: one
// active bridge.
func TestRegionBridgeReachReportedEveryInterval(t *testing.T) {
	h := twoRegions(t)
	var active *regionGW
	for _, n := range []string{"eu0", "eu1"} {
		if h.gws[n].r.Active() {
			active = h.gws[n]
		}
	}
	h.wanCut[active.name] = true
	h.advance(testRegionCfg.AliveInterval + 100*time.Millisecond)
	if active.r.Active() {
		t.Fatalf("%s still active an interval after it was cut off", active.name)
	}
	h.wanCut["eu0"], h.wanCut["eu1"] = true, true
	h.advance(testRegionCfg.AliveInterval + 100*time.Millisecond)
	n := 0
	for _, name := range []string{"eu0", "eu1"} {
		if h.gws[name].r.Active() {
			n++
			if want := ActiveBridge("eu", []string{"eu0", "eu1"}); name != want {
				t.Errorf("every bridge cut off: %s active, want the rendezvous hash's %s", name, want)
			}
		}
	}
	if n != 1 {
		t.Errorf("every bridge cut off: %d active bridges, want 1", n)
	}
	if got := h.gws["eu2"].r.BridgeReach(); len(got["eu0"]) != 0 || len(got["eu1"]) != 0 || len(got) != 2 {
		t.Errorf("eu2's view of its bridges' reach: %v", got)
	}
}

// A gateway that is not bridge-capable (every gateway of a single-region
// cluster) reports nothing: no bridge-wan message, nothing to do at all
// while it hears no region.
func TestRegionNonBridgeSendsNoReport(t *testing.T) {
	h := newRegionHarness(t)
	g := h.add("n0", DefaultRegion, false)
	h.add("n1", DefaultRegion, false)
	for range 100 {
		h.now += int64(100 * time.Millisecond)
		g.r.Tick(h.now)
		g.r.CheckReach(h.now)
		if g.r.HasReady() {
			t.Fatalf("a gateway that is not bridge-capable asks %+v", g.r.Ready())
		}
	}
}
