package gossip

// Regions: the WAN pool of a bridge-capable gateway, and the execution of
// what its dissem.Regions decides (dissem/region.go says what is decided:
// the active bridge, forwarding, region leases, repair).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/cluster"
	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
)

// wanPool is a bridge-capable gateway's membership of the WAN pool: a
// second memberlist, of the bridge-capable gateways of every region.
type wanPool struct {
	ml *memberlist.Memberlist

	mu   sync.Mutex // a leaf: memberlist's event delegate takes it
	book map[string]*wanMember
	// acked is when each member last answered this bridge's ping (lease
	// clock); pinging, the pings under way
	acked   map[string]int64
	pinging map[string]bool

	answering atomic.Int32 // WAN repairs being answered
}

type wanMember struct {
	region string
	node   memberlist.Node
	alive  bool
	left   bool
}

func (w *wanPool) set(n *memberlist.Node, region string, alive, left bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.book[n.Name]
	if m == nil {
		m = &wanMember{}
		w.book[n.Name] = m
	}
	if region != "" {
		m.region = region
	}
	m.node, m.alive, m.left = *n, alive, left
	m.node.Meta = nil
}

// node returns a WAN member's address, alive or not: a bridge reaches
// another by address, whatever memberlist holds of it (after a partition
// both sides hold the other dead until a rejoin).
func (w *wanPool) node(name string) *memberlist.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m := w.book[name]; m != nil && !m.left {
		n := m.node
		return &n
	}
	return nil
}

// byRegion returns the members of each region other than own: those alive,
// or every one not gone for good when none is.
func (w *wanPool) byRegion(own string) map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	alive, known := map[string][]string{}, map[string][]string{}
	for name, m := range w.book {
		if m.region == "" || m.region == own || m.left {
			continue
		}
		known[m.region] = append(known[m.region], name)
		if m.alive {
			alive[m.region] = append(alive[m.region], name)
		}
	}
	for reg, names := range known {
		if len(alive[reg]) == 0 {
			alive[reg] = names
		}
		slices.Sort(alive[reg])
	}
	return alive
}

// reach returns the regions other than own of which a member answered
// this bridge's ping since since.
func (w *wanPool) reach(own string, since int64) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for name, m := range w.book {
		if at, ok := w.acked[name]; ok && at >= since && !m.left && m.region != "" && m.region != own && !slices.Contains(out, m.region) {
			out = append(out, m.region)
		}
	}
	slices.Sort(out)
	return out
}

// toPing returns the members of the other regions (not gone for good) no
// ping of which is under way, and marks them pinged.
func (w *wanPool) toPing(own string) []memberlist.Node {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []memberlist.Node
	for name, m := range w.book {
		if m.left || m.region == "" || m.region == own || w.pinging[name] {
			continue
		}
		w.pinging[name] = true
		out = append(out, m.node)
	}
	return out
}

// pinged records a ping's outcome.
func (w *wanPool) pinged(name string, ok bool, now int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pinging, name)
	if ok {
		w.acked[name] = now
	}
}

// dead returns the addresses of members memberlist holds dead (not left).
func (w *wanPool) dead() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, m := range w.book {
		if !m.alive && !m.left {
			out = append(out, m.node.Address())
		}
	}
	slices.Sort(out)
	return out
}

// remoteBook is the set of gateways learnt to be of another region. Its
// lock is a leaf.
type remoteBook struct {
	mu    sync.Mutex
	names map[string]bool
}

func (b *remoteBook) add(names []string) {
	if len(names) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.names == nil {
		b.names = make(map[string]bool)
	}
	for _, n := range names {
		b.names[n] = true
	}
}

func (b *remoteBook) has(name string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.names[name]
}

// OtherRegion reports whether gateway is of another region (learnt from
// that region's messages). It takes only a leaf lock: the node calls it
// with its own held (node.RegionLocator).
func (c *Cluster) OtherRegion(gateway string) bool { return c.remote.has(gateway) }

// regionView is the Cluster as its Regions read it (dissem.RegionMembers).
// Its methods are called with c.mu held.
type regionView Cluster

var _ dissem.RegionMembers = (*regionView)(nil)

