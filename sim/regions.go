package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// The multi-region simulation (`rollcall sim --regions`): gateways split
// evenly into regions, each gateway holding a real crdt.Replica and the
// real region layer (dissem.Regions: the choice of the active bridge, the
// forwarding of a region's writes once per other region, the relay inside
// the receiving region, the region announcements, leases and repair
// pulls), in virtual time over a network of two latencies: RegionLatency
// between regions (the WAN pool) and Config.Latency inside one.
//
// Inside a region a write reaches every member in one hop (as eager mode
// sends it); what a region's own dissemination costs beyond that, and its
// failure detector, are what the single-region simulation models, and are
// left out here: this one measures what crossing regions adds. A crashed
// gateway (RegionCrash) is shown down by the others of its region
// dissem.CrashBound(Config.LeaseTimeout) after its death, as their leases
// would.

// RegionConfig is a multi-region scenario: the Config's Nodes (in all),
// Latency (inside a region), Changes or Rate, Duration, Window, Seed and
// LeaseTimeout, and the fields below.
type RegionConfig struct {
	Config
	// Regions is the number of regions (at least 2); the gateways are
	// split evenly among them (region r holds the gateways whose index is
	// r modulo Regions... in blocks: the first Nodes/Regions, and so on).
	Regions int
	// Bridges is the number of bridge-capable gateways per region
	// (default 2, at most the region's size).
	Bridges int
	// RegionLatency is the one-way delay between two regions (default
	// 80ms).
	RegionLatency time.Duration
	// WANAlive, WANLease and WANBatch are the region layer's timing
	// (dissem's defaults when zero).
	WANAlive, WANLease, WANBatch time.Duration
	// CrashBridgeAt, when positive, kills the active bridge of the first
	// region at that time (it does not restart).
	CrashBridgeAt time.Duration
}

// RegionResult is what a multi-region run measured.
type RegionResult struct {
	Regions, Nodes, Bridges int
	RegionLatency           time.Duration
	Changes                 int
	// Reach is, per change, the time until every live gateway of every
	// other region held it; Local likewise inside its own region.
	ReachP50, ReachP99, ReachMax time.Duration
	LocalP50, LocalP99           time.Duration
	// Reached counts the changes every live gateway of every other
	// region held by the end.
	Reached int
	// WANCopies are the deltas sent over the WAN pool; per change and per
	// other region, WANCopiesPerChange.
	WANCopies          uint64
	WANCopiesPerChange float64
	WANBytes           uint64
	WANPulls           uint64
	RegionsExpired     uint64 // a gateway showing a region expired (a bridge failover must cause none)
	BridgeCrashed      string // the bridge killed, if any
}

type rgEvent struct {
	at   int64
	seq  uint64
	kind uint8 // 0 tick, 1 message, 2 write, 3 crash, 4 sync
	to   int
	msg  *dissem.Message
	wan  bool
	sync crdt.Sync
	// deadline is a tick's: a tick superseded by an earlier one is stale
	deadline int64
}

type rgQueue []rgEvent

