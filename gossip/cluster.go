package gossip

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/crdt"
	"github.com/rollcall/rollcall/dissem"
	"github.com/rollcall/rollcall/internal/stall"
)

// Cluster joins a node to its peers over memberlist. It implements
// node.Cluster (Publish, Route) and drives a Host with what it hears.
//
// Every decision of dissemination and anti-entropy is made by a
// dissem.Node (the core); the Cluster feeds it (received messages,
// memberlist's events, the owner's writes, the passing of time) from one
// goroutine, run, and executes what it asks for (packets, streams,
// piggyback broadcasts, changes to the host's replica and projection).
type Cluster struct {
	// static after construction
	cfg   Config
	host  Host
	log   *zap.Logger
	ml    *memberlist.Memberlist
	queue *memberlist.TransmitLimitedQueue
	// packets, when memberlist's packets are plain (plainPackets), is its
	// transport, which sendBestEffort writes user messages to itself
	packets memberlist.NodeAwareTransport
	self    crdt.Origin
	stats   Stats
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	inbound chan []byte
	flushCh chan struct{} // cap 1: Publish queued deltas
	// pubQ holds what Publish queued for run to hand the core; pubMu is a
	// leaf lock (see Publish)
	pubMu   sync.Mutex
	pubQ    []crdt.Delta
	started time.Time // real monotonic start, for stall detection

	// owned by run
	stall *stall.Detector
	// stalled is the total of this process's own stalls, ns (see leaseNow);
	// written by run only
	stalled atomic.Int64
	// lastStep is the lease clock of the previous step (see step)
	lastStep int64

	// mu guards the fields below. Lock order: mu, then the host's locks
	// (the core reads the host with mu held); nothing that holds a host
	// lock may wait for mu.
	mu   sync.Mutex
	core *dissem.Node // every call holds mu
	view memberView   // what the core reads of memberlist's members
	// readiness (ready.go): a Join reached a member, and the first
	// anti-entropy exchange brought this replica up to date with one;
	// ready is closed once both hold
	joined, synced bool
	ready          chan struct{}
	joinWake       chan struct{} // cap 1: a member appeared; retryJoin tries again at once

	// memberlist events, queued by the event delegate (which memberlist
	// calls with its node lock held) and handled by run.
	evMu     sync.Mutex
	evQueue  []func()
	evSignal chan struct{}

	routeMu  sync.Mutex
	routeSeq uint64
	routes   map[uint64]chan dissem.RouteAck

	// members is each member's metadata as memberlist's events reported
	// it, for the alive filter (validate.go), which memberlist calls with
	// its own lock held and so cannot wait for mu to read view.
	members memberBook

	// regions is this gateway's view of the other regions and its
	// bridging (every call holds mu); wan its WAN pool, nil unless it is
	// bridge-capable (wan.go); wanIn the messages received there.
	regions *dissem.Regions
	wan     *wanPool
	wanIn   chan []byte
	// remote holds the gateways learnt to be of another region, for
	// OtherRegion, which the node calls with its own lock held: a leaf.
	remote remoteBook
}

// memberView is memberlist's member list as the events told it: what the
// core reads (dissem.Members) and where the Cluster finds a member's
// address. Guarded by Cluster.mu.
type memberView struct {
	numMembers func() int // memberlist's NumMembers
	// members is numMembers' count as of the view's last change (or the
	// last lease tick): the core asks for it at every message it relays,
	// and memberlist counts its members afresh, under its lock, at every
	// call. The count changes only at the events that change the view.
	members int
	names   []string // listed members, in order of their first event
	nodes   map[string]*memberlist.Node
	addrs   map[string]memberlist.Address // each listed member's, for sendBestEffort
	state   map[string]string             // alive, dead or left
	legacy  *legacyBook                   // members of an earlier version (versions.go)
}

var (
	_ dissem.Members = (*memberView)(nil)
	_ dissem.Lister  = (*memberView)(nil)
)