func (v *regionView) Bridges() []string {
	c := (*Cluster)(v)
	var out []string
	if c.wan != nil {
		out = append(out, c.cfg.Name)
	}
	for _, name := range c.view.names {
		if c.view.state[name] != "alive" {
			continue
		}
		if m, ok := c.members.get(name); !ok || !m.Bridge {
			continue
		}
		if p, ok := c.core.Peer(name); ok && (p.ShownDown || p.Leaving || p.State != dissem.StateAlive) {
			continue
		}
		out = append(out, name)
	}
	return out
}

func (v *regionView) Nodes() []dissem.RegionNode {
	c := (*Cluster)(v)
	out := []dissem.RegionNode{{Node: c.cfg.Name, Incarnation: c.cfg.Incarnation,
		Watermark: c.host.Watermark(c.self), ClientAddr: c.cfg.ClientAddr}}
	for _, p := range c.core.Peers() {
		if !p.Listed || p.State != dissem.StateAlive || p.ShownDown || p.Incarnation == 0 {
			continue
		}
		out = append(out, dissem.RegionNode{Node: p.Name, Incarnation: p.Incarnation,
			Watermark: c.host.Watermark(crdt.Origin{Node: p.Name, Incarnation: p.Incarnation}), ClientAddr: p.ClientAddr})
	}
	return out
}

// Reach: the regions of which a bridge answered this bridge's ping within
// the reach window (wanReachWindow).
func (v *regionView) Reach() []string {
	c := (*Cluster)(v)
	if c.wan == nil {
		return nil
	}
	return c.wan.reach(c.cfg.Region, c.leaseNow()-int64(dissem.WANReachWindow(c.cfg.WANLease)))
}

func (v *regionView) WAN() map[string][]string {
	c := (*Cluster)(v)
	if c.wan == nil {
		return nil
	}
	return c.wan.byRegion(c.cfg.Region)
}

// startWAN joins the WAN pool (a bridge-capable gateway: Config.WANBindAddr).
func (c *Cluster) startWAN() error {
	mlc, err := profileConfig(c.cfg.WANProfile)
	if err != nil {
		return err
	}
	host, port, err := splitHostPort(c.cfg.WANBindAddr)
	if err != nil {
		return fmt.Errorf("gossip: WAN bind address: %w", err)
	}
	mlc.Name = c.cfg.Name
	mlc.BindAddr, mlc.BindPort, mlc.AdvertisePort = host, port, port
	if c.cfg.WANAdvertiseAddr != "" {
		ah, ap, err := splitHostPort(c.cfg.WANAdvertiseAddr)
		if err != nil {
			return fmt.Errorf("gossip: WAN advertise address: %w", err)
		}
		mlc.AdvertiseAddr, mlc.AdvertisePort = ah, ap
	}
	mlc.Delegate = (*wanDelegate)(c)
	mlc.Events = (*wanEvents)(c)
	mlc.Alive = (*wanAlive)(c)
	mlc.Keyring = c.cfg.Keyring
	mlc.DeadNodeReclaimTime = time.Second
	mlc.Logger = log.New(&zapWriter{c.log.Named("wan")}, "", 0)
	if c.cfg.WANMemberlist != nil {
		c.cfg.WANMemberlist(mlc)
	}
	nt, err := newTransport(mlc.BindAddr, mlc.BindPort, mlc.Logger)
	if err != nil {
		return fmt.Errorf("gossip: WAN listen on %s: %w", c.cfg.WANBindAddr, err)
	}
	var t memberlist.NodeAwareTransport = nt
	if c.cfg.WrapWANTransport != nil {
		t = c.cfg.WrapWANTransport(t)
	}
	mlc.Transport = t
	if mlc.BindPort == 0 {
		mlc.BindPort = nt.port()
		mlc.AdvertisePort = mlc.BindPort
	}
	c.wan = &wanPool{book: make(map[string]*wanMember), acked: make(map[string]int64), pinging: make(map[string]bool)}
	if c.wan.ml, err = memberlist.Create(mlc); err != nil {
		return fmt.Errorf("gossip: start the WAN pool on %s: %w", c.cfg.WANBindAddr, err)
	}
	return nil
}

