package dissem

// Regions: one cluster per region, bridged over a WAN pool.
//
// Each region is a cluster of its own (its members gossip as a Node
// decides). Some of its gateways are bridge-capable: they are members of a
// second memberlist pool, the WAN pool, with every other region's
// bridge-capable gateways. Per region one of them is the active bridge,
// chosen by a pure rule every member applies to its own view
// (ChooseBridge: a rendezvous hash over the region's bridge-capable members
// it shows up, narrowed to those that see the most other regions over the
// WAN pool as each reports, TypeBridgeWAN), so no coordination is needed, a
// failed bridge's successor is known as soon as its lease passes, and a
// bridge cut off from the WAN pool alone hands over once it reports so.
//
// The active bridge of region A forwards each window of A's writes
// (BatchDelay, as an owner's writes are batched) once to the bridge of
// each other region (one copy per change per remote region), and every
// AliveInterval announces A's gateways and their watermarks (the region's
// digest) to the same bridges. A bridge that receives a region message
// over the WAN pool applies it and relays it to every member of its own
// region. Records keep their owner: another region only merges them.
//
// A member shows the gateways of a region expired (in its projection,
// never in its records) when nothing (a delta, an announcement, a repair)
// has come from that region within Lease: a crash of the whole region, a
// partition between the regions. A gateway the region's announcement no
// longer lists (its own region shows it down) is shown expired at once.
// Heard again, a region is shown up once its announced watermarks are
// held here (the missed writes are pulled first), or after Lease/2.
//
// Repair: a bridge whose watermark of a remote gateway stays behind that
// region's announcement across two of them (or at the first after a
// start or a revival) pulls from the other region's bridge over the WAN
// pool (TypePull with its digest, answered with TypeRegionSync of that
// region's records only, which it relays). Any other member leaves the
// first two announcements to its bridge; behind at the third in a row, it
// pulls from the bridge that relayed it (an ordinary pull inside the
// region).
//
// A Regions is per gateway, pure like Node: no I/O, no goroutine, time as
// an argument. Its driver feeds it the region messages, the writes of this
// region it applied (Forward), the passing of time, and executes its
// RegionReady.

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// Defaults of the WAN pool's timing.
const (
	// DefaultWANAliveInterval is how often a region's active bridge
	// announces the region to the other regions' bridges.
	DefaultWANAliveInterval = time.Second
	// DefaultWANLease is how long a region stays shown up in another
	// region without being heard from. It rides out a failover of the
	// active bridge on both sides (BridgeFailover) and a few lost
	// announcements.
	DefaultWANLease = 10 * time.Second
	// DefaultWANBatchDelay is the active bridge's write window: the writes
	// of its region within it cross the WAN pool together.
	DefaultWANBatchDelay = 5 * time.Millisecond
	// DefaultRegion is the region of a gateway that names none: a
	// single-region cluster.
	DefaultRegion = "default"
)

// ActiveBridge returns the active bridge of region among candidates (its
// bridge-capable gateways shown up), "" when there is none: the candidate
// with the highest rendezvous hash of (region, name), ties broken by name.
// Every member that sees the same candidates picks the same bridge, and
// when a bridge goes, only the regions it was the bridge of change theirs.
// ChooseBridge narrows the candidates to those that see the other regions
// first.
func ActiveBridge(region string, candidates []string) string {
	best, bestScore := "", uint64(0)
	for _, c := range candidates {
		s := rendezvous(region, c)
		if best == "" || s > bestScore || (s == bestScore && c < best) {
			best, bestScore = c, s
		}
	}
	return best
}

// ChooseBridge returns the active bridge of region among candidates (its
// bridge-capable gateways shown up), "" when there is none: ActiveBridge
// among the candidates that see the most other regions over the WAN pool,
// as each last reported it (reach: how many), or among all of them when
// none that reported sees any (every region is cut off, or this is the
// only one). A candidate that has not reported (it just started, or runs
// an earlier version) counts as seeing as many as the best: while every
// bridge sees the other regions the choice is ActiveBridge's, the one a
// gateway of an earlier version makes. A bridge that loses only its WAN
// link reports that it sees no region, and its region's choice moves to
// one that does.
func ChooseBridge(region string, candidates []string, reach map[string]int) string {
	best := 0
	for _, c := range candidates {
		if n, ok := reach[c]; ok {
			best = max(best, n)
		}
	}
	if best == 0 {
		return ActiveBridge(region, candidates)
	}
	var seeing []string
	for _, c := range candidates {
		if n, ok := reach[c]; !ok || n == best {
			seeing = append(seeing, c)
		}
	}
	return ActiveBridge(region, seeing)
}