func (v *memberView) NumMembers() int                   { return v.members }
func (v *memberView) NumPeers() int                     { return len(v.names) }
func (v *memberView) Peer(i int) string                 { return v.names[i] }
func (v *memberView) Incarnation(string) uint64         { return 0 }
func (v *memberView) node(name string) *memberlist.Node { return v.nodes[name] }

// Listed makes the view a dissem.Lister: the core leases, in every mode,
// the nodes whose records it holds that memberlist never reported.
func (v *memberView) Listed(name string) bool { _, ok := v.nodes[name]; return ok }

// countMembers reads memberlist's count of members again.
func (v *memberView) countMembers() { v.members = v.numMembers() }

func (v *memberView) set(n *memberlist.Node, state string) {
	defer v.countMembers()
	if _, ok := v.nodes[n.Name]; !ok {
		v.names = append(v.names, n.Name)
	}
	cp := *n
	v.nodes[n.Name], v.state[n.Name] = &cp, state
	v.addrs[n.Name] = memberlist.Address{Addr: cp.Address(), Name: cp.Name}
	if v.legacy != nil {
		v.legacy.set(&cp, state)
	}
}

// address returns a listed member's address.
func (v *memberView) address(name string) memberlist.Address { return v.addrs[name] }

// destination is where a send goes: a member and its address (node nil:
// not a listed member).
type destination struct {
	node *memberlist.Node
	addr memberlist.Address
}

// destinations appends to out the destination of each of sends, looked up
// with mu (the view's guard) held once.
func (v *memberView) destinations(mu *sync.Mutex, sends []dissem.Send, out []destination) []destination {
	mu.Lock()
	defer mu.Unlock()
	for _, s := range sends {
		out = append(out, destination{v.nodes[s.To], v.addrs[s.To]})
	}
	return out
}

func (v *memberView) forget(name string) {
	if i := slices.Index(v.names, name); i >= 0 {
		v.names = slices.Delete(v.names, i, i+1)
	}
	delete(v.nodes, name)
	delete(v.addrs, name)
	delete(v.state, name)
	if v.legacy != nil {
		v.legacy.forget(name)
	}
}

// hostReplica is what the core reads of the host.
type hostReplica struct{ h Host }

