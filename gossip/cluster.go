package gossip

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/node"
)

// Host is what the cluster drives: the local node. node.Node implements it.
type Host = node.Host

var _ node.Cluster = (*Cluster)(nil)

// Cluster joins a node to its peers over memberlist. It implements
// node.Cluster (Publish, Route) and drives a Host with what it hears.
type Cluster struct {
	// static after construction
	cfg    Config
	host   Host
	log    *zap.Logger
	ml     *memberlist.Memberlist
	queue  *memberlist.TransmitLimitedQueue
	self   crdt.Origin
	stats  Stats
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	inbound chan []byte
	flushCh chan struct{}
	// answers bounds concurrent anti-entropy answers (each computes a Diff
	// and opens a stream); requests past it are dropped and counted.
	answers chan struct{}

	mu      sync.Mutex // guards the fields below
	pending []crdt.Delta
	leases  *Leases
	gaps    *GapTracker
	peers   map[string]*peer // by node name, every node ever seen
	pulling map[string]bool  // pulls in flight, by peer
	seen    map[crdt.Origin]uint64
	leaving bool

	// memberlist events, queued by the event delegate (which memberlist
	// calls with its node lock held) and handled by handleLoop.
	evMu     sync.Mutex
	evQueue  []func()
	evSignal chan struct{}

	routeMu  sync.Mutex
	routeSeq uint64
	routes   map[uint64]chan routeAck
}

// peer is what this node knows of another member.
type peer struct {
	name        string
	incarnation uint64
	clientAddr  string
	sessions    int
	addr        string
	node        *memberlist.Node // copy from the latest join/update event
	state       string           // alive, dead or left (memberlist events)
	leaving     bool             // it announced a graceful leave
	deadSince   time.Time        // when memberlist declared it dead
}

// maxConcurrentAnswers bounds the anti-entropy answers computed at once.
const maxConcurrentAnswers = 4

// New starts memberlist for host and joins cfg.Join (if any). Call Leave
// or Shutdown to stop.
func New(cfg Config, host Host) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{
		cfg: cfg, host: host, log: cfg.Logger.Named("gossip"),
		self:     crdt.Origin{Node: cfg.Name, Incarnation: cfg.Incarnation},
		ctx:      ctx,
		cancel:   cancel,
		inbound:  make(chan []byte, cfg.InboundQueue),
		flushCh:  make(chan struct{}, 1),
		answers:  make(chan struct{}, maxConcurrentAnswers),
		evSignal: make(chan struct{}, 1),
		leases:   NewLeases(cfg.LeaseTimeout),
		gaps:     NewGapTracker(),
		peers:    make(map[string]*peer),
		pulling:  make(map[string]bool),
		seen:     make(map[crdt.Origin]uint64),
		routes:   make(map[uint64]chan routeAck),
	}
	mlc, err := c.memberlistConfig()
	if err != nil {
		cancel()
		return nil, err
	}
	c.ml, err = memberlist.Create(mlc)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("gossip: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	c.queue = &memberlist.TransmitLimitedQueue{NumNodes: c.ml.NumMembers, RetransmitMult: mlc.RetransmitMult}
	c.wg.Add(3)
	go c.handleLoop()
	go c.flushLoop()
	go c.tickLoop()
	if len(cfg.Join) > 0 {
		if _, err := c.Join(cfg.Join); err != nil {
			c.log.Warn("join failed; retrying in the background", zap.Strings("join", cfg.Join), zap.Error(err))
			c.wg.Add(1)
			go c.retryJoin(cfg.Join)
		}
	}
	return c, nil
}

// retryJoin keeps trying to join until one address answers, backing off
// from 500ms to 30s (serf's retry-join): agents started together, or before
// the member they name, still form one cluster.
func (c *Cluster) retryJoin(addrs []string) {
	defer c.wg.Done()
	wait := 500 * time.Millisecond
	for attempt := 2; ; attempt++ {
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(wait):
		}
		n, err := c.ml.Join(addrs)
		if err == nil || n > 0 {
			c.log.Info("joined the cluster", zap.Int("attempt", attempt), zap.Int("answered", n))
			return
		}
		c.log.Debug("join retry failed", zap.Int("attempt", attempt), zap.Error(err))
		wait = min(2*wait, 30*time.Second)
	}
}