func rendezvous(region, name string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(region))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(name))
	// fnv's low bits mix poorly over short names: finish with splitmix64's
	// mixer.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// BridgeFailover bounds the time from the death of a region's active
// bridge to its successor taking over: the lease of the region's members
// on it (CrashBound(lanLease)), and the next check of the choice (a lease
// tick of the WAN lease), after which every member has picked the same
// successor, which announces itself to the other regions at once. The
// region's writes made meanwhile reach the other regions by repair, one
// announcement interval and a round trip later (BridgeRepairBound).
func BridgeFailover(lanLease, wanLease time.Duration) time.Duration {
	return CrashBound(lanLease) + LeaseTick(wanLease)
}

// BridgeRepairBound bounds the time from the death of a region's active
// bridge to the writes its region made meanwhile being held by the other
// regions' bridges, less the round trip between the regions (add 1.5 of
// it: the successor's announcement, the pull and its answer): the failover,
// then the second announcement that shows the gap (a pull follows two).
func BridgeRepairBound(lanLease, wanLease, wanAlive time.Duration) time.Duration {
	return BridgeFailover(lanLease, wanLease) + wanAlive
}

// WANReachWindow is how recently a bridge of another region must have
// answered a bridge's ping for that bridge to count the region as one it
// sees over the WAN pool: half the WAN lease (pings go every
// AliveInterval, so several are lost before a region is counted unseen).
func WANReachWindow(wanLease time.Duration) time.Duration { return wanLease / 2 }

// BridgeHandover bounds the time from a bridge losing only its WAN link to
// its region's other bridge, which sees the other regions, taking over:
// the last answer passing out of the reach window, and the next check (a
// ping round, AliveInterval). Under the WAN lease less an announcement
// interval, the other regions never show the region expired meanwhile.
func BridgeHandover(wanAlive, wanLease time.Duration) time.Duration {
	return WANReachWindow(wanLease) + wanAlive
}

// WANCrashBound bounds the time from the death (or the isolation) of a
// whole region to its sessions shown expired in the others: the WAN lease
// and one check.
func WANCrashBound(wanLease time.Duration) time.Duration { return wanLease + LeaseTick(wanLease) }

// WANHealBound bounds the time from the end of a partition between two
// regions to each showing the other's sessions as they are: the next
// announcement (one interval), and the pull of what was missed, or the
// revival timeout (Lease/2) if that pull fails. memberlist's own view of
// the WAN pool plays no part: bridges reach each other by address.
func WANHealBound(wanAlive, wanLease time.Duration) time.Duration {
	return wanAlive + wanLease/2 + LeaseTick(wanLease)
}

// RegionConfig configures a gateway's Regions.
type RegionConfig struct {
	// Region is this gateway's region; Name its node name.
	Region string
	Name   string
	// Bridge: this gateway is bridge-capable (a member of the WAN pool).
	Bridge bool
	// AliveInterval is how often the active bridge announces its region.
	AliveInterval time.Duration
	// Lease is how long another region stays shown up unheard.
	Lease time.Duration
	// BatchDelay is the active bridge's write window.
	BatchDelay time.Duration
	// PacketBudget is the payload budget of one best-effort packet: a
	// batch over it crosses over a stream.
	PacketBudget int
}