func (r hostReplica) Watermark(o crdt.Origin) uint64 { return r.h.Watermark(o) }
func (r hostReplica) SessionCount() int              { return r.h.SessionCount() }

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
		started:  time.Now(),
		stall:    stall.NewDetector(dissem.LeaseTick(cfg.LeaseTimeout), leaseStallThreshold(cfg.LeaseTimeout)),
		inbound:  make(chan []byte, cfg.InboundQueue),
		flushCh:  make(chan struct{}, 1),
		evSignal: make(chan struct{}, 1),
		routes:   make(map[uint64]chan dissem.RouteAck),
		ready:    make(chan struct{}),
		joinWake: make(chan struct{}, 1),
		wanIn:    make(chan []byte, cfg.InboundQueue),
	}
	c.view = memberView{numMembers: func() int { return 1 }, members: 1,
		nodes: make(map[string]*memberlist.Node), addrs: make(map[string]memberlist.Address), state: make(map[string]string),
		legacy: newLegacyBook()}
	// The client address is settled before the core starts: its alive
	// announcements carry it, as memberlist's metadata does.
	mlc, err := c.memberlistConfig()
	if err != nil {
		cancel()
		return nil, err
	}
	c.advertiseClientAddr(mlc)
	core, err := dissem.New(dissem.Config{
		Name: cfg.Name, Incarnation: cfg.Incarnation, ClientAddr: c.cfg.ClientAddr,
		BatchDelay: max(cfg.BatchDelay, 0), PacketBudget: cfg.PacketBudget, EagerThreshold: cfg.EagerThreshold,
		Relay:         cfg.Relay,
		AliveInterval: cfg.AliveInterval, LeaseTimeout: cfg.LeaseTimeout,
		ReconnectInterval: cfg.ReconnectInterval, ReconnectTimeout: cfg.ReconnectTimeout,
		Rand: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}, &c.view, hostReplica{host})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("gossip: %w", err)
	}
	c.core = core
	c.regions, err = dissem.NewRegions(dissem.RegionConfig{Region: cfg.Region, Name: cfg.Name, Bridge: cfg.WANBindAddr != "",
		AliveInterval: cfg.WANAliveInterval, Lease: cfg.WANLease, BatchDelay: max(cfg.WANBatchDelay, 0),
		PacketBudget: cfg.PacketBudget}, (*regionView)(c), hostReplica{host})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("gossip: %w", err)
	}
	if len(cfg.Join) == 0 {
		c.joined, c.synced = true, true // the first member: nobody to catch up with
		close(c.ready)
	}
	c.stall.Observe(c.elapsed()) // the first reading: the loop starts now
	// The queue exists before memberlist starts: its gossip goroutine asks
	// the delegate for broadcasts as soon as Create has begun.
	var created atomic.Pointer[memberlist.Memberlist]
	c.queue = &memberlist.TransmitLimitedQueue{RetransmitMult: mlc.RetransmitMult, NumNodes: func() int {
		if ml := created.Load(); ml != nil {
			return ml.NumMembers()
		}
		return 1
	}}
	c.ml, err = memberlist.Create(mlc)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("gossip: start memberlist on %s: %w", cfg.BindAddr, err)
	}
	created.Store(c.ml)
	if t, ok := mlc.Transport.(memberlist.NodeAwareTransport); ok && plainPackets(mlc) {
		c.packets = t
	}
	if cfg.WANBindAddr != "" {
		if err := c.startWAN(); err != nil {
			cancel()
			_ = c.ml.Shutdown()
			return nil, err
		}
	}
	c.mu.Lock()
	c.view.numMembers = c.ml.NumMembers
	c.view.countMembers()
	c.core.Start(c.leaseNow(), false)
	c.regions.Start(c.leaseNow())
	c.mu.Unlock()
	c.wg.Add(1)
	go c.run()
	if c.wan != nil {
		c.wg.Add(2)
		go c.runWAN()
		go c.runReach()
	}
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
		case <-c.joinWake:
			// A member reached us: the cluster is up, try again now
			// rather than at the end of a long backoff.
		}
		n, err := c.ml.Join(addrs)
		if err == nil || n > 0 {
			c.log.Info("joined the cluster", zap.Int("attempt", attempt), zap.Int("answered", n))
			c.markJoined(n)
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
	mlc.Alive = (*aliveFilter)(c)
	mlc.Conflict = (*conflicts)(c)
	mlc.Keyring = c.cfg.Keyring
	// A restarted node reuses its name, possibly on a new address: let it
	// reclaim the name as soon as the old incarnation is dead instead of
	// stalling on "conflicting address".
	mlc.DeadNodeReclaimTime = time.Second
	mlc.Logger = log.New(&zapWriter{c.log.Named("memberlist")}, "", 0)
	mlc.EnableCompression = c.cfg.Compress
	setProtocolRange(mlc)
	if c.cfg.Memberlist != nil {
		c.cfg.Memberlist(mlc)
	}
	if mlc.Transport == nil {
		var nt baseTransport
		var err error
		if c.cfg.Network != nil {
			nt, err = c.cfg.Network.listen(mlc.BindAddr, mlc.BindPort)
		} else {
			nt, err = newTransport(mlc.BindAddr, mlc.BindPort, mlc.Logger)
		}
		if err != nil {
			return nil, fmt.Errorf("gossip: listen on %s: %w", c.cfg.BindAddr, err)
		}
		var t memberlist.NodeAwareTransport = nt
		if c.cfg.WrapTransport != nil {
			t = c.cfg.WrapTransport(t)
		}
		mlc.Transport = t
		if plainPackets(mlc) {
			nt.deliverUserMessages(c.enqueue)
		}
		if mlc.BindPort == 0 {
			mlc.BindPort = nt.port()
			mlc.AdvertisePort = mlc.BindPort
		}
	}
	return mlc, nil
}