func (q rgQueue) Len() int { return len(q) }
func (q rgQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q rgQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *rgQueue) Push(x any)   { *q = append(*q, x.(rgEvent)) }
func (q *rgQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type rgGateway struct {
	id, region int
	name       string
	bridge     bool
	deadAt     int64 // 0: alive
	r          *dissem.Regions
	rep        *crdt.Replica
	s          *regionSim
	tickAt     int64
	down       map[string]bool
}

type regionSim struct {
	cfg     RegionConfig
	rng     *rand.Rand
	now     int64
	seq     uint64
	q       rgQueue
	gws     []*rgGateway
	byName  map[string]*rgGateway
	regions [][]*rgGateway
	// per change: when written, by which region, and when each gateway
	// first held it
	writtenAt []int64
	writer    []int
	held      [][]int64
	changeOf  map[string]int
	res       RegionResult
}

func (g *rgGateway) Watermark(o crdt.Origin) uint64 { return g.rep.Watermark(o) }
func (g *rgGateway) SessionCount() int              { return 0 }

// shownUp is whether the other gateways of its region show g up: alive, or
// dead for less than their leases take to see it.
func (s *regionSim) shownUp(g *rgGateway) bool {
	return g.deadAt == 0 || s.now < g.deadAt+int64(dissem.CrashBound(s.cfg.LeaseTimeout))
}

func (g *rgGateway) Bridges() []string {
	var out []string
	for _, o := range g.s.regions[g.region] {
		if o.bridge && (o == g || g.s.shownUp(o)) {
			out = append(out, o.name)
		}
	}
	return out
}

func (g *rgGateway) Nodes() []dissem.RegionNode {
	var out []dissem.RegionNode
	for _, o := range g.s.regions[g.region] {
		if o == g || g.s.shownUp(o) {
			org := o.rep.Self()
			out = append(out, dissem.RegionNode{Node: o.name, Incarnation: org.Incarnation, Watermark: g.rep.Watermark(org)})
		}
	}
	return out
}

func (g *rgGateway) WAN() map[string][]string {
	out := map[string][]string{}
	for r, gws := range g.s.regions {
		if r == g.region {
			continue
		}
		for _, o := range gws {
			if o.bridge {
				out[regionName(r)] = append(out[regionName(r)], o.name)
			}
		}
	}
	return out
}

// Reach: the other regions with a live bridge (the simulator cuts no
// bridge off from the WAN pool alone).
func (g *rgGateway) Reach() []string {
	var out []string
	for r, gws := range g.s.regions {
		if r == g.region {
			continue
		}
		for _, o := range gws {
			if o.bridge && o.deadAt == 0 {
				out = append(out, regionName(r))
				break
			}
		}
	}
	return out
}

func regionName(r int) string { return fmt.Sprintf("r%d", r) }

// Validate fills the defaults and rejects what cannot run.
func (c *RegionConfig) Validate() error {
	if err := c.Config.Validate(); err != nil {
		return err
	}
	switch {
	case c.Regions < 2:
		return errors.New("sim: --regions needs at least 2 regions")
	case c.Nodes < 2*c.Regions:
		return fmt.Errorf("sim: %d nodes cannot make %d regions of two gateways or more", c.Nodes, c.Regions)
	case len(c.Partitions) > 0 || len(c.Crashes) > 0 || len(c.WriteDelays) > 0 || c.Loss > 0:
		return errors.New("sim: --regions models no --partition, --crash, --loss or write delays (see --crash-bridge)")
	}
	if c.Bridges == 0 {
		c.Bridges = 2
	}
	c.Bridges = min(c.Bridges, c.Nodes/c.Regions)
	if c.RegionLatency == 0 {
		c.RegionLatency = 80 * time.Millisecond
	}
	if c.WANAlive == 0 {
		c.WANAlive = dissem.DefaultWANAliveInterval
	}
	if c.WANLease == 0 {
		c.WANLease = dissem.DefaultWANLease
	}
	if c.WANBatch == 0 {
		c.WANBatch = dissem.DefaultWANBatchDelay
	}
	if c.RegionLatency < 0 || c.Bridges < 1 {
		return errors.New("sim: bad --region-latency or --bridges")
	}
	return nil
}

// RunRegions runs a multi-region scenario.
func RunRegions(ctx context.Context, cfg RegionConfig) (*RegionResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &regionSim{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		byName: map[string]*rgGateway{}, changeOf: map[string]int{}, regions: make([][]*rgGateway, cfg.Regions)}
	per := cfg.Nodes / cfg.Regions
	width := len(fmt.Sprint(cfg.Nodes - 1))
	for i := range cfg.Nodes {
		reg := min(i/per, cfg.Regions-1)
		g := &rgGateway{id: i, region: reg, name: fmt.Sprintf("n%0*d", width, i), s: s, down: map[string]bool{}}
		g.bridge = i-reg*per < cfg.Bridges
		rep, err := crdt.NewReplica(crdt.Config{Self: crdt.Origin{Node: g.name, Incarnation: incarnation(1)}})
		if err != nil {
			return nil, err
		}
		g.rep = rep
		g.r, err = dissem.NewRegions(dissem.RegionConfig{Region: regionName(reg), Name: g.name, Bridge: g.bridge,
			AliveInterval: cfg.WANAlive, Lease: cfg.WANLease, BatchDelay: cfg.WANBatch, PacketBudget: cfg.PacketBudget}, g, g)
		if err != nil {
			return nil, err
		}
		s.gws = append(s.gws, g)
		s.byName[g.name] = g
		s.regions[reg] = append(s.regions[reg], g)
	}
	for _, g := range s.gws {
		// in steady state: started at a random phase before the run, so
		// each elects itself (or not) at once and announces in turn
		g.r.Start(wallBase - s.rng.Int64N(int64(cfg.WANAlive)))
		s.arm(g)
	}
	changes := cfg.Changes
	if cfg.Rate > 0 {
		changes = int(cfg.Rate*cfg.Window.Seconds() + 0.5)
	}
	for i := range changes {
		at := s.rng.Int64N(int64(cfg.Window))
		s.push(rgEvent{at: at, kind: 2, to: s.rng.IntN(len(s.gws))})
		_ = i
	}
	if cfg.CrashBridgeAt > 0 {
		s.push(rgEvent{at: int64(cfg.CrashBridgeAt), kind: 3})
	}
	end := int64(cfg.Duration)
	for n := 0; s.q.Len() > 0 && s.q[0].at <= end; n++ {
		if n&0xfff == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		e := heap.Pop(&s.q).(rgEvent)
		s.now = e.at
		s.dispatch(e)
	}
	s.now = end
	s.result()
	return &s.res, nil
}

func (s *regionSim) wall() int64 { return wallBase + s.now }

func (s *regionSim) push(e rgEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

// arm schedules g's next tick.
func (s *regionSim) arm(g *rgGateway) {
	d := g.r.Deadline()
	if g.tickAt != 0 && g.tickAt <= d {
		return
	}
	g.tickAt = d
	s.push(rgEvent{at: max(d-wallBase, s.now), kind: 0, to: g.id, deadline: d})
}

func (s *regionSim) dispatch(e rgEvent) {
	g := s.gws[e.to]
	if g.deadAt != 0 && e.kind != 3 {
		return
	}
	switch e.kind {
	case 0:
		if g.tickAt != e.deadline {
			return
		}
		g.tickAt = 0
		g.r.Tick(s.wall())
	case 1:
		if e.msg.Type == dissem.TypeDeltas {
			s.applyDeltas(g, e.msg.Deltas) // an owner's write, inside its region
		} else {
			g.r.Step(e.msg, e.wan, s.wall())
		}
	case 2:
		s.write(g)
	case 3:
		s.crashBridge()
		return
	case 4:
		s.applySync(g, e.sync)
		g.r.Advance(s.wall())
	}
	s.drive(g)
}

// write is a client's connect at g: a new session, sent to every other
// gateway of its region and handed to the region layer of each bridge.
func (s *regionSim) write(g *rgGateway) {
	id := len(s.writtenAt)
	user := fmt.Sprintf("u%d", id)
	d, err := g.rep.PutLocal(crdt.Session{User: user, Device: "d", ID: user, Epoch: 1, State: crdt.StateActive}, s.wall())
	if err != nil {
		panic(fmt.Sprintf("sim: %v", err))
	}
	s.changeOf[user] = id
	s.writtenAt = append(s.writtenAt, s.now)
	s.writer = append(s.writer, g.region)
	held := make([]int64, len(s.gws))
	for i := range held {
		held[i] = -1
	}
	held[g.id] = s.now
	s.held = append(s.held, held)
	g.r.Forward([]crdt.Delta{d}, s.wall())
	m, err := dissem.NewDeltas([]crdt.Delta{d})
	if err != nil {
		panic(fmt.Sprintf("sim: %v", err))
	}
	for _, o := range s.regions[g.region] {
		if o != g {
			s.push(rgEvent{at: s.now + s.cfg.Latency.sample(s.rng), kind: 1, to: o.id, msg: m})
		}
	}
}

// drive executes g's region layer's Ready until it asks nothing more.
func (s *regionSim) drive(g *rgGateway) {
	for g.r.HasReady() {
		rd := g.r.Ready()
		for _, a := range rd.Apply {
			switch a.Kind {
			case dissem.ApplyDeltas:
				s.applyDeltas(g, a.Deltas)
			case dissem.ApplySync:
				s.applySync(g, a.Sync)
			case dissem.MarkDown:
				g.down[a.Node] = true
			case dissem.MarkUp:
				delete(g.down, a.Node)
			case dissem.Retire:
				_, _ = g.rep.ApplySync(crdt.Sync{{Origin: a.Origin}}, s.wall())
			}
		}
		for _, n := range rd.Notes {
			if n.Kind == dissem.NoteRegionExpired {
				s.res.RegionsExpired++
			}
		}
		for _, snd := range rd.WAN {
			to := s.byName[snd.To]
			if snd.Msg.Type == dissem.TypeRegionDeltas {
				s.res.WANCopies += uint64(len(snd.Msg.Deltas))
			}
			s.res.WANBytes += uint64(snd.Msg.Size())
			s.push(rgEvent{at: s.now + int64(s.cfg.RegionLatency), kind: 1, to: to.id, msg: snd.Msg, wan: true})
		}
		for _, m := range rd.LAN {
			for _, o := range s.regions[g.region] {
				if o != g {
					s.push(rgEvent{at: s.now + s.cfg.Latency.sample(s.rng), kind: 1, to: o.id, msg: m})
				}
			}
		}
		for _, p := range rd.Pulls {
			s.pull(g, p)
		}
		g.r.Advance(s.wall())
	}
	s.arm(g)
}

// pull is a repair: the answer (the puller's lack, of the answering
// region's records over the WAN pool) arrives a round trip later.
func (s *regionSim) pull(g *rgGateway, p dissem.RegionPull) {
	from := s.byName[p.To]
	g.r.PullDone(p.Region)
	if from == nil || from.deadAt != 0 {
		return
	}
	s.res.WANPulls++
	ans := from.rep.Diff(g.rep.Digest())
	rtt := 2 * s.cfg.Latency.sample(s.rng)
	if p.WAN {
		ans = slices.DeleteFunc(ans, func(os crdt.OriginSync) bool { return !from.r.Own(os.Origin.Node) })
		rtt = 2 * int64(s.cfg.RegionLatency)
		m, err := dissem.NewRegionSync(dissem.RegionMsg{Region: regionName(from.region), From: from.name}, ans)
		if err != nil {
			panic(fmt.Sprintf("sim: %v", err))
		}
		s.res.WANBytes += uint64(m.Size())
		s.push(rgEvent{at: s.now + rtt, kind: 1, to: g.id, msg: m, wan: true})
		return
	}
	s.push(rgEvent{at: s.now + rtt, kind: 4, to: g.id, sync: ans})
}

func (s *regionSim) applyDeltas(g *rgGateway, ds []crdt.Delta) {
	for i := range ds {
		if _, _, err := g.rep.Apply(ds[i], s.wall()); err != nil {
			panic(fmt.Sprintf("sim: %v", err))
		}
		s.arrived(g, ds[i].User())
	}
	if g.bridge {
		// a delta of its own region, applied at a bridge: forwarded while
		// it is the active one (a remote region's comes as a region
		// message, stepped by the region layer, which forwards nothing)
		if reg := s.byName[ds[0].Origin().Node]; reg != nil && reg.region == g.region {
			g.r.Forward(ds, s.wall())
		}
	}
}

func (s *regionSim) applySync(g *rgGateway, sy crdt.Sync) {
	if _, err := g.rep.ApplySync(sy, s.wall()); err != nil {
		panic(fmt.Sprintf("sim: %v", err))
	}
	for i := range sy {
		for j := range sy[i].Sessions {
			s.arrived(g, sy[i].Sessions[j].User)
		}
	}
}

func (s *regionSim) arrived(g *rgGateway, user string) {
	if id, ok := s.changeOf[user]; ok && s.held[id][g.id] < 0 {
		s.held[id][g.id] = s.now
	}
}

// crashBridge kills the first region's active bridge.
func (s *regionSim) crashBridge() {
	for _, g := range s.regions[0] {
		if g.deadAt == 0 && g.r.Active() {
			g.deadAt = s.now
			s.res.BridgeCrashed = g.name
			return
		}
	}
}

func (s *regionSim) result() {
	r := &s.res
	r.Regions, r.Nodes, r.Bridges, r.RegionLatency, r.Changes = s.cfg.Regions, s.cfg.Nodes, s.cfg.Bridges, s.cfg.RegionLatency, len(s.writtenAt)
	var reach, local []time.Duration
	for id, held := range s.held {
		var far, near int64
		ok := true
		for _, g := range s.gws {
			if g.deadAt != 0 {
				continue
			}
			t := held[g.id]
			if t < 0 {
				if g.region != s.writer[id] {
					ok = false
				}
				continue
			}
			if g.region == s.writer[id] {
				near = max(near, t-s.writtenAt[id])
			} else {
				far = max(far, t-s.writtenAt[id])
			}
		}
		local = append(local, time.Duration(near))
		if ok {
			r.Reached++
			reach = append(reach, time.Duration(far))
		}
	}
	r.ReachP50, r.ReachP99, r.ReachMax = regionQuantile(reach, 0.5), regionQuantile(reach, 0.99), regionQuantile(reach, 1)
	r.LocalP50, r.LocalP99 = regionQuantile(local, 0.5), regionQuantile(local, 0.99)
	if n := len(s.writtenAt) * (s.cfg.Regions - 1); n > 0 {
		r.WANCopiesPerChange = float64(r.WANCopies) / float64(n)
	}
}

func regionQuantile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}