// RegionMembers is what a Regions reads of its driver's views.
type RegionMembers interface {
	// Bridges are this region's bridge-capable gateways this member shows
	// up, itself included when it is one.
	Bridges() []string
	// Nodes are this region's gateways this member shows up, itself
	// included, each with this replica's watermark of its incarnation.
	Nodes() []RegionNode
	// WAN is the WAN pool's bridge-capable members of each other region
	// (those memberlist holds alive, or every one it knows when none is).
	// Only a bridge-capable member is asked.
	WAN() map[string][]string
	// Reach are the other regions this gateway sees over the WAN pool:
	// one of their bridges answered its ping within WANReachWindow. Only
	// a bridge-capable member is asked.
	Reach() []string
}

// RegionPull asks the driver to pull what this replica lacks from To: over
// the WAN pool (WAN) from another region's bridge, else inside this region.
// It calls PullDone(Region) when the pull is over.
type RegionPull struct {
	Region string
	To     string
	WAN    bool
}

// RegionNoteKind says what a RegionNote reports.
type RegionNoteKind uint8

const (
	// NoteRegionExpired: a region was not heard from within the lease;
	// its gateways are shown expired.
	NoteRegionExpired RegionNoteKind = iota + 1
	// NoteRegionHeard: a region shown expired is heard again.
	NoteRegionHeard
	// NoteRegionUp: a region is shown up again.
	NoteRegionUp
	// NoteRegionPull: a pull of what a region's announcement shows this
	// replica lacks.
	NoteRegionPull
	// NoteBridgeActive: this gateway became its region's active bridge;
	// NoteBridgeInactive: it no longer is.
	NoteBridgeActive
	NoteBridgeInactive
)

func (k RegionNoteKind) String() string {
	return [...]string{"?", "region-expired", "region-heard", "region-up", "region-pull", "bridge-active", "bridge-inactive"}[k]
}

// RegionNote says what happened, for logs and counters.
type RegionNote struct {
	Kind   RegionNoteKind
	Region string
	Node   string
}

func (n RegionNote) String() string { return fmt.Sprintf("%s %s %s", n.Kind, n.Region, n.Node) }

// RegionReady is what a Regions asks its driver to do, in order within each
// list.
type RegionReady struct {
	// Remote names gateways learnt to be of another region: the driver
	// tells its Node (SetRemote) before it applies anything below.
	Remote []string
	// Apply changes the replica and what it shows: ApplyDeltas,
	// ApplySync, MarkDown, MarkUp, Retire.
	Apply []Apply
	// WAN are messages for other regions' bridges over the WAN pool.
	WAN []Send
	// LAN are messages for every live member of this region (best effort
	// under the packet budget, else over a stream).
	LAN []*Message
	// Pulls are repairs to ask for.
	Pulls []RegionPull
	Notes []RegionNote
}

// Empty reports whether rd asks nothing.
func (rd *RegionReady) Empty() bool {
	return len(rd.Remote)+len(rd.Apply)+len(rd.WAN)+len(rd.LAN)+len(rd.Pulls)+len(rd.Notes) == 0
}

// remoteRegion is what a member knows of another region.
type remoteRegion struct {
	name  string
	heard bool
	last  int64 // when it was last heard
	down  bool  // shown expired
	// nodes are its gateways as its last announcement listed them; gone
	// those it listed once and no longer does (shown expired).
	nodes map[string]RegionNode
	gone  map[string]bool
	// bridge is the bridge that last spoke for it over the WAN pool, and
	// when (a bridge-capable member's target for it).
	bridge   string
	bridgeAt int64
	// reviving: heard again while shown expired, waiting for its missed
	// writes (up to the announced watermarks) since reviveAt.
	reviving bool
	reviveAt int64
	// behind counts the announcements in a row that showed this replica
	// behind (a bridge pulls at the second, a member at the third: by then
	// its bridge's pull and relay would have brought what it lacked);
	// announced: one was heard since start or revival.
	behind    int
	announced bool
	pulling   bool
}

// Regions is one gateway's view of the other regions and, on a bridge,
// the bridging. Not safe for concurrent use.
type Regions struct {
	cfg     RegionConfig
	members RegionMembers
	replica Replica

	regions map[string]*remoteRegion
	nodeOf  map[string]string // remote gateway -> its region

	pending          []crdt.Delta
	flushAt, quietAt int64
	aliveAt, leaseAt int64
	active           bool

	// reach is what each bridge-capable gateway of this region (this one
	// included) last reported of the other regions it sees over the WAN
	// pool (TypeBridgeWAN), by name; reached is this one's, as reported.
	reach   map[string][]string
	reached []string
	sawOnce bool
	startAt int64

	rd    RegionReady
	ready bool
}