func (c *Cluster) memberlistConfig() (*memberlist.Config, error) {
	mlc, err := profileConfig(c.cfg.Profile)
	if err != nil {
		return nil, err
	}
	host, port, err := splitHostPort(c.cfg.BindAddr)
	if err != nil {
		return nil, fmt.Errorf("gossip: bind address: %w", err)
	}
	mlc.Name = c.cfg.Name
	mlc.BindAddr, mlc.BindPort = host, port
	mlc.AdvertisePort = port
	if c.cfg.AdvertiseAddr != "" {
		ah, ap, err := splitHostPort(c.cfg.AdvertiseAddr)
		if err != nil {
			return nil, fmt.Errorf("gossip: advertise address: %w", err)
		}
		mlc.AdvertiseAddr, mlc.AdvertisePort = ah, ap
	}
	mlc.Delegate = (*delegate)(c)
	mlc.Events = (*events)(c)
	mlc.Keyring = c.cfg.Keyring
	// A restarted node reuses its name, possibly on a new address: let it
	// reclaim the name as soon as the old incarnation is dead instead of
	// stalling on "conflicting address".
	mlc.DeadNodeReclaimTime = time.Second
	mlc.Logger = log.New(&zapWriter{c.log.Named("memberlist")}, "", 0)
	if c.cfg.Memberlist != nil {
		c.cfg.Memberlist(mlc)
	}
	if mlc.Transport == nil {
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{mlc.BindAddr}, BindPort: mlc.BindPort, Logger: mlc.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("gossip: listen on %s: %w", c.cfg.BindAddr, err)
		}
		var t memberlist.NodeAwareTransport = nt
		if c.cfg.WrapTransport != nil {
			t = c.cfg.WrapTransport(t)
		}
		mlc.Transport = t
		if mlc.BindPort == 0 {
			mlc.BindPort = nt.GetAutoBindPort()
			mlc.AdvertisePort = mlc.BindPort
		}
	}
	return mlc, nil
}

func splitHostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("bad port in %q", addr)
	}
	return h, port, nil
}

// Join contacts existing members; it returns how many answered.
func (c *Cluster) Join(addrs []string) (int, error) {
	n, err := c.ml.Join(addrs)
	if err != nil {
		return n, fmt.Errorf("gossip: join %v: %w", addrs, err)
	}
	return n, nil
}

// LocalAddr returns this node's gossip address as others see it.
func (c *Cluster) LocalAddr() string { return c.ml.LocalNode().Address() }

// Publish queues deltas of records this node wrote; the flusher sends them
// within BatchDelay. It never blocks on the network.
func (c *Cluster) Publish(deltas []crdt.Delta) {
	if len(deltas) == 0 {
		return
	}
	c.mu.Lock()
	c.pending = append(c.pending, deltas...)
	c.mu.Unlock()
	select {
	case c.flushCh <- struct{}{}:
	default:
	}
}

func (c *Cluster) flushLoop() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.flushCh:
		}
		// Let a burst of writes share packets.
		timer.Reset(c.cfg.BatchDelay)
		select {
		case <-c.ctx.Done():
			return
		case <-timer.C:
		}
		c.flush(false)
	}
}

// flush sends everything pending. reliable forces TCP to every member (used
// on leave, when packets must not be lost).
func (c *Cluster) flush(reliable bool) {
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	batch = crdt.Coalesce(batch)
	packets, oversized := PackDeltas(batch, c.cfg.PacketBudget)
	big := make(map[int]bool, len(oversized))
	for _, i := range oversized {
		big[i] = true
	}
	members := c.otherMembers()
	mode := ChooseMode(len(members)+1, c.cfg.EagerThreshold)
	for i, p := range packets {
		msg, err := encodeDeltas(p)
		if err != nil {
			c.log.Error("encode deltas", zap.Error(err))
			continue
		}
		targets := members
		switch {
		case reliable || big[i]:
			c.sendAll(targets, msg, true)
		case mode == ModeEager:
			c.sendAll(targets, msg, false)
		default:
			c.enqueueBroadcast(msg, "")
			// Seed the epidemic at once rather than at the next gossip tick.
			targets = pickRandom(members, 3)
			c.sendAll(targets, msg, false)
		}
		c.stats.DeltaCopies.Add(uint64(len(p) * len(targets)))
		c.stats.DeltaBytes.Add(uint64(len(msg) * len(targets)))
	}
}

func (c *Cluster) enqueueBroadcast(msg []byte, name string) {
	var b memberlist.Broadcast = &uniqueBroadcast{msg: msg}
	if name != "" {
		b = &namedBroadcast{msg: msg, name: name}
	}
	c.queue.QueueBroadcast(b)
	if c.queue.NumQueued() > c.cfg.MaxQueue {
		c.queue.Prune(c.cfg.MaxQueue)
		c.stats.QueuePruned.Add(1)
	}
}