// runWAN joins the WAN pool's seeds until one answers, and then rejoins
// the members memberlist holds dead every ReconnectInterval: after a
// partition between regions each side holds the other dead.
func (c *Cluster) runWAN() {
	defer c.wg.Done()
	wait := 500 * time.Millisecond
	joined := len(c.cfg.WANJoin) == 0
	for {
		if !joined {
			if n, err := c.wan.ml.Join(c.cfg.WANJoin); err == nil || n > 0 {
				joined = true
				c.log.Info("joined the WAN pool", zap.Int("answered", n))
				wait = c.cfg.ReconnectInterval
			} else {
				c.log.Debug("WAN join failed", zap.Error(err))
				wait = min(2*wait, 30*time.Second)
			}
		} else if dead := c.wan.dead(); len(dead) > 0 {
			_, _ = c.wan.ml.Join(dead)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// runReach pings every bridge of the other regions every
// WANAliveInterval, directly (memberlist's ping and ack, over the WAN
// pool's UDP): the regions that answered within dissem.WANReachWindow are
// those this bridge sees, which it reports to its region
// (Regions.CheckReach, after each answer or timeout). It does not wait for
// memberlist's failure detection, whose suspicion of every other member
// at a member cut off from them all gets no confirmations: minutes with
// the wan profile.
func (c *Cluster) runReach() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.WANAliveInterval)
	defer t.Stop()
	for {
		for _, n := range c.wan.toPing(c.cfg.Region) {
			// Not waited for by Shutdown: a ping waits for its answer up to
			// the WAN profile's probe timeout (3s for wan), and touches
			// nothing but the pool's book once the cluster is shut down.
			go func() {
				_, err := c.wan.ml.Ping(n.Name, &net.UDPAddr{IP: n.Addr, Port: int(n.Port)})
				c.wan.pinged(n.Name, err == nil, c.leaseNow())
				if c.ctx.Err() == nil {
					c.queueEvent(func() { c.step(c.regions.CheckReach) })
				}
			}()
		}
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			// A region's last answer may have passed out of the window.
			c.queueEvent(func() { c.step(c.regions.CheckReach) })
		}
	}
}

// WANAddr returns this gateway's WAN pool address, "" when it is not
// bridge-capable.
func (c *Cluster) WANAddr() string {
	if c.wan == nil {
		return ""
	}
	return c.wan.ml.LocalNode().Address()
}

// Region returns this gateway's region.
func (c *Cluster) Region() string { return c.cfg.Region }

// ActiveBridge reports whether this gateway is its region's active bridge.
func (c *Cluster) ActiveBridge() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.regions.Active()
}

// BridgeReach returns what each bridge-capable gateway of this region last
// reported of the other regions it sees over the WAN pool.
func (c *Cluster) BridgeReach() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.regions.BridgeReach()
}

// ActiveBridgeName returns this gateway's choice of its region's active
// bridge, "" when it knows no bridge-capable gateway.
func (c *Cluster) ActiveBridgeName() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.regions.ActiveBridgeOf()
}

// Regions returns what this gateway knows of the other regions.
func (c *Cluster) Regions() []dissem.RegionInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.regions.Regions()
}

// wanDelegate is the WAN pool's memberlist.Delegate.
type wanDelegate Cluster

func (d *wanDelegate) NodeMeta(int) []byte {
	return dissem.EncodeWANMeta(dissem.WANMeta{Region: d.cfg.Region, Incarnation: d.cfg.Incarnation})
}

func (d *wanDelegate) NotifyMsg(b []byte) {
	c := (*Cluster)(d)
	c.stats.WANMessagesReceived.Add(1)
	select {
	case c.wanIn <- slices.Clone(b):
	default:
		c.stats.InboundDropped.Add(1)
	}
}