// NewRegions returns a gateway's Regions. Call Start before the first Tick.
func NewRegions(cfg RegionConfig, members RegionMembers, replica Replica) (*Regions, error) {
	switch {
	case cfg.Region == "" || cfg.Name == "":
		return nil, fmt.Errorf("dissem: regions need a region and a name")
	case cfg.AliveInterval <= 0 || cfg.Lease <= 2*cfg.AliveInterval || cfg.BatchDelay < 0:
		return nil, fmt.Errorf("dissem: bad WAN intervals: alive %v, lease %v (over two alive intervals), batch %v",
			cfg.AliveInterval, cfg.Lease, cfg.BatchDelay)
	case cfg.PacketBudget <= 0:
		return nil, fmt.Errorf("dissem: packet budget %d", cfg.PacketBudget)
	}
	return &Regions{cfg: cfg, members: members, replica: replica,
		regions: make(map[string]*remoteRegion), nodeOf: make(map[string]string), reach: make(map[string][]string)}, nil
}

// Start sets the timers from now: the first announcement at once.
func (r *Regions) Start(now int64) {
	r.startAt = now
	r.aliveAt = now
	r.leaseAt = now + int64(LeaseTick(r.cfg.Lease))
	r.quietAt = now
}

// Deadline is when Tick next has something to do.
func (r *Regions) Deadline() int64 {
	d := min(r.aliveAt, r.leaseAt)
	if r.flushAt != 0 {
		d = min(d, r.flushAt)
	}
	return d
}

// HasReady reports whether Ready has anything.
func (r *Regions) HasReady() bool { return r.ready }

// Ready returns what the inputs since the last call ask, and starts a new
// one: the returned lists are the caller's.
func (r *Regions) Ready() RegionReady {
	out := r.rd
	r.rd = RegionReady{}
	r.ready = false
	return out
}

func (r *Regions) out() *RegionReady {
	r.ready = true
	return &r.rd
}

// Active reports whether this gateway was its region's active bridge at
// the last Tick.
func (r *Regions) Active() bool { return r.active }

// RegionOf returns the region of a gateway of another region.
func (r *Regions) RegionOf(node string) (string, bool) {
	reg, ok := r.nodeOf[node]
	return reg, ok
}

// ClientAddr returns the client address a remote region announced for one
// of its gateways.
func (r *Regions) ClientAddr(node string) string {
	if reg, ok := r.nodeOf[node]; ok {
		return r.regions[reg].nodes[node].ClientAddr
	}
	return ""
}

// Target is the bridge of region this bridge sends to: the one that spoke
// for it over the WAN pool within two announcement intervals (its region's
// own choice), else ActiveBridge over the WAN pool's members of it.
func (r *Regions) Target(region string, now int64) string {
	if rr := r.regions[region]; rr != nil && rr.bridge != "" && now-rr.bridgeAt <= int64(2*r.cfg.AliveInterval) {
		return rr.bridge
	}
	return ActiveBridge(region, r.members.WAN()[region])
}

// NextHop is where a message for gateway, of another region, goes next:
// from a bridge-capable gateway over the WAN pool to that region's
// bridge, from any other to this region's active bridge. ok is false when
// gateway's region is unknown or no hop is known.
func (r *Regions) NextHop(gateway string, now int64) (to string, wan, ok bool) {
	reg, known := r.nodeOf[gateway]
	if !known {
		return "", false, false
	}
	if r.cfg.Bridge {
		to = r.Target(reg, now)
		return to, true, to != ""
	}
	to = r.choose()
	return to, false, to != "" && to != r.cfg.Name
}

// Forward hands a bridge-capable gateway writes of its own region that it
// applied (its own and its members'): while it is the active bridge they
// cross to every other region within BatchDelay, batched.
func (r *Regions) Forward(deltas []crdt.Delta, now int64) {
	if !r.cfg.Bridge || !r.active || len(deltas) == 0 {
		return
	}
	r.pending = append(r.pending, deltas...)
	switch {
	case r.flushAt != 0:
	case now >= r.quietAt:
		r.flush(now)
	default:
		r.flushAt = r.quietAt
	}
}