// otherMembers returns the live members except this node, as copies taken
// from memberlist's events. (memberlist.Members returns pointers into its own
// state, which it keeps changing under its lock: reading them races.)
func (c *Cluster) otherMembers() []*memberlist.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*memberlist.Node, 0, len(c.peers))
	for _, p := range c.peers {
		if p.node != nil && p.state == "alive" {
			n := *p.node
			out = append(out, &n)
		}
	}
	return out
}

// member returns a copy of a live member's node, or nil.
func (c *Cluster) member(name string) *memberlist.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.peers[name]; p != nil && p.node != nil && p.state == "alive" {
		n := *p.node
		return &n
	}
	return nil
}

func pickRandom(nodes []*memberlist.Node, k int) []*memberlist.Node {
	if len(nodes) <= k {
		return nodes
	}
	out := make([]*memberlist.Node, 0, k)
	for _, i := range rand.Perm(len(nodes))[:k] {
		out = append(out, nodes[i])
	}
	return out
}

// sendAll sends msg to every node, best effort (UDP) or reliably (TCP,
// concurrently, waiting for all).
func (c *Cluster) sendAll(nodes []*memberlist.Node, msg []byte, reliable bool) {
	if !reliable {
		for _, n := range nodes {
			if err := c.ml.SendBestEffort(n, msg); err != nil {
				c.stats.SendErrors.Add(1)
			}
			c.stats.PacketsSent.Add(1)
			c.stats.BytesSent.Add(uint64(len(msg)))
		}
		return
	}
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.sendReliable(n, msg)
		}()
	}
	wg.Wait()
}

func (c *Cluster) sendReliable(n *memberlist.Node, msg []byte) bool {
	c.stats.StreamsSent.Add(1)
	c.stats.BytesSent.Add(uint64(len(msg)))
	if err := c.ml.SendReliable(n, msg); err != nil {
		c.stats.SendErrors.Add(1)
		c.log.Debug("reliable send failed", zap.String("to", n.Name), zap.Error(err))
		return false
	}
	return true
}

func (c *Cluster) sendReliableTo(name string, msg []byte) error {
	n := c.member(name)
	if n == nil {
		return fmt.Errorf("gossip: %q is not a live member", name)
	}
	if !c.sendReliable(n, msg) {
		return fmt.Errorf("gossip: send to %q failed", name)
	}
	return nil
}

// enqueue hands a received message to the handler goroutine; when the queue
// is full the message is dropped and counted (anti-entropy repairs).
func (c *Cluster) enqueue(b []byte) {
	c.stats.MessagesReceived.Add(1)
	c.stats.BytesReceived.Add(uint64(len(b)))
	select {
	case c.inbound <- b:
	default:
		c.stats.InboundDropped.Add(1)
	}
}

func (c *Cluster) handleLoop() {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case b := <-c.inbound:
			c.handle(b)
		case <-c.evSignal:
			c.evMu.Lock()
			q := c.evQueue
			c.evQueue = nil
			c.evMu.Unlock()
			for _, f := range q {
				f()
			}
		}
	}
}

// queueEvent defers a memberlist event's handling to handleLoop. It never
// blocks: memberlist holds its node lock while it calls us.
func (c *Cluster) queueEvent(f func()) {
	c.evMu.Lock()
	c.evQueue = append(c.evQueue, f)
	c.evMu.Unlock()
	select {
	case c.evSignal <- struct{}{}:
	default:
	}
}

// handle processes one received message. Garbage is counted and dropped.
func (c *Cluster) handle(b []byte) {
	m, err := decodeMessage(b)
	if err != nil {
		c.stats.BadMessages.Add(1)
		c.log.Debug("dropped bad gossip message", zap.Error(err))
		return
	}
	switch m.typ {
	case msgDeltas:
		c.handleDeltas(m.deltas, b)
	case msgAlive:
		c.handleAlive(m.alive)
	case msgLeaving:
		if m.alive.Origin.Node != c.cfg.Name {
			c.mu.Lock()
			c.peerLocked(m.alive.Origin.Node).leaving = true
			c.mu.Unlock()
		}
	case msgPull, msgState:
		c.goAnswer(m.digest)
	case msgSync:
		c.stats.SyncRecordsReceived.Add(uint64(m.sync.Len()))
		if err := c.host.ApplySync(m.sync); err != nil {
			c.stats.BadMessages.Add(1)
			c.log.Warn("rejected sync", zap.Error(err))
		}
	case msgRoute:
		c.goRoute(m.route)
	case msgRouteAck:
		c.routeMu.Lock()
		ch := c.routes[m.ack.ID]
		delete(c.routes, m.ack.ID)
		c.routeMu.Unlock()
		if ch != nil {
			ch <- m.ack
		}
	case msgKey:
		ack := routeAck{ID: m.key.ID, Delivered: 1}
		if err := c.applyKeyOp(m.key); err != nil {
			c.log.Warn("keyring operation from peer failed", zap.String("op", m.key.Op), zap.Error(err))
			ack = routeAck{ID: m.key.ID, Err: err.Error()}
		}
		c.goReply(m.key.FromNode, ack)
	}
}

