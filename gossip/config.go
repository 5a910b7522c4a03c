package gossip

import (
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
	"go.uber.org/zap"

	"github.com/rollcall/rollcall/dissem"
)

// Config configures a Cluster. DefaultConfig documents every default.
type Config struct {
	// Name is this node's name in the cluster; it must be unique and stable
	// across restarts (a restart is a new incarnation of the same name).
	Name string
	// Incarnation distinguishes restarts of the same name; it must grow on
	// every start (NextIncarnation: the clock, or one past the last one
	// kept or learned with Probe) and equal the crdt origin incarnation the
	// node writes as.
	Incarnation uint64

	// BindAddr is the gossip listen address, host:port (UDP and TCP).
	// Default 127.0.0.1:7946.
	BindAddr string
	// AdvertiseAddr is the address other nodes use to reach this one;
	// empty means BindAddr (or memberlist's pick when binding 0.0.0.0).
	AdvertiseAddr string
	// Join lists gossip addresses of existing members to join at start.
	Join []string
	// Profile picks memberlist's timing defaults: "lan" (default),
	// "wan" or "local".
	Profile string
	// ClientAddr is this node's client address, published in its
	// metadata and alive announcements so `locate` can say where a session
	// lives and a draining gateway can send its clients to the others. An
	// unspecified host (0.0.0.0, ::, empty) is replaced at New by the IP
	// memberlist advertises, keeping the port; New logs the choice.
	ClientAddr string

	// Region is this gateway's region: one cluster per region, the
	// regions bridged over a WAN pool (dissem/region.go). Default
	// dissem.DefaultRegion; a cluster whose gateways name no region and
	// no WAN address is a single-region cluster.
	Region string
	// WANBindAddr, if set, makes this gateway bridge-capable: it is also
	// a member of the WAN pool, listening there (host:port, UDP and TCP).
	WANBindAddr string
	// WANAdvertiseAddr is the WAN pool address other bridges use; empty
	// means WANBindAddr.
	WANAdvertiseAddr string
	// WANJoin lists WAN pool addresses of bridges (of any region) to join.
	WANJoin []string
	// WANProfile picks memberlist's timing for the WAN pool. Default "wan".
	WANProfile string
	// WANAliveInterval is how often a region's active bridge announces the
	// region to the others. Default dissem.DefaultWANAliveInterval (1s).
	WANAliveInterval time.Duration
	// WANLease is how long another region stays shown up without being
	// heard from; its sessions are then shown expired (projection only)
	// within dissem.WANCrashBound(WANLease). Default dissem.DefaultWANLease
	// (10s).
	WANLease time.Duration
	// WANBatchDelay is the active bridge's write window: this region's
	// writes within it cross to each other region together. Default
	// dissem.DefaultWANBatchDelay (5ms).
	WANBatchDelay time.Duration
	// WANMemberlist, if set, adjusts the WAN pool's memberlist
	// configuration (tests); WrapWANTransport wraps its transport.
	WANMemberlist    func(*memberlist.Config)
	WrapWANTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport

	// Keyring enables AES-GCM encryption of all gossip (nil: plaintext).
	// The first key encrypts; all decrypt. Rotate with Cluster.KeyOp.
	Keyring *memberlist.Keyring

	// LeaseTimeout is how long a peer stays up in this node's projection
	// without being heard from (deltas or alive announcements) before its
	// sessions are shown expired, while the cluster has at most
	// EagerThreshold members. It trades crash detection against the stalls
	// of a peer it rides out: a peer stalled for up to
	// dissem.PauseTolerance(LeaseTimeout, AliveInterval) is never shown
	// down, and a dead one is shown down within
	// dissem.CrashBound(LeaseTimeout) of its death. This node's own stalls
	// (over LeaseStallThreshold) are taken off its lease clock. Default
	// dissem.DefaultLeaseTimeout (3.5s: 2s pauses ridden out, crashes shown
	// within 3.675s).
	LeaseTimeout time.Duration
	// AliveInterval is how often a node announces itself (lease refresh and
	// watermark for loss detection): in eager mode one small packet to each
	// member. Detection of a lost delta takes about two intervals. Zero:
	// dissem.AliveIntervalFor(LeaseTimeout). Default 500ms (30 packets a
	// second a node at 16 members, 126 at 64).
	AliveInterval time.Duration
	// BatchDelay is the write window (dissem.Config.BatchDelay), Nagle-style:
	// a write with no flush in the last BatchDelay goes out at once, and the
	// writes within BatchDelay of a flush wait for that window's end and go
	// out together, sharing packets. Zero (or negative): no window, every
	// write goes out at once. DefaultConfig sets 500µs (dissem's default);
	// Validate leaves a zero as it is, so a Config not from DefaultConfig
	// has no window.
	BatchDelay time.Duration
	// Compress LZW-compresses memberlist's messages (memberlist's
	// EnableCompression). Default false: a delta is about 70 bytes a copy,
	// which LZW does not shrink, so memberlist compressed it only to send it
	// uncompressed; that was a third of the CPU a status change costs the
	// cluster (docs/performance.md). Large messages (a full state sent to a
	// joining member) are smaller compressed, at that CPU cost.
	Compress bool
	// EagerThreshold is the cluster size up to which deltas go straight to
	// every member (N-1 copies a change, one hop); beyond it, epidemic
	// gossip through a bounded piggyback queue. Default 64.
	EagerThreshold int
	// Relay is how deltas travel beyond EagerThreshold: dissem.RelayEpidemic
	// (memberlist's piggyback queue) or dissem.RelayTree (a relay tree
	// over the members alive: about one copy per member, two hops).
	// Default dissem.RelayTree.
	Relay dissem.Relay
	// PacketBudget is the payload bytes of one best-effort packet.
	// Default dissem.DefaultPacketBudget (1300).
	PacketBudget int
	// MaxQueue bounds the epidemic broadcast queue (in messages); past it
	// the oldest, most-transmitted are pruned and anti-entropy repairs.
	// Default 4096.
	MaxQueue int
	// RouteTimeout bounds one routed message's round trip. Default 2s.
	RouteTimeout time.Duration
	// ReconnectInterval is how often this node tries to rejoin members
	// memberlist declared dead (not those that left): after a partition
	// heals, each side would otherwise keep the other dead forever.
	// Default 10s.
	ReconnectInterval time.Duration
	// ReconnectTimeout is how long a dead member is retried before it is
	// given up on. Default 24h.
	ReconnectTimeout time.Duration
	// InboundQueue bounds received messages waiting to be handled; past it
	// messages are dropped and counted (anti-entropy repairs). Default 8192.
	InboundQueue int
	// SyncPageBytes is about how many bytes of records one page of an
	// anti-entropy answer carries: a joining or lagging member is sent
	// what it lacks a page at a time, each page asked for once the last is
	// applied, so a transfer holds about a page of memory on each side.
	// Default dissem.DefaultSyncPageBytes (1 MiB); at most
	// dissem.MaxSyncPageBytes.
	SyncPageBytes int

	// MaxIncarnationSkew is how far past this node's clock a peer's
	// incarnation (a boot time in Unix nanoseconds) or account clock stamp
	// may be; a value beyond it is refused and counted (validate.go).
	// Default DefaultMaxIncarnationSkew (1h).
	MaxIncarnationSkew time.Duration

	// Memberlist, if set, adjusts the memberlist configuration after the
	// profile defaults are applied (tests shorten timers here).
	Memberlist func(*memberlist.Config)
	// Network, if set, carries this node's packets and streams in memory,
	// to the other nodes of this process on the same network, instead of
	// over sockets: measurements of many nodes in one process
	// (MemNetwork).
	Network *MemNetwork
	// WrapTransport, if set, wraps the network transport (fault injection).
	WrapTransport func(memberlist.NodeAwareTransport) memberlist.NodeAwareTransport

	// Logger receives the cluster's logs; default a no-op logger.
	Logger *zap.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time

	// elapsed, if set (tests), replaces the real monotonic time since start
	// that stall detection reads (see Cluster.leaseNow).
	elapsed func() time.Duration
}