func (r *Regions) flush(now int64) {
	batch := crdt.Coalesce(r.pending)
	r.pending, r.flushAt = nil, 0
	r.quietAt = now + int64(r.cfg.BatchDelay)
	if len(batch) == 0 || !r.active {
		return
	}
	for _, reg := range r.remoteRegions() {
		to := r.Target(reg, now)
		if to == "" {
			continue
		}
		packets, oversized := PackDeltas(batch, r.cfg.PacketBudget)
		for i, p := range packets {
			m, err := NewRegionDeltas(RegionMsg{Region: r.cfg.Region, From: r.cfg.Name}, p)
			if err != nil {
				panic(fmt.Sprintf("dissem: encode region deltas: %v", err))
			}
			r.out().WAN = append(r.rd.WAN, Send{To: to, Msg: m, Reliable: slices.Contains(oversized, i)})
		}
	}
}

// remoteRegions lists the other regions this gateway knows, sorted: those
// of the WAN pool (a bridge) and those heard from.
func (r *Regions) remoteRegions() []string {
	var out []string
	if r.cfg.Bridge {
		for reg := range r.members.WAN() {
			if reg != r.cfg.Region {
				out = append(out, reg)
			}
		}
	}
	for reg := range r.regions {
		if !slices.Contains(out, reg) {
			out = append(out, reg)
		}
	}
	slices.Sort(out)
	return out
}

// Tick runs what is due at now: the bridge's flush, the choice of the
// active bridge and its announcement, the regions' leases and revivals.
func (r *Regions) Tick(now int64) {
	if r.flushAt != 0 && now >= r.flushAt {
		r.flush(now)
	}
	if now >= r.leaseAt {
		// The choice of the active bridge follows this member's leases,
		// checked as often as a region's: a failed bridge's successor
		// takes over within a lease tick of the lease that shows it down.
		r.leaseAt = now + int64(LeaseTick(r.cfg.Lease))
		r.expire(now)
		if was := r.active; r.elect() && !was {
			r.aliveAt = now // announce at once: the other regions learn where to send
		}
	}
	if now >= r.aliveAt {
		r.aliveAt = now + int64(r.cfg.AliveInterval)
		r.report(now, true)
		if r.elect() {
			r.announce(now)
		}
	}
}

// CheckReach tells a bridge-capable gateway that the WAN pool's view may
// have changed: when the regions it sees did, it reports them to its
// region at once and checks its choice of the active bridge.
func (r *Regions) CheckReach(now int64) {
	if r.cfg.Bridge && r.report(now, false) {
		r.reelect(now)
	}
}

// report reads the regions this bridge sees over the WAN pool and tells
// its region (every AliveInterval, and when they change): it reports
// whether they changed. The first AliveInterval after the start it says
// nothing, and until WANReachWindow has passed since the start only that
// it sees regions (its first pings are on their way, or it is still
// joining the WAN pool; unreported, it counts as seeing as many regions as
// the best, and the region's choice does not move back and forth while
// its bridges start).
func (r *Regions) report(now int64, always bool) bool {
	if !r.cfg.Bridge || now < r.startAt+int64(r.cfg.AliveInterval) {
		return false
	}
	reach := slices.DeleteFunc(slices.Clone(r.members.Reach()), func(reg string) bool { return reg == r.cfg.Region })
	if len(reach) == 0 && !r.sawOnce && now < r.startAt+int64(WANReachWindow(r.cfg.Lease)) {
		return false
	}
	slices.Sort(reach)
	reach = slices.Compact(reach)
	changed := !r.sawOnce || !slices.Equal(reach, r.reached)
	r.sawOnce, r.reached = true, reach
	r.reach[r.cfg.Name] = reach
	if !changed && !always {
		return false
	}
	m, err := NewBridgeWAN(RegionMsg{Region: r.cfg.Region, From: r.cfg.Name, Reach: reach})
	if err != nil {
		panic(fmt.Sprintf("dissem: encode bridge-wan: %v", err))
	}
	r.out().LAN = append(r.rd.LAN, m)
	return changed
}

