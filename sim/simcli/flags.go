package simcli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rollcall/rollcall/sim"
)

// Options is a parsed `rollcall sim` command line: the scenario plus what to
// do with the result.
type Options struct {
	Config sim.Config
	// Format is table, json or csv.
	Format string
	// Plot, if set, is an .svg or .png file to draw.
	Plot string
	// Curves, if set, is an .svg or .png file for every run's convergence
	// curve (useful with a sweep).
	Curves string
	// CPUProfile, if set, is a file for a CPU profile of the runs, for work
	// on the simulator's own speed.
	CPUProfile string
	// Sweep is the parameter swept (a flag name) and its values; empty for
	// a single run.
	SweepParam  string
	SweepValues []string
	// args are the flags given, for re-parsing one sweep value at a time.
	args []string
	// Regions, when 2 or more, runs the multi-region simulation
	// (sim.RunRegions) with these settings instead.
	Regions sim.RegionConfig
}

// Usage is the text of `rollcall sim --help` before the flag list.
const Usage = `usage: rollcall sim [flags]
       rollcall sim calibrate [flags]

Simulates a Rollcall cluster in virtual time: the real crdt merge code on
every node, gossip's dissemination decisions (eager or epidemic, batching,
packing, alive announcements and gap pulls, push/pull anti-entropy, leases)
and a model of memberlist (probes, suspicion, piggyback queue). It reports
how fast session changes reach every node, what that costs, and how long
failures take to show. The same flags and seed always give the same output.

Client actions (--changes of them, or --rate per second) happen at random
times in the first --window of the run (default half of --duration); the
rest lets them settle.

flags (durations take Go syntax: 500ms, 2s, 1m):
`

// NewFlagSet returns the flag set of `rollcall sim`, writing into o.
func NewFlagSet(o *Options, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rollcall sim", flag.ContinueOnError)
	fs.SetOutput(out)
	c := &o.Config
	*c = sim.DefaultConfig()
	o.Format = "table"
	fs.IntVar(&c.Nodes, "nodes", c.Nodes, "number of gateway nodes, a count (2..1048576)")
	fs.StringVar(&c.Profile, "profile", c.Profile, "memberlist timing profile: lan, wan or local (sets every memberlist default below)")
	fs.DurationVar(&c.GossipInterval, "interval", 0, "memberlist gossip interval, a duration (default: the profile's, lan 200ms)")
	fs.IntVar(&c.GossipNodes, "fanout", 0, "members each gossip tick sends to, a count (default: the profile's, lan 3)")
	fs.IntVar(&c.RetransmitMult, "retransmit-mult", 0, "retransmit multiplier: each node sends a broadcast mult*ceil(log10(n+1)) times (default: the profile's, lan 4)")
	fs.DurationVar(&c.PushPullInterval, "pushpull", 0, "memberlist push/pull interval before scaling with cluster size, a duration (default: the profile's, lan 30s)")
	fs.DurationVar(&c.ProbeInterval, "probe-interval", 0, "failure-detection probe interval, a duration (default: the profile's, lan 1s)")
	fs.DurationVar(&c.ProbeTimeout, "probe-timeout", 0, "probe ack timeout, a duration (default: the profile's, lan 500ms)")
	fs.IntVar(&c.SuspicionMult, "suspicion-mult", 0, "suspicion timeout multiplier (default: the profile's, lan 4)")
	fs.IntVar(&c.SuspicionMaxTimeoutMult, "suspicion-max-mult", 0, "maximum suspicion timeout as a multiple of the minimum (default: the profile's, 6)")
	fs.IntVar(&c.IndirectChecks, "indirect-checks", 0, "members asked to ping a silent node (default: the profile's, lan 3)")
	fs.DurationVar(&c.LeaseTimeout, "lease", 0, "Rollcall peer lease: a peer not heard from this long is shown failed, a duration (default 3.5s)")
	fs.DurationVar(&c.AliveInterval, "alive", 0, "Rollcall alive announcement interval, a duration (default 500ms)")
	fs.DurationVar(&c.BatchDelay, "batch-delay", 0, "the owner's write window: a write with no flush in the last window goes out at once, writes within one wait for its end and share packets, a duration (default 500µs)")
	fs.Var(&c.Relay, "relay", "how deltas travel beyond the eager threshold: tree (a relay tree over the members) or epidemic (memberlist's piggyback gossip), a name")
	fs.IntVar(&c.EagerThreshold, "eager-threshold", 0, "largest cluster that sends deltas straight to every member; larger ones relay them (--relay), a node count (default 64)")
	fs.Float64Var(&c.Loss, "loss", 0, "probability that a UDP packet is lost, a fraction in [0,1) (0.05 = 5%)")
	fs.Func("latency", "one-way network delay: fixed (1ms), uniform (1ms..5ms), normal:MEAN,SD (normal:2ms,500us) or lognormal:MEDIAN,SHAPE (lognormal:2ms,0.5) (default 1ms)", func(s string) error {
		l, err := sim.ParseLatency(s)
		c.Latency = l
		return err
	})
	// --changes defaults to 0 so that --rate alone is not "both set";
	// Validate fills the default count when neither is given.
	c.Changes = 0
	fs.IntVar(&c.Changes, "changes", 0, fmt.Sprintf("client actions (connects, status changes, disconnects, silent failures) over the load window (the first half of the run), a count (default %d; not with --rate)", sim.DefaultConfig().Changes))
	fs.Float64Var(&c.Rate, "rate", 0, "client actions per second over the load window (the first half of the run, or --window), cluster-wide, instead of --changes: round(rate × window) actions, a count per second")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "simulated time, a duration")
	fs.DurationVar(&c.Window, "window", 0, "time over which the client actions are spread, a duration (default: half the duration)")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "session timeout: a silent client's gateway expires its session this long after its last request, a duration")
	fs.DurationVar(&c.Heartbeat, "heartbeat", sim.DefaultHeartbeat, "client heartbeat interval, a duration")
	fs.Func("partition", "a network partition, repeatable: AT[..HEAL]:GROUP|GROUP..., groups of node indexes and ranges, or 'half'; e.g. 10s..30s:0-15|16-31 (nodes in no group form one more group)", func(s string) error {
		p, err := sim.ParsePartition(s, &c.Nodes)
		if err == nil {
			c.Partitions = append(c.Partitions, p)
		}
		return err
	})
	fs.Func("crash", "a silent node crash, repeatable: NODE@AT[..RESTART], e.g. 3@10s or 3@10s..40s (restart as a new incarnation)", func(s string) error {
		cr, err := sim.ParseCrash(s)
		if err == nil {
			c.Crashes = append(c.Crashes, cr)
		}
		return err
	})
	fs.Func("churn", "relative weights of client actions: connect=W,status=W,disconnect=W,fail=W (default connect=4,status=4,disconnect=1,fail=1; fail is a silent failure)", func(s string) error {
		ch, err := sim.ParseChurn(s)
		c.Churn = ch
		return err
	})
	fs.IntVar(&o.Regions.Regions, "regions", 0, "simulate this many regions (2 or more), the nodes split evenly, bridged over a WAN pool as --region and --wan-addr make them: reports the cross-region reach and the WAN copies per change (no --partition, --crash, --loss, --sweep, plots or csv)")
	fs.IntVar(&o.Regions.Bridges, "bridges", 2, "with --regions: bridge-capable gateways per region, a count")
	fs.DurationVar(&o.Regions.RegionLatency, "region-latency", 80*time.Millisecond, "with --regions: one-way delay between two regions, a duration")
	fs.DurationVar(&o.Regions.CrashBridgeAt, "crash-bridge", 0, "with --regions: kill the first region's active bridge at this time, a duration (0: none)")
	fs.DurationVar(&o.Regions.WANLease, "wan-lease", 0, "with --regions: the WAN lease, a duration (default 10s)")
	fs.DurationVar(&o.Regions.WANAlive, "wan-alive", 0, "with --regions: the active bridge's announcement interval, a duration (default 1s)")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed: the same flags and seed give byte-identical output")
	fs.StringVar(&o.Format, "format", o.Format, "output format: table, json or csv")
	fs.StringVar(&o.Plot, "plot", "", "also draw FILE (.svg or .png): converged fraction against time since the change; with --sweep, p99 convergence against the swept value")
	fs.StringVar(&o.Curves, "curves", "", "also draw FILE (.svg or .png): every run's converged fraction against time, one line per run (for a sweep)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the simulation to FILE (go tool pprof), for work on the simulator's own speed")
	fs.Func("sweep", "run once per value of one flag and print one row each: PARAM=V1,V2,... e.g. nodes=10,100,1000 or loss=0,0.05,0.1", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" || v == "" {
			return errors.New("want PARAM=V1,V2 (comma-separated values)")
		}
		if k == "sweep" || k == "format" || k == "plot" || k == "curves" || k == "cpuprofile" {
			return fmt.Errorf("cannot sweep %q", k)
		}
		o.SweepParam, o.SweepValues = strings.TrimPrefix(k, "--"), strings.Split(v, ",")
		return nil
	})
	return fs
}