func (d *wanDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (d *wanDelegate) LocalState(bool) []byte          { return nil }
func (d *wanDelegate) MergeRemoteState([]byte, bool)   {}

// wanAlive keeps members without WAN metadata out of the WAN pool.
type wanAlive Cluster

func (a *wanAlive) NotifyAlive(n *memberlist.Node) error {
	if err := checkWANMember(n); err != nil {
		return err
	}
	m, _ := dissem.DecodeWANMeta(n.Meta)
	return (*Cluster)(a).bounds().origin(crdt.Origin{Node: n.Name, Incarnation: m.Incarnation})
}

func checkWANMember(n *memberlist.Node) error {
	if n.Name == "" || n.Port == 0 {
		return errors.New("WAN member without a name or a port")
	}
	if _, err := dissem.DecodeWANMeta(n.Meta); err != nil {
		return fmt.Errorf("WAN member %q without Rollcall metadata: %w", n.Name, err)
	}
	return nil
}

// wanEvents is the WAN pool's memberlist.EventDelegate.
type wanEvents Cluster

func (e *wanEvents) NotifyJoin(n *memberlist.Node)   { e.observe(n, true) }
func (e *wanEvents) NotifyUpdate(n *memberlist.Node) { e.observe(n, true) }
func (e *wanEvents) NotifyLeave(n *memberlist.Node)  { e.observe(n, false) }

func (e *wanEvents) observe(n *memberlist.Node, alive bool) {
	c := (*Cluster)(e)
	if n.Name == c.cfg.Name {
		return
	}
	m, err := dissem.DecodeWANMeta(n.Meta)
	if err != nil && alive {
		return
	}
	c.wan.set(n, m.Region, alive, n.State == memberlist.StateLeft)
}

// handleWAN processes one message received over the WAN pool.
func (c *Cluster) handleWAN(b []byte) {
	m, err := dissem.Decode(b)
	if err != nil {
		c.stats.BadMessages.Add(1)
		c.log.Debug("dropped bad WAN message", zap.Error(err))
		return
	}
	if m = c.screen(m); m == nil {
		return
	}
	switch m.Type {
	case dissem.TypeRegionDeltas, dissem.TypeRegionAlive, dissem.TypeRegionSync:
		c.step(func(now int64) { c.regions.Step(m, true, now) })
	case dissem.TypePull:
		c.goAnswerWAN(m.Digest)
	case dissem.TypeRouteVia:
		c.goRouteVia(m.Via, true)
	case dissem.TypeKickVia:
		c.goKickVia(m.KickVia, true)
	case dissem.TypeRouteAck:
		c.routeAck(m.Ack)
	default:
		c.stats.BadMessages.Add(1)
	}
}

// drainRegions executes what the Regions asks until it asks nothing more.
// Called with c.mu held; it is released while the sends go out.
func (c *Cluster) drainRegions(now int64) {
	for c.regions.HasReady() {
		rd := c.regions.Ready()
		for _, name := range rd.Remote {
			c.core.SetRemote(name)
		}
		c.remote.add(rd.Remote)
		c.mu.Unlock()
		c.executeRegions(rd)
		c.mu.Lock()
		c.regions.Advance(now)
	}
}

func (c *Cluster) executeRegions(rd dissem.RegionReady) {
	for _, a := range rd.Apply {
		c.apply(a)
	}
	for _, n := range rd.Notes {
		c.regionNote(n)
	}
	for _, s := range rd.WAN {
		if s.Msg.Type == dissem.TypeRegionDeltas {
			c.stats.WANDeltaCopies.Add(uint64(len(s.Msg.Deltas)))
		}
		if !s.Reliable {
			_ = c.sendWAN(s.To, s.Msg.Bytes, false)
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			_ = c.sendWAN(s.To, s.Msg.Bytes, true)
		}()
	}
	for _, m := range rd.LAN {
		c.relayLAN(m)
	}
	for _, p := range rd.Pulls {
		c.goRegionPull(p)
	}
}

// relayLAN sends a region message to every live member of this region.
func (c *Cluster) relayLAN(m *dissem.Message) {
	reliable := m.Size() > c.cfg.PacketBudget
	for _, name := range c.liveMembers() {
		c.mu.Lock()
		to, addr := c.view.node(name), c.view.address(name)
		c.mu.Unlock()
		if to == nil {
			continue
		}
		if !reliable {
			c.sendBestEffort(to, addr, m.Bytes, nil)
			continue
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.sendReliable(to, m.Bytes)
		}()
	}
}

// sendWAN sends msg to a member of the WAN pool.
func (c *Cluster) sendWAN(to string, msg []byte, reliable bool) error {
	if c.wan == nil {
		return errors.New("gossip: not a member of the WAN pool")
	}
	n := c.wan.node(to)
	if n == nil {
		c.stats.SendErrors.Add(1)
		return fmt.Errorf("gossip: %q is not a member of the WAN pool", to)
	}
	c.stats.WANMessagesSent.Add(1)
	c.stats.WANBytesSent.Add(uint64(len(msg)))
	var err error
	if reliable {
		err = c.wan.ml.SendReliable(n, msg)
	} else {
		err = c.wan.ml.SendBestEffort(n, msg)
	}
	if err != nil {
		c.stats.SendErrors.Add(1)
		c.log.Debug("WAN send failed", zap.String("to", to), zap.Error(err))
	}
	return err
}

// goRegionPull asks for what this replica lacks of a region: over the WAN
// pool from its bridge, or from this region's bridge that relayed its
// announcement.
func (c *Cluster) goRegionPull(p dissem.RegionPull) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			c.regions.PullDone(p.Region)
			c.mu.Unlock()
		}()
		c.stats.RegionPulls.Add(1)
		m, err := dissem.NewDigest(dissem.TypePull, c.cfg.Name, c.host.Digest())
		if err != nil {
			return
		}
		if p.WAN {
			err = c.sendWAN(p.To, m.Bytes, true)
		} else {
			err = c.sendReliableTo(p.To, m.Bytes)
		}
		if err != nil {
			c.log.Debug("region pull failed", zap.String("region", p.Region), zap.String("from", p.To), zap.Error(err))
		}
	}()
}