// reelect checks the choice of the active bridge between ticks (a report
// moved it): a bridge that became active announces itself at once.
func (r *Regions) reelect(now int64) {
	if was := r.active; r.elect() && !was {
		r.aliveAt = now
	}
}

// choose applies ChooseBridge to this member's view of its region.
func (r *Regions) choose() string {
	counts := make(map[string]int, len(r.reach))
	for name, reach := range r.reach {
		counts[name] = len(reach)
	}
	return ChooseBridge(r.cfg.Region, r.members.Bridges(), counts)
}

// stepBridgeWAN records what a bridge-capable gateway of this region
// reported of the regions it sees.
func (r *Regions) stepBridgeWAN(m *Message, now int64) {
	from := m.Region.From
	if m.Region.Region != r.cfg.Region || from == r.cfg.Name || m.Region.Via != "" {
		return
	}
	reach := slices.Clone(m.Region.Reach)
	slices.Sort(reach)
	reach = slices.Compact(reach)
	old, known := r.reach[from]
	r.reach[from] = reach
	if r.cfg.Bridge && (!known || len(old) != len(reach)) {
		r.reelect(now)
	}
}

// ActiveBridgeOf returns this member's choice of its region's active
// bridge ("" when it knows no bridge-capable gateway).
func (r *Regions) ActiveBridgeOf() string { return r.choose() }

// BridgeReach returns what each bridge-capable gateway of this region last
// reported of the other regions it sees over the WAN pool.
func (r *Regions) BridgeReach() map[string][]string {
	out := make(map[string][]string, len(r.reach))
	for name, reach := range r.reach {
		out[name] = slices.Clone(reach)
	}
	return out
}

// elect applies ActiveBridge to this member's view of its region, and
// reports whether this member is the active bridge.
func (r *Regions) elect() bool {
	if !r.cfg.Bridge {
		return false
	}
	active := r.choose() == r.cfg.Name
	if active != r.active {
		kind := NoteBridgeInactive
		if active {
			kind = NoteBridgeActive
		}
		r.out().Notes = append(r.rd.Notes, RegionNote{Kind: kind, Region: r.cfg.Region, Node: r.cfg.Name})
	}
	r.active = active
	if !active {
		r.pending, r.flushAt = nil, 0
	}
	return active
}

func (r *Regions) announce(now int64) {
	if len(r.pending) > 0 {
		// The writes waiting for the window's end go first: an
		// announcement that overtook them would show a gap that is not one.
		r.flush(now)
	}
	nodes := r.members.Nodes()
	slices.SortFunc(nodes, func(a, b RegionNode) int {
		switch {
		case a.Node < b.Node:
			return -1
		case a.Node > b.Node:
			return 1
		}
		return 0
	})
	m, err := NewRegionAlive(RegionMsg{Region: r.cfg.Region, From: r.cfg.Name, Nodes: nodes})
	if err != nil {
		panic(fmt.Sprintf("dissem: encode region alive: %v", err))
	}
	for _, reg := range r.remoteRegions() {
		if to := r.Target(reg, now); to != "" {
			r.out().WAN = append(r.rd.WAN, Send{To: to, Msg: m, Reliable: m.Size() > r.cfg.PacketBudget})
		}
	}
}

// expire shows expired the regions not heard within the lease, and shows
// up those whose revival waited past Lease/2.
func (r *Regions) expire(now int64) {
	for _, reg := range slices.Sorted(maps.Keys(r.regions)) {
		rr := r.regions[reg]
		if rr.reviving && now-rr.reviveAt > int64(r.cfg.Lease/2) {
			r.markUp(rr)
		}
		if rr.down || !rr.heard || now-rr.last <= int64(r.cfg.Lease) {
			continue
		}
		rr.down, rr.reviving, rr.announced, rr.behind = true, false, false, 0
		r.out().Notes = append(r.rd.Notes, RegionNote{Kind: NoteRegionExpired, Region: reg})
		for _, node := range slices.Sorted(maps.Keys(rr.nodes)) {
			if !rr.gone[node] {
				r.rd.Apply = append(r.rd.Apply, Apply{Kind: MarkDown, Node: node})
			}
		}
	}
}