// LeaseStallThreshold is the smallest stall of this node's own (a run-loop
// wake-up later than due by more than it) that is taken off the lease
// clock, for leases of 1s and more (a quarter of a shorter lease). A
// shorter stall counts against the lease's margin (dissem.LeaseMargin).
const LeaseStallThreshold = 250 * time.Millisecond

// leaseStallThreshold is the stall threshold of a lease of ttl.
func leaseStallThreshold(ttl time.Duration) time.Duration { return min(ttl/4, LeaseStallThreshold) }

// DefaultConfig returns a Config with every default filled in, except Name.
// The protocol's own defaults are dissem's.
func DefaultConfig() Config {
	p := dissem.DefaultConfig()
	return Config{
		BindAddr:       "127.0.0.1:7946",
		Profile:        "lan",
		LeaseTimeout:   p.LeaseTimeout,
		AliveInterval:  p.AliveInterval,
		BatchDelay:     p.BatchDelay,
		EagerThreshold: p.EagerThreshold,
		PacketBudget:   p.PacketBudget,
		MaxQueue:       dissem.DefaultMaxQueue,
		RouteTimeout:   2 * time.Second,
		InboundQueue:   8192,
		SyncPageBytes:  dissem.DefaultSyncPageBytes,

		MaxIncarnationSkew: DefaultMaxIncarnationSkew,

		ReconnectInterval: p.ReconnectInterval,
		ReconnectTimeout:  p.ReconnectTimeout,

		Region:           dissem.DefaultRegion,
		WANProfile:       "wan",
		WANAliveInterval: dissem.DefaultWANAliveInterval,
		WANLease:         dissem.DefaultWANLease,
		WANBatchDelay:    dissem.DefaultWANBatchDelay,
	}
}