// goAnswerWAN answers another region's bridge's digest with what it lacks
// of this region's records, page after page (each a TypeRegionSync).
func (c *Cluster) goAnswerWAN(d dissem.DigestMsg) {
	if c.wan.answering.Add(1) > dissem.MaxConcurrentAnswers {
		c.wan.answering.Add(-1)
		c.stats.AnswersDropped.Add(1)
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.wan.answering.Add(-1)
		var cur crdt.PageCursor
		for {
			page, next, last := c.host.DiffPage(d.Digest, cur, 0, c.cfg.SyncPageBytes)
			// Only this region's records: its own gateways' (memberlist
			// lists them here), never another region's, even one this
			// gateway holds records of before it heard that region.
			c.mu.Lock()
			page = slices.DeleteFunc(page, func(os crdt.OriginSync) bool {
				n := os.Origin.Node
				return !c.regions.Own(n) || (n != c.cfg.Name && !c.view.Listed(n))
			})
			c.mu.Unlock()
			if len(page) > 0 {
				m, err := dissem.NewRegionSync(dissem.RegionMsg{Region: c.cfg.Region, From: c.cfg.Name}, page)
				if err != nil {
					c.log.Error("encode region sync", zap.Error(err))
					return
				}
				c.stats.SyncRecordsSent.Add(uint64(page.Len()))
				if err := c.sendWAN(d.From, m.Bytes, true); err != nil {
					return
				}
			}
			if last || c.ctx.Err() != nil {
				return
			}
			cur = next
		}
	}()
}

func (c *Cluster) regionNote(n dissem.RegionNote) {
	switch n.Kind {
	case dissem.NoteRegionExpired:
		c.stats.RegionsExpired.Add(1)
		c.log.Warn("region not heard within the WAN lease; its sessions are shown expired", zap.String("region", n.Region))
	case dissem.NoteRegionHeard:
		c.log.Info("region heard again", zap.String("region", n.Region), zap.String("via", n.Node))
	case dissem.NoteRegionUp:
		c.log.Info("region shown up", zap.String("region", n.Region))
	case dissem.NoteBridgeActive:
		c.stats.BridgeChanges.Add(1)
		c.log.Info("this gateway is its region's active bridge", zap.String("region", n.Region))
	case dissem.NoteBridgeInactive:
		c.stats.BridgeChanges.Add(1)
		c.log.Info("this gateway is no longer its region's active bridge", zap.String("region", n.Region))
	}
}

// routeAck hands an answer to the request waiting for it.
func (c *Cluster) routeAck(ack dissem.RouteAck) {
	c.routeMu.Lock()
	ch := c.routes[ack.ID]
	delete(c.routes, ack.ID)
	c.routeMu.Unlock()
	if ch != nil {
		ch <- ack
	}
}