func (r *Regions) markUp(rr *remoteRegion) {
	rr.down, rr.reviving = false, false
	r.out().Notes = append(r.rd.Notes, RegionNote{Kind: NoteRegionUp, Region: rr.name})
	for _, node := range slices.Sorted(maps.Keys(rr.nodes)) {
		if !rr.gone[node] {
			r.rd.Apply = append(r.rd.Apply, Apply{Kind: MarkUp, Node: node})
		}
	}
}

// region returns the record of a remote region, making one if needed.
func (r *Regions) region(name string) *remoteRegion {
	rr := r.regions[name]
	if rr == nil {
		rr = &remoteRegion{name: name, nodes: make(map[string]RegionNode), gone: make(map[string]bool)}
		r.regions[name] = rr
	}
	return rr
}

// learn records node as a gateway of region rr.
func (r *Regions) learn(rr *remoteRegion, node string) {
	if node == r.cfg.Name {
		return
	}
	reg, ok := r.nodeOf[node]
	if ok && reg == rr.name {
		return
	}
	if ok {
		// It moved (or was misattributed): its old region no longer
		// speaks for it.
		delete(r.regions[reg].nodes, node)
		delete(r.regions[reg].gone, node)
	}
	r.nodeOf[node] = rr.name
	if _, ok := rr.nodes[node]; !ok {
		rr.nodes[node] = RegionNode{Node: node}
	}
	r.out().Remote = append(r.rd.Remote, node)
	// What the node shows of it is the region's word from now on, also
	// over a stranger's lease that passed before it was known remote.
	kind := MarkUp
	if rr.down {
		kind = MarkDown
	}
	r.rd.Apply = append(r.rd.Apply, Apply{Kind: kind, Node: node})
}

// heard refreshes a region's lease (one shown expired is revived only by
// its announcement), and on a bridge notes who spoke for it.
func (r *Regions) heard(rr *remoteRegion, m *Message, wan bool, now int64) {
	rr.heard, rr.last = true, now
	if wan {
		rr.bridge, rr.bridgeAt = m.Region.From, now
	}
}

// Step handles a region message, received over the WAN pool (wan) or
// relayed inside this region.
func (r *Regions) Step(m *Message, wan bool, now int64) {
	if m.Type == TypeBridgeWAN {
		if !wan {
			r.stepBridgeWAN(m, now)
		}
		return
	}
	reg := m.Region.Region
	if reg == r.cfg.Region || (wan && !r.cfg.Bridge) {
		return // our own, come back; or a WAN message at a gateway outside the pool
	}
	rr := r.region(reg)
	r.heard(rr, m, wan, now)
	switch m.Type {
	case TypeRegionDeltas:
		for i := range m.Deltas {
			r.learn(rr, m.Deltas[i].Origin().Node)
		}
		r.out().Apply = append(r.rd.Apply, Apply{Kind: ApplyDeltas, Deltas: m.Deltas, Msg: m})
	case TypeRegionSync:
		for i := range m.Sync {
			r.learn(rr, m.Sync[i].Origin.Node)
		}
		r.out().Apply = append(r.rd.Apply, Apply{Kind: ApplySync, Sync: m.Sync, Msg: m})
	case TypeRegionAlive:
		r.stepAlive(rr, m, wan, now)
	default:
		return
	}
	if wan {
		relayed, err := m.Relayed(r.cfg.Name)
		if err != nil {
			panic(fmt.Sprintf("dissem: relay region message: %v", err))
		}
		r.out().LAN = append(r.rd.LAN, relayed)
	}
}