func (c *Cluster) handleDeltas(ds []crdt.Delta, raw []byte) {
	now := c.cfg.Now().UnixNano()
	fresh := false
	var up []string
	// Never call memberlist with mu held: memberlist calls our event
	// delegate with its own lock held.
	epidemic := ChooseMode(c.ml.NumMembers(), c.cfg.EagerThreshold) == ModeEpidemic
	c.mu.Lock()
	for i := range ds {
		o := ds[i].Origin()
		if o.Node == c.cfg.Name {
			continue
		}
		if ds[i].Version() > c.seen[o] {
			fresh = true
			c.seen[o] = ds[i].Version()
		}
		// Eager deltas come straight from their owner: proof it is alive.
		// Relayed epidemic deltas prove nothing about the owner now.
		if !epidemic && c.leases.Heard(o.Node, now) {
			up = append(up, o.Node)
		}
	}
	c.mu.Unlock()
	for _, n := range up {
		c.host.MarkNodeUp(n)
	}
	if err := c.host.ApplyDeltas(ds); err != nil {
		c.stats.BadMessages.Add(1)
		c.log.Warn("rejected deltas", zap.Error(err))
		return
	}
	c.stats.DeltasReceived.Add(uint64(len(ds)))
	if epidemic && fresh {
		// Epidemic relay: what was new to us goes on with a retransmit limit.
		c.enqueueBroadcast(append([]byte(nil), raw...), "")
	}
}

func (c *Cluster) handleAlive(a alive) {
	if a.Origin.Node == c.cfg.Name {
		return
	}
	now := c.cfg.Now().UnixNano()
	local := watermarkOf(c.host.Digest(), a.Origin)
	c.mu.Lock()
	wasDown := c.leases.Heard(a.Origin.Node, now)
	p := c.peerLocked(a.Origin.Node)
	newInc := a.Origin.Incarnation > p.incarnation
	p.incarnation = max(p.incarnation, a.Origin.Incarnation)
	p.sessions, p.clientAddr = a.Sessions, a.ClientAddr
	pull := c.gaps.Observe(a.Origin, a.Watermark, local) && !c.pulling[a.Origin.Node]
	if pull {
		c.pulling[a.Origin.Node] = true
	}
	c.mu.Unlock()
	if newInc {
		c.retire(a.Origin)
	}
	if wasDown {
		c.host.MarkNodeUp(a.Origin.Node)
	}
	if pull {
		c.stats.GapPulls.Add(1)
		c.goPull(a.Origin.Node)
	}
}

// retire tells the host about a new incarnation of a node, which drops the
// sessions of its older incarnations at once.
func (c *Cluster) retire(o crdt.Origin) {
	if err := c.host.ApplySync(crdt.Sync{{Origin: o}}); err != nil {
		c.log.Warn("retire old incarnation", zap.Stringer("origin", o), zap.Error(err))
	}
}

func watermarkOf(d crdt.Digest, o crdt.Origin) uint64 {
	for _, e := range d {
		if e.Origin == o {
			return e.Watermark
		}
	}
	return 0
}

func (c *Cluster) peerLocked(name string) *peer {
	p := c.peers[name]
	if p == nil {
		p = &peer{name: name, state: "alive"}
		c.peers[name] = p
	}
	return p
}

// goPull asks a peer, over TCP, for what this node lacks.
func (c *Cluster) goPull(from string) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.pulling, from)
			c.mu.Unlock()
		}()
		msg, err := encodeDigestMsg(msgPull, digestMsg{From: c.cfg.Name, Digest: c.host.Digest()})
		if err == nil {
			c.stats.PullBytes.Add(uint64(len(msg)))
			err = c.sendReliableTo(from, msg)
		}
		if err != nil {
			c.log.Debug("pull failed", zap.String("from", from), zap.Error(err))
		}
	}()
}