// Validate fills zero fields with defaults and rejects contradictions.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if c.Name == "" {
		return errors.New("gossip: Config.Name is required")
	}
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	if c.Profile == "" {
		c.Profile = d.Profile
	}
	if c.Region == "" {
		c.Region = d.Region
	}
	if c.WANProfile == "" {
		c.WANProfile = d.WANProfile
	}
	if _, err := profileConfig(c.WANProfile); err != nil {
		return err
	}
	if c.WANBindAddr == "" && len(c.WANJoin) > 0 {
		return errors.New("gossip: WANJoin needs WANBindAddr: only a bridge-capable gateway joins the WAN pool")
	}
	if _, err := profileConfig(c.Profile); err != nil {
		return err
	}
	setDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	if c.LeaseTimeout < 0 {
		return fmt.Errorf("gossip: LeaseTimeout %v must not be negative", c.LeaseTimeout)
	}
	setDur(&c.LeaseTimeout, d.LeaseTimeout)
	setDur(&c.AliveInterval, dissem.AliveIntervalFor(c.LeaseTimeout))
	setDur(&c.RouteTimeout, d.RouteTimeout)
	setDur(&c.ReconnectInterval, d.ReconnectInterval)
	setDur(&c.ReconnectTimeout, d.ReconnectTimeout)
	setDur(&c.MaxIncarnationSkew, d.MaxIncarnationSkew)
	setDur(&c.WANAliveInterval, d.WANAliveInterval)
	setDur(&c.WANLease, d.WANLease)
	if c.WANBatchDelay == 0 {
		c.WANBatchDelay = d.WANBatchDelay
	}
	if c.WANAliveInterval < 0 || c.WANLease <= 2*c.WANAliveInterval {
		return fmt.Errorf("gossip: WANLease %v must be over two WANAliveIntervals (%v)", c.WANLease, c.WANAliveInterval)
	}
	if c.MaxIncarnationSkew < 0 {
		return fmt.Errorf("gossip: MaxIncarnationSkew %v must not be negative", c.MaxIncarnationSkew)
	}
	setInt := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	setInt(&c.EagerThreshold, d.EagerThreshold)
	setInt(&c.PacketBudget, d.PacketBudget)
	setInt(&c.MaxQueue, d.MaxQueue)
	setInt(&c.InboundQueue, d.InboundQueue)
	setInt(&c.SyncPageBytes, d.SyncPageBytes)
	if c.SyncPageBytes < 0 || c.SyncPageBytes > dissem.MaxSyncPageBytes {
		return fmt.Errorf("gossip: SyncPageBytes %d out of range 1..%d", c.SyncPageBytes, dissem.MaxSyncPageBytes)
	}
	if c.AliveInterval*2 >= c.LeaseTimeout {
		return fmt.Errorf("gossip: AliveInterval %v must be well under LeaseTimeout %v", c.AliveInterval, c.LeaseTimeout)
	}
	if c.PacketBudget < 256 || c.PacketBudget > 60000 {
		return fmt.Errorf("gossip: PacketBudget %d out of range 256..60000", c.PacketBudget)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// profileConfig returns memberlist's defaults for a profile name.
func profileConfig(profile string) (*memberlist.Config, error) {
	switch profile {
	case "lan":
		return memberlist.DefaultLANConfig(), nil
	case "wan":
		return memberlist.DefaultWANConfig(), nil
	case "local":
		return memberlist.DefaultLocalConfig(), nil
	}
	return nil, fmt.Errorf("gossip: unknown profile %q (want lan, wan or local)", profile)
}