func (r *Regions) stepAlive(rr *remoteRegion, m *Message, wan bool, now int64) {
	listed := make(map[string]bool, len(m.Region.Nodes))
	for _, n := range m.Region.Nodes {
		if n.Node == r.cfg.Name {
			continue
		}
		listed[n.Node] = true
		r.learn(rr, n.Node)
		old := rr.nodes[n.Node]
		if n.Incarnation > old.Incarnation && old.Incarnation != 0 {
			r.out().Apply = append(r.rd.Apply, Apply{Kind: Retire, Origin: crdt.Origin{Node: n.Node, Incarnation: n.Incarnation}})
		}
		if n.Incarnation < old.Incarnation {
			n = old // a stale announcement (a bridge that lags) says nothing of a newer incarnation
		}
		rr.nodes[n.Node] = n
		if rr.gone[n.Node] {
			delete(rr.gone, n.Node)
			if !rr.down {
				r.out().Apply = append(r.rd.Apply, Apply{Kind: MarkUp, Node: n.Node})
			}
		}
	}
	for _, node := range slices.Sorted(maps.Keys(rr.nodes)) {
		if !listed[node] && !rr.gone[node] {
			rr.gone[node] = true
			r.out().Apply = append(r.rd.Apply, Apply{Kind: MarkDown, Node: node})
		}
	}
	from := m.Region.Via
	if wan {
		from = m.Region.From
	}
	behind := r.behind(rr)
	if rr.down && !rr.reviving {
		r.out().Notes = append(r.rd.Notes, RegionNote{Kind: NoteRegionHeard, Region: rr.name, Node: from})
		if !behind {
			r.markUp(rr)
		} else {
			rr.reviving, rr.reviveAt = true, now
		}
	}
	// A bridge pulls at once what the first announcement (since start or
	// a revival) shows it lacks, else at the second in a row; a member
	// leaves the first two to its bridge, whose answer it is relayed.
	first := rr.reviving || !rr.announced
	if behind {
		rr.behind++
	} else {
		rr.behind = 0
	}
	need := 2
	if !wan {
		need = 3
	}
	pull := behind && ((first && wan) || rr.behind >= need)
	rr.announced = true
	if pull && !rr.pulling && from != "" {
		rr.pulling = true
		r.out().Pulls = append(r.rd.Pulls, RegionPull{Region: rr.name, To: from, WAN: wan})
		r.rd.Notes = append(r.rd.Notes, RegionNote{Kind: NoteRegionPull, Region: rr.name, Node: from})
	}
}

// behind reports whether this replica lacks writes of a gateway that a
// region's last announcement listed.
func (r *Regions) behind(rr *remoteRegion) bool {
	for node, n := range rr.nodes {
		if !rr.gone[node] && n.Watermark > 0 && r.replica.Watermark(crdt.Origin{Node: node, Incarnation: n.Incarnation}) < n.Watermark {
			return true
		}
	}
	return false
}

// PullDone tells the Regions a pull of region's records is over.
func (r *Regions) PullDone(region string) {
	if rr := r.regions[region]; rr != nil {
		rr.pulling = false
	}
}

// Advance tells the Regions its last Ready was executed: a reviving region
// whose missed writes the replica now holds is shown up.
func (r *Regions) Advance(now int64) {
	for _, reg := range slices.Sorted(maps.Keys(r.regions)) {
		if rr := r.regions[reg]; rr.reviving && !r.behind(rr) {
			r.markUp(rr)
		}
	}
}

// RegionInfo is what a gateway knows of another region.
type RegionInfo struct {
	Region    string
	Bridge    string // its bridge that last spoke over the WAN pool
	Gateways  int    // gateways its last announcement listed
	Down      bool   // shown expired
	Reviving  bool
	LastHeard int64
}

// Regions returns what this gateway knows of every other region, by name.
func (r *Regions) Regions() []RegionInfo {
	var out []RegionInfo
	for _, reg := range slices.Sorted(maps.Keys(r.regions)) {
		rr := r.regions[reg]
		out = append(out, RegionInfo{Region: reg, Bridge: rr.bridge, Gateways: len(rr.nodes) - len(rr.gone),
			Down: rr.down, Reviving: rr.reviving, LastHeard: rr.last})
	}
	return out
}

// Own reports whether a record of origin node belongs to this region (it
// is not a gateway this member learnt to be of another): what a bridge
// answers a WAN pull with.
func (r *Regions) Own(node string) bool {
	_, remote := r.nodeOf[node]
	return !remote
}
