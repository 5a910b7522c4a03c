package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/rollcall/rollcall/dissem"
)

// Config is one simulated scenario. DefaultConfig documents every default;
// Validate fills zero fields from the memberlist profile and gossip's
// DefaultConfig, exactly as a real node would be configured.
type Config struct {
	// Nodes is the number of gateway nodes. Default 32.
	Nodes int
	// Profile picks memberlist's timing defaults: lan (default), wan or local.
	Profile string

	// Memberlist overrides; zero keeps the profile's value.

	// GossipInterval is memberlist's gossip tick (--interval).
	GossipInterval time.Duration
	// GossipNodes is how many random members each gossip tick sends to
	// (--fanout).
	GossipNodes int
	// RetransmitMult: a broadcast is sent RetransmitMult*ceil(log10(n+1))
	// times by each node that queues it.
	RetransmitMult int
	// PushPullInterval is the full state exchange interval before scaling
	// by dissem.PushPullScale.
	PushPullInterval time.Duration
	// ProbeInterval and ProbeTimeout drive failure detection.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// IndirectChecks is the number of members asked to ping a silent node.
	IndirectChecks int
	// SuspicionMult scales the minimum suspicion timeout
	// (dissem.SuspicionTimeout); SuspicionMaxTimeoutMult the maximum.
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	// GossipToTheDeadTime is how long dead nodes still receive gossip.
	GossipToTheDeadTime time.Duration
	// UDPBufferSize is memberlist's packet size limit. Default 1400.
	UDPBufferSize int
	// DisableTCPPings turns off the TCP fallback probe.
	DisableTCPPings bool

	// Rollcall protocol settings (dissem.Config); zero keeps dissem's default.
	LeaseTimeout   time.Duration
	AliveInterval  time.Duration
	BatchDelay     time.Duration
	EagerThreshold int
	// Relay is how writes travel beyond EagerThreshold (dissem.Config.Relay):
	// a relay tree (the default) or memberlist's piggyback gossip.
	Relay        dissem.Relay
	PacketBudget int
	MaxQueue     int
	// ReconnectInterval is how often a node tries to rejoin members
	// memberlist declared dead; ReconnectTimeout how long it keeps trying.
	ReconnectInterval time.Duration
	ReconnectTimeout  time.Duration

	// Network.

	// Latency is the one-way packet delay distribution. Default fixed 1ms.
	Latency Latency
	// Loss is the probability in [0,1) that a UDP packet is lost. TCP
	// streams are not lost but a lost segment costs a retransmission
	// timeout.
	Loss float64

	// Host.

	// WriteDelays, if set, are delays of single writes measured on real
	// hosts (sim/calibrate measures them on its in-process cluster), and
	// they time each owner's flush and eager fan-out in place of Latency:
	// the first write of each batch draws one measured write and reaches
	// the core its Flush later (then flushes at once, or at the end of an
	// open write window), and the fan-out's packets get its Hops, one each in a
	// random order (drawn again from the same write past its count). A
	// write's delays stay together because on a shared host they are not
	// independent: a stall of the host (its cores taken by other processes,
	// a GC cycle) delays most receivers of a write at once, while an
	// independent draw per packet would spread the same stalls over every
	// write and make each as slow as its slowest receiver's stall. Other
	// packets (epidemic seeds and relays, alive announcements, probes,
	// anti-entropy) keep Latency. Default none: a gateway with a core to
	// itself, whose packets each take Latency.
	WriteDelays []WriteDelay

	// Workload.

	// Changes is the number of client actions (connects, status changes,
	// clean disconnects, silent failures) over the load window, the first
	// half of Duration. Silent failures cause a later expiry write by the
	// owner. Default 100, when Rate is not set either.
	Changes int
	// Rate, when positive, gives the client actions as a rate instead: per
	// second of simulated time, cluster-wide, spread over Window (by
	// default the first half of Duration, so the rest lets them settle),
	// round(Rate × Window in seconds) of them. Changes must then be left 0
	// (DefaultConfig sets it: clear it); setting both is an error.
	Rate float64
	// Duration is the simulated time. Default 60s.
	Duration time.Duration
	// Window is the time over which the client actions are spread, from
	// the start. Default Duration/2, so the rest lets them settle.
	Window time.Duration
	// Timeout is the session timeout: a silent client's session is expired
	// by its gateway this long after its last request (node.Config.Timeout).
	// Default 15s.
	Timeout time.Duration
	// Heartbeat is the client heartbeat interval. Default 5s.
	Heartbeat time.Duration
	// SweepInterval is the gateway's expiry sweep period. Default
	// min(250ms, Timeout/10), as node/ does.
	SweepInterval time.Duration
	// Churn is the mix of client actions.
	Churn Churn
	// Partitions and Crashes are scheduled faults.
	Partitions []Partition
	Crashes    []Crash

	// Seed makes the run repeatable: the same Config and Seed give the same
	// Result, byte for byte.
	Seed uint64

	// Check, when set, verifies the simulator's internal indexes against the
	// real code after every event (slow: tests only).
	Check bool
	// Progress, if set, is called now and then with the fraction of
	// simulated time done. It must not retain or modify anything.
	Progress func(done float64)
}