// goAnswer answers a peer's digest with what it lacks.
func (c *Cluster) goAnswer(d digestMsg) {
	if d.From == c.cfg.Name {
		return
	}
	select {
	case c.answers <- struct{}{}:
	default:
		c.stats.AnswersDropped.Add(1) // the asker retries at its next pull or push/pull
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { <-c.answers }()
		s := c.host.Diff(d.Digest)
		if len(s) == 0 {
			return
		}
		msg, err := encodeSync(s)
		if err != nil {
			c.log.Error("encode sync", zap.Error(err))
			return
		}
		c.stats.SyncRecordsSent.Add(uint64(s.Len()))
		c.stats.SyncBytesSent.Add(uint64(len(msg)))
		if err := c.sendReliableTo(d.From, msg); err != nil {
			c.log.Debug("sync answer failed", zap.String("to", d.From), zap.Error(err))
		}
	}()
}

func (c *Cluster) goRoute(r routeReq) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		n := c.host.DeliverLocal(node.Message{To: r.To, From: r.From, FromDevice: r.FromDevice, Body: r.Body})
		c.reply(r.FromNode, routeAck{ID: r.ID, Delivered: n})
	}()
}

func (c *Cluster) goReply(to string, ack routeAck) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.reply(to, ack)
	}()
}

// reply answers a request with an ack.
func (c *Cluster) reply(to string, ack routeAck) {
	msg, err := encodeRouteAck(ack)
	if err == nil {
		err = c.sendReliableTo(to, msg)
	}
	if err != nil {
		c.log.Debug("ack failed", zap.String("to", to), zap.Error(err))
	}
}

// Route delivers msg through the gateway that owns the recipient's
// sessions and returns how many sessions it reached there.
func (c *Cluster) Route(ctx context.Context, gateway string, msg node.Message) (int, error) {
	if gateway == c.cfg.Name {
		return c.host.DeliverLocal(msg), nil
	}
	if len(msg.Body) > maxBodyBytes {
		return 0, fmt.Errorf("gossip: message body of %d bytes exceeds %d", len(msg.Body), maxBodyBytes)
	}
	return c.request(ctx, gateway, func(id uint64) ([]byte, error) {
		return encodeRouteReq(routeReq{ID: id, FromNode: c.cfg.Name, To: msg.To, From: msg.From, FromDevice: msg.FromDevice, Body: msg.Body})
	})
}

// request sends a message that the peer answers with a msgRouteAck carrying
// the same id, and waits for the answer (at most RouteTimeout).
func (c *Cluster) request(ctx context.Context, to string, encode func(id uint64) ([]byte, error)) (int, error) {
	c.routeMu.Lock()
	c.routeSeq++
	id := c.routeSeq
	ch := make(chan routeAck, 1)
	c.routes[id] = ch
	c.routeMu.Unlock()
	defer func() {
		c.routeMu.Lock()
		delete(c.routes, id)
		c.routeMu.Unlock()
	}()
	b, err := encode(id)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RouteTimeout)
	defer cancel()
	if err := c.sendReliableTo(to, b); err != nil {
		return 0, err
	}
	select {
	case ack := <-ch:
		if ack.Err != "" {
			return ack.Delivered, fmt.Errorf("%s: %s", to, ack.Err)
		}
		return ack.Delivered, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("gossip: request to %s: %w", to, ctx.Err())
	}
}

func (c *Cluster) tickLoop() {
	defer c.wg.Done()
	aliveT := time.NewTicker(c.cfg.AliveInterval)
	defer aliveT.Stop()
	leaseT := time.NewTicker(min(c.cfg.LeaseTimeout/20, 250*time.Millisecond))
	defer leaseT.Stop()
	reconnectT := time.NewTicker(c.cfg.ReconnectInterval)
	defer reconnectT.Stop()
	c.announce()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-aliveT.C:
			c.announce()
		case <-reconnectT.C:
			c.reconnect()
		case <-leaseT.C:
			if !LeasesEnforced(ChooseMode(c.ml.NumMembers(), c.cfg.EagerThreshold)) {
				continue
			}
			c.mu.Lock()
			expired := c.leases.Expire(c.cfg.Now().UnixNano())
			c.mu.Unlock()
			for _, n := range expired {
				c.log.Info("peer lease expired; its sessions are shown expired", zap.String("node", n))
				c.host.MarkNodeDown(n)
			}
		}
	}
}