// baseTransport is a transport this package makes: over sockets
// (netTransport) or in memory (MemNetwork).
type baseTransport interface {
	memberlist.NodeAwareTransport
	deliverUserMessages(deliver func([]byte))
	port() int
}

// plainPackets reports whether memberlist sends packets as they are: no
// encryption, label or compression. Then this node frames and sends its
// own user messages (sendBestEffort) and reads them (deliverUserMessages)
// without memberlist.
func plainPackets(mlc *memberlist.Config) bool {
	return mlc.Keyring == nil && mlc.Label == "" && !mlc.EnableCompression
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
	c.markJoined(n)
	if err != nil {
		return n, fmt.Errorf("gossip: join %v: %w", addrs, err)
	}
	return n, nil
}

// LocalAddr returns this node's gossip address as others see it.
func (c *Cluster) LocalAddr() string { return c.ml.LocalNode().Address() }

// Leave flushes pending deltas reliably to every member (the host should
// have written its sessions disconnected first: node.Drain), tells every
// member over TCP that it is leaving, leaves memberlist gracefully and shuts
// down, all within timeout.
//
// A leave needs no quorum. memberlist's own leave is a broadcast that waits
// to be gossiped; when every other member is leaving too (all gateways
// stopped at once) nobody is left to gossip it to, so it is given only a
// moment, and its timeout is not an error once every member has the
// leave over TCP: their projections are already right, and their memberlist
// sees this node gone at its next probe.
func (c *Cluster) Leave(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c.mu.Lock()
	c.takePublishedLocked(c.leaseNow())
	c.core.Leave()
	rd := c.core.Ready().Clone() // executed while the loop goes on
	c.mu.Unlock()
	sent, failed := c.execute(rd, true)
	if c.wan != nil {
		_ = c.wan.ml.Leave(min(200*time.Millisecond, max(time.Until(deadline)/4, time.Millisecond)))
	}
	err := c.leaveMemberlist(time.Until(deadline))
	// A send that failed matters only if a member that stays missed it: a
	// member that is leaving too (all gateways stopped at once) may have
	// shut down before this node's leave reached it.
	told := failed == 0 || c.stayingMembers() == 0
	if err != nil && told {
		c.log.Info("memberlist's leave broadcast did not go out in time; every member was told over TCP",
			zap.Int("members", sent), zap.Error(err))
		err = nil
	}
	if serr := c.Shutdown(); err == nil {
		err = serr
	}
	return err
}

// leaveGrace is how long memberlist's leave broadcast is given once every
// other member is leaving too.
const leaveGrace = 200 * time.Millisecond

// leaveMemberlist runs memberlist's leave, waiting for its broadcast at
// most wait, or leaveGrace once no member that stays is left to hear it
// (the others announce their own leaves meanwhile). On an early return the
// leave goes on in the background until wait and is then dropped by
// Shutdown.
func (c *Cluster) leaveMemberlist(wait time.Duration) error {
	done := make(chan error, 1)
	go func() {
		// memberlist panics on a leave after shutdown; this goroutine can
		// only get there if it was not scheduled for the whole grace.
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("gossip: memberlist leave: %v", r)
			}
		}()
		done <- c.ml.Leave(max(wait, time.Millisecond))
	}()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	var grace <-chan time.Time
	for {
		select {
		case err := <-done:
			return err
		case <-grace:
			return errors.New("gossip: every other member is leaving too: memberlist's leave broadcast was not waited for")
		case <-poll.C:
			if grace == nil && c.stayingMembers() == 0 {
				grace = time.After(leaveGrace)
			}
		}
	}
}

// stayingMembers counts the live members that have not announced a leave.
func (c *Cluster) stayingMembers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.Staying()
}

// Shutdown stops the cluster without telling anyone (a crash, to peers).
func (c *Cluster) Shutdown() error {
	c.cancel()
	if c.wan != nil {
		_ = c.wan.ml.Shutdown()
	}
	err := c.ml.Shutdown()
	c.wg.Wait()
	return err
}