// Churn weights the kinds of client action. Zero weights everywhere mean
// the default 4:4:1:1.
type Churn struct {
	Connect, Status, Disconnect, Fail float64
}

// Partition splits the cluster into groups at At and heals at Heal (zero:
// never). Groups lists node indexes; nodes in no group form one more group.
type Partition struct {
	At, Heal time.Duration
	Groups   [][]int
	// half, when set, makes Validate split the nodes into two halves.
	half *int
}

// WriteDelay is how one write was delayed on a real host: Flush from the
// write (alone: no write window open) to the owner's first packet of it, and Hops from that
// packet to each receiver's replica change (the receiver's place in the send
// loop, the wire, the receive path and the apply).
type WriteDelay struct {
	Flush time.Duration
	Hops  []time.Duration
}

// Crash stops node Node silently at At; if Restart is non-zero it comes back
// at Restart as a new incarnation with an empty replica.
type Crash struct {
	Node        int
	At, Restart time.Duration
}

// DefaultConfig returns the default scenario: 32 nodes, the lan profile, 1ms
// latency, no loss, 100 client actions over 60s.
func DefaultConfig() Config {
	return Config{
		Nodes:    32,
		Profile:  "lan",
		Latency:  Latency{Kind: LatencyFixed, Min: time.Millisecond},
		Changes:  100,
		Duration: 60 * time.Second,
		Timeout:  15 * time.Second,
		Seed:     1,
	}
}

// Defaults for the client model, matching node/'s defaults.
const (
	DefaultHeartbeat = 5 * time.Second
	DefaultTimeout   = 15 * time.Second
)

// MaxNodes bounds Config.Nodes.
const MaxNodes = 1 << 20