// reconnect tries to rejoin members memberlist declared dead, as serf does:
// a healed partition would otherwise stay split, each side holding the
// other dead.
func (c *Cluster) reconnect() {
	now := c.cfg.Now()
	var addrs []string
	c.mu.Lock()
	for name, p := range c.peers {
		if p.state != "dead" || p.addr == "" {
			continue
		}
		if now.Sub(p.deadSince) > c.cfg.ReconnectTimeout {
			delete(c.peers, name)
			continue
		}
		addrs = append(addrs, p.addr)
	}
	c.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if n, err := c.ml.Join(addrs); err == nil || n > 0 {
			c.log.Info("rejoined failed members", zap.Int("answered", n))
		}
	}()
}

// announce sends this node's alive message: to every member while eager,
// through the piggyback queue when epidemic.
func (c *Cluster) announce() {
	msg, err := encodeAlive(alive{Origin: c.self, Watermark: watermarkOf(c.host.Digest(), c.self),
		Sessions: c.host.SessionCount(), ClientAddr: c.cfg.ClientAddr})
	if err != nil {
		c.log.Error("encode alive", zap.Error(err))
		return
	}
	members := c.otherMembers()
	if ChooseMode(len(members)+1, c.cfg.EagerThreshold) == ModeEager {
		c.sendAll(members, msg, false)
		c.stats.AliveBytes.Add(uint64(len(msg) * len(members)))
		return
	}
	c.enqueueBroadcast(msg, "alive/"+c.cfg.Name)
}

// Leave flushes pending deltas reliably to every member (the host should
// have written its sessions disconnected first: node.Drain), leaves
// memberlist gracefully and shuts down.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.mu.Lock()
	c.leaving = true
	c.mu.Unlock()
	c.flush(true)
	if msg, err := encodeAliveAs(msgLeaving, alive{Origin: c.self, Sessions: c.host.SessionCount(), ClientAddr: c.cfg.ClientAddr}); err == nil {
		c.sendAll(c.otherMembers(), msg, true)
	}
	err := c.ml.Leave(timeout)
	if serr := c.Shutdown(); err == nil {
		err = serr
	}
	return err
}

// Shutdown stops the cluster without telling anyone (a crash, to peers).
func (c *Cluster) Shutdown() error {
	c.cancel()
	err := c.ml.Shutdown()
	c.wg.Wait()
	return err
}

// Stats returns the cluster's counters.
func (c *Cluster) Stats() *Stats { return &c.stats }

// Stats counts what the cluster sent, received and dropped.
type Stats struct {
	PacketsSent         atomic.Uint64
	StreamsSent         atomic.Uint64
	BytesSent           atomic.Uint64
	SendErrors          atomic.Uint64
	DeltaCopies         atomic.Uint64 // delta copies sent directly (not counting piggyback retransmits)
	DeltaBytes          atomic.Uint64 // bytes of delta messages sent directly
	AliveBytes          atomic.Uint64 // bytes of alive announcements sent directly
	StateBytes          atomic.Uint64 // bytes of push/pull digests handed to memberlist
	PullBytes           atomic.Uint64 // bytes of pull requests sent
	MessagesReceived    atomic.Uint64
	BytesReceived       atomic.Uint64
	DeltasReceived      atomic.Uint64
	BadMessages         atomic.Uint64 // garbage or invalid messages, dropped
	InboundDropped      atomic.Uint64 // dropped because the inbound queue was full
	QueuePruned         atomic.Uint64
	GapPulls            atomic.Uint64
	AnswersDropped      atomic.Uint64 // anti-entropy requests dropped: too many at once
	SyncRecordsSent     atomic.Uint64
	SyncBytesSent       atomic.Uint64
	SyncRecordsReceived atomic.Uint64
}

// zapWriter adapts memberlist's *log.Logger output to zap at debug level,
// except warnings and errors.
type zapWriter struct{ log *zap.Logger }

func (w *zapWriter) Write(p []byte) (int, error) {
	s := strings.TrimSpace(string(p))
	switch {
	case strings.Contains(s, "use of closed network connection"):
		w.log.Debug(s) // sockets closing under a send during shutdown
	case strings.Contains(s, "[ERR]"):
		w.log.Error(s)
	case strings.Contains(s, "[WARN]"):
		w.log.Warn(s)
	default:
		w.log.Debug(s)
	}
	return len(p), nil
}

var _ io.Writer = (*zapWriter)(nil)