// ParseArgs parses a `rollcall sim` command line. Help goes to out.
func ParseArgs(args []string, out io.Writer) (*Options, error) {
	o := &Options{}
	fs := NewFlagSet(o, out)
	fs.Usage = func() {
		fmt.Fprint(out, Usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch o.Format {
	case "table", "json", "csv":
	default:
		return nil, fmt.Errorf("unknown format %q (want table, json or csv)", o.Format)
	}
	if o.SweepParam != "" && fs.Lookup(o.SweepParam) == nil {
		return nil, fmt.Errorf("cannot sweep %q: no such flag", o.SweepParam)
	}
	o.args = args
	if o.Regions.Regions != 0 {
		if o.SweepParam != "" || o.Plot != "" || o.Curves != "" || o.Format == "csv" {
			return nil, errors.New("--regions takes no --sweep, --plot, --curves or csv output")
		}
		o.Regions.Config = o.Config
		if err := o.Regions.Validate(); err != nil {
			return nil, err
		}
		return o, nil
	}
	if o.SweepParam == "" {
		if err := o.Config.Validate(); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Runs returns the configurations to run: one, or one per sweep value.
func (o *Options) Runs() ([]sim.Config, error) {
	if o.SweepParam == "" {
		return []sim.Config{o.Config}, nil
	}
	out := make([]sim.Config, 0, len(o.SweepValues))
	for _, v := range o.SweepValues {
		var p Options
		fs := NewFlagSet(&p, io.Discard)
		args := append(append([]string(nil), o.args...), "--"+o.SweepParam+"="+strings.TrimSpace(v))
		if err := fs.Parse(args); err != nil {
			return nil, fmt.Errorf("sweep %s=%s: %w", o.SweepParam, v, err)
		}
		if err := p.Config.Validate(); err != nil {
			return nil, fmt.Errorf("sweep %s=%s: %w", o.SweepParam, v, err)
		}
		out = append(out, p.Config)
	}
	return out, nil
}