// Validate fills zero fields with defaults and rejects contradictions.
func (c *Config) Validate() error {
	d := DefaultConfig()
	if c.Nodes == 0 {
		c.Nodes = d.Nodes
	}
	if c.Nodes < 2 || c.Nodes > MaxNodes {
		return fmt.Errorf("sim: nodes %d out of range 2..%d", c.Nodes, MaxNodes)
	}
	if c.Profile == "" {
		c.Profile = d.Profile
	}
	var ml *memberlist.Config
	switch c.Profile {
	case "lan":
		ml = memberlist.DefaultLANConfig()
	case "wan":
		ml = memberlist.DefaultWANConfig()
	case "local":
		ml = memberlist.DefaultLocalConfig()
	default:
		return fmt.Errorf("sim: unknown profile %q (want lan, wan or local)", c.Profile)
	}
	dur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	num := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	dur(&c.GossipInterval, ml.GossipInterval)
	num(&c.GossipNodes, ml.GossipNodes)
	num(&c.RetransmitMult, ml.RetransmitMult)
	dur(&c.PushPullInterval, ml.PushPullInterval)
	dur(&c.ProbeInterval, ml.ProbeInterval)
	dur(&c.ProbeTimeout, ml.ProbeTimeout)
	num(&c.IndirectChecks, ml.IndirectChecks)
	num(&c.SuspicionMult, ml.SuspicionMult)
	num(&c.SuspicionMaxTimeoutMult, ml.SuspicionMaxTimeoutMult)
	dur(&c.GossipToTheDeadTime, ml.GossipToTheDeadTime)
	num(&c.UDPBufferSize, ml.UDPBufferSize)
	c.DisableTCPPings = c.DisableTCPPings || ml.DisableTcpPings

	g := dissem.DefaultConfig()
	dur(&c.LeaseTimeout, g.LeaseTimeout)
	dur(&c.AliveInterval, g.AliveInterval)
	dur(&c.BatchDelay, g.BatchDelay)
	num(&c.EagerThreshold, g.EagerThreshold)
	num(&c.PacketBudget, g.PacketBudget)
	num(&c.MaxQueue, dissem.DefaultMaxQueue)
	dur(&c.ReconnectInterval, g.ReconnectInterval)
	dur(&c.ReconnectTimeout, g.ReconnectTimeout)

	if c.Latency.Kind == LatencyUnset {
		c.Latency = d.Latency
	}
	for i, w := range c.WriteDelays {
		if w.Flush < 0 || slices.ContainsFunc(w.Hops, func(d time.Duration) bool { return d < 0 }) {
			return fmt.Errorf("sim: write delay %d: negative delay", i)
		}
	}
	if err := c.Latency.Validate(); err != nil {
		return err
	}
	if c.Changes == 0 && c.Rate == 0 {
		c.Changes = d.Changes
	}
	dur(&c.Duration, d.Duration)
	dur(&c.Window, c.Duration/2)
	dur(&c.Timeout, d.Timeout)
	dur(&c.Heartbeat, DefaultHeartbeat)
	if c.SweepInterval == 0 {
		c.SweepInterval = min(250*time.Millisecond, max(c.Timeout/10, time.Millisecond))
	}
	if c.Churn == (Churn{}) {
		c.Churn = Churn{Connect: 4, Status: 4, Disconnect: 1, Fail: 1}
	}

	var errs []error
	if c.Loss < 0 || c.Loss >= 1 {
		errs = append(errs, fmt.Errorf("loss %v out of range [0,1)", c.Loss))
	}
	if c.Window > c.Duration {
		errs = append(errs, fmt.Errorf("window %v exceeds the duration %v", c.Window, c.Duration))
	}
	if c.Changes < 0 {
		errs = append(errs, fmt.Errorf("changes %d is negative", c.Changes))
	}
	switch {
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		errs = append(errs, fmt.Errorf("rate %v must be a finite number of client actions per second, not negative", c.Rate))
	case c.Rate > 0 && c.Changes != 0:
		errs = append(errs, fmt.Errorf("changes (%d) and rate (%v/s) are both set; give one", c.Changes, c.Rate))
	case c.Rate > 0:
		switch n := c.Rate * c.Window.Seconds(); {
		case math.Round(n) < 1:
			errs = append(errs, fmt.Errorf("rate %v/s over the window %v gives no client actions", c.Rate, c.Window))
		case math.Round(n) > math.MaxInt32:
			errs = append(errs, fmt.Errorf("rate %v/s over the window %v gives %.0f client actions, more than %d", c.Rate, c.Window, n, math.MaxInt32))
		}
	}
	for name, v := range map[string]time.Duration{
		"interval": c.GossipInterval, "push/pull interval": c.PushPullInterval,
		"probe interval": c.ProbeInterval, "probe timeout": c.ProbeTimeout, "duration": c.Duration,
		"timeout": c.Timeout, "heartbeat": c.Heartbeat, "lease timeout": c.LeaseTimeout,
		"alive interval": c.AliveInterval, "batch delay": c.BatchDelay, "sweep interval": c.SweepInterval,
	} {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, v))
		}
	}
	if c.GossipNodes < 1 || c.RetransmitMult < 1 || c.IndirectChecks < 0 || c.SuspicionMult < 1 ||
		c.SuspicionMaxTimeoutMult < 1 || c.EagerThreshold < 1 || c.MaxQueue < 1 {
		errs = append(errs, errors.New("fanout, retransmit and suspicion multipliers, eager threshold and queue bound must be positive"))
	}
	if c.ProbeTimeout > c.ProbeInterval {
		errs = append(errs, fmt.Errorf("probe timeout %v exceeds probe interval %v", c.ProbeTimeout, c.ProbeInterval))
	}
	if c.Timeout <= c.Heartbeat {
		errs = append(errs, fmt.Errorf("timeout %v must exceed the client heartbeat %v", c.Timeout, c.Heartbeat))
	}
	if c.AliveInterval*2 >= c.LeaseTimeout {
		errs = append(errs, fmt.Errorf("alive interval %v must be well under the lease timeout %v", c.AliveInterval, c.LeaseTimeout))
	}
	if c.PacketBudget < 256 || c.PacketBudget > 60000 {
		errs = append(errs, fmt.Errorf("packet budget %d out of range 256..60000", c.PacketBudget))
	}
	if c.Churn.Connect < 0 || c.Churn.Status < 0 || c.Churn.Disconnect < 0 || c.Churn.Fail < 0 || c.Churn.Connect == 0 {
		errs = append(errs, errors.New("churn weights must not be negative and connect must be positive"))
	}
	for i := range c.Partitions {
		if c.Partitions[i].half != nil {
			half := make([]int, c.Nodes/2)
			for j := range half {
				half[j] = j
			}
			c.Partitions[i].Groups, c.Partitions[i].half = [][]int{half}, nil
		}
	}
	for _, p := range c.Partitions {
		if p.At < 0 || (p.Heal != 0 && p.Heal <= p.At) {
			errs = append(errs, fmt.Errorf("partition at %v heal %v: heal must follow the split", p.At, p.Heal))
		}
		for _, g := range p.Groups {
			for _, n := range g {
				if n < 0 || n >= c.Nodes {
					errs = append(errs, fmt.Errorf("partition names node %d of %d", n, c.Nodes))
				}
			}
		}
	}
	for _, cr := range c.Crashes {
		if cr.Node < 0 || cr.Node >= c.Nodes {
			errs = append(errs, fmt.Errorf("crash names node %d of %d", cr.Node, c.Nodes))
		}
		if cr.At < 0 || (cr.Restart != 0 && cr.Restart <= cr.At) {
			errs = append(errs, fmt.Errorf("crash of node %d at %v restart %v: restart must follow the crash", cr.Node, cr.At, cr.Restart))
		}
	}
	return errors.Join(errs...)
}

// actions is the number of client actions of a validated Config: Changes,
// or Rate over Window.
func (c *Config) actions() int {
	if c.Rate > 0 {
		return int(math.Round(c.Rate * c.Window.Seconds()))
	}
	return c.Changes
}