// routeVia sends a message for gateway, of another region, to the next hop
// (this region's active bridge, or from a bridge the other region's) and
// returns what it answered.
func (c *Cluster) routeVia(ctx context.Context, gateway string, msg cluster.Message) (int, error) {
	return c.viaHop(ctx, gateway, func(id uint64) ([]byte, error) {
		return dissem.EncodeRouteVia(dissem.RouteVia{RouteReq: dissem.RouteReq{ID: id, FromNode: c.cfg.Name, To: msg.To,
			From: msg.From, FromDevice: msg.FromDevice, Body: msg.Body}, Gateway: gateway})
	})
}

// kickVia is routeVia for a kick.
func (c *Cluster) kickVia(ctx context.Context, gateway, user, device string) (int, error) {
	return c.viaHop(ctx, gateway, func(id uint64) ([]byte, error) {
		return dissem.EncodeKickVia(dissem.KickVia{KickReq: dissem.KickReq{ID: id, FromNode: c.cfg.Name, User: user, Device: device},
			Gateway: gateway})
	})
}

// viaHop sends a request for gateway, of another region, to the next hop.
func (c *Cluster) viaHop(ctx context.Context, gateway string, encode func(id uint64) ([]byte, error)) (int, error) {
	c.mu.Lock()
	to, wan, ok := c.regions.NextHop(gateway, c.leaseNow())
	c.mu.Unlock()
	if !ok || (wan && c.wan == nil) {
		return 0, fmt.Errorf("gossip: no route to gateway %q of another region", gateway)
	}
	return c.requestOn(ctx, to, wan, encode)
}

// goKickVia carries out a kick that came through the bridges, as
// goRouteVia does a routed message.
func (c *Cluster) goKickVia(k dissem.KickVia, fromWAN bool) {
	c.goVia(k.ID, k.FromNode, k.Gateway, fromWAN, func(ctx context.Context, remote bool) (int, error) {
		switch {
		case k.Gateway == c.cfg.Name:
			return c.host.KickLocal(k.User, k.Device), nil
		case remote:
			return c.kickVia(ctx, k.Gateway, k.User, k.Device)
		}
		return c.Kick(ctx, k.Gateway, k.User, k.Device)
	})
}

// goVia carries out a request that came through the bridges: do, unless
// gateway is of another region and the request already crossed the WAN
// pool; then answers the asker over the pool it came by.
func (c *Cluster) goVia(id uint64, from, gateway string, fromWAN bool, do func(ctx context.Context, remote bool) (int, error)) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		// The next hop gets less time than the hop before gave this one,
		// so that its failure is answered before the asker gives up.
		ctx, cancel := context.WithTimeout(c.ctx, c.cfg.RouteTimeout*3/4)
		defer cancel()
		c.mu.Lock()
		_, remote := c.regions.RegionOf(gateway)
		c.mu.Unlock()
		var (
			n   int
			err error
		)
		if remote && fromWAN {
			err = fmt.Errorf("gateway %q is not of region %s", gateway, c.cfg.Region)
		} else {
			n, err = do(ctx, remote)
		}
		ack := dissem.RouteAck{ID: id, Delivered: n}
		if err != nil {
			ack.Err = err.Error()
		}
		b, err := dissem.EncodeRouteAck(ack)
		if err != nil {
			return
		}
		if fromWAN {
			err = c.sendWAN(from, b, true)
		} else {
			err = c.sendReliableTo(from, b)
		}
		if err != nil {
			c.log.Debug("answer through the bridges failed", zap.String("to", from), zap.Error(err))
		}
	}()
}

// goRouteVia carries out a routed message that came through the bridges:
// delivered here, or sent on to its gateway in this region, or (from a
// member of this region, at a bridge) on to the gateway's region; a
// message that crossed the WAN pool never crosses it again.
func (c *Cluster) goRouteVia(r dissem.RouteVia, fromWAN bool) {
	msg := cluster.Message{To: r.To, From: r.From, FromDevice: r.FromDevice, Body: r.Body}
	c.goVia(r.ID, r.FromNode, r.Gateway, fromWAN, func(ctx context.Context, remote bool) (int, error) {
		switch {
		case r.Gateway == c.cfg.Name:
			return c.host.DeliverLocal(msg), nil
		case remote:
			return c.routeVia(ctx, r.Gateway, msg)
		}
		return c.Route(ctx, r.Gateway, msg)
	})
}
