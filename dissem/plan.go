package dissem

import (
	"fmt"
	"math"
	"time"

	"github.com/rollcall/rollcall/crdt"
)

// This file holds the dissemination decisions as pure functions and small
// state machines with no I/O and no clock: the real Cluster and the simulator
// (sim/) call the very same code.

// Mode is how a node disseminates its own deltas.
type Mode uint8

const (
	// ModeEager sends each batch straight to every other live member: one
	// copy per member per change, reaching all in one network hop.
	ModeEager Mode = iota
	// ModeEpidemic hands batches to a bounded piggyback queue that
	// memberlist gossips to GossipNodes random members per interval, each
	// receiver re-queueing what was new to it.
	ModeEpidemic
	// ModeTree sends each batch to the owner's children in a relay tree
	// over the members alive (TreeFanout, TreeChildren), each of which
	// passes what was new to it on to its own children: about one copy
	// per member per change, in two hops. Announcements ride the
	// piggyback queue, as in epidemic mode: a copy lost on the way shows
	// as a gap against them, which the receiver pulls, and leases are not
	// enforced (memberlist's failure detector marks gateways down).
	ModeTree
)

func (m Mode) String() string {
	switch m {
	case ModeEager:
		return "eager"
	case ModeTree:
		return "tree"
	}
	return "epidemic"
}

// Relay is how writes travel beyond the eager threshold.
type Relay uint8

const (
	// RelayTree: a relay tree over the members (ModeTree), the default.
	RelayTree Relay = iota
	// RelayEpidemic: memberlist's piggyback gossip (ModeEpidemic).
	RelayEpidemic
)

func (r Relay) String() string {
	if r == RelayTree {
		return "tree"
	}
	return "epidemic"
}

// Set parses a Relay's name into r: it makes *Relay a flag.Value.
func (r *Relay) Set(s string) error {
	v, err := ParseRelay(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// ParseRelay parses a Relay's name: "epidemic" or "tree".
func ParseRelay(s string) (Relay, error) {
	switch s {
	case "epidemic":
		return RelayEpidemic, nil
	case "tree":
		return RelayTree, nil
	}
	return 0, fmt.Errorf("dissem: relay %q: want epidemic or tree", s)
}

// ChooseMode picks the dissemination mode for a cluster of members live
// nodes (self included): eager up to threshold, epidemic beyond.
func ChooseMode(members, threshold int) Mode {
	if members <= threshold {
		return ModeEager
	}
	return ModeEpidemic
}

// LeasesEnforced reports whether peer leases may mark a gateway down in a
// mode. In eager mode every owner announces itself straight to every member
// each AliveInterval, so a lease that passes means the owner went silent. In
// epidemic mode announcements reach only a few members per round and are
// not relayed, so a lease would pass for live owners (the simulator measured
// 9% of peers at 100 nodes, 80% at 1,000); there, and in tree mode, whose
// announcements ride the same queue, memberlist's failure detector alone
// marks gateways down.
func LeasesEnforced(m Mode) bool { return m == ModeEager }

// VerdictOverrule is how recently a peer must have been heard directly for
// this node to overrule memberlist's verdict that the peer is dead (Leases.Fail):
// two alive intervals, the longest a live owner goes unheard in eager mode.
// memberlist's verdict ends a suspicion that began seconds earlier, and can
// arrive after a paused or partitioned peer is back; the peer's own
// announcements since are the newer truth, and its lease still expires if it
// falls silent. In epidemic mode there is no lease to fall back on, so the
// verdict always counts (0).
func VerdictOverrule(m Mode, aliveInterval time.Duration) time.Duration {
	if !LeasesEnforced(m) {
		return 0
	}
	return 2 * aliveInterval
}

// RetransmitLimit is memberlist's retransmit limit for a piggybacked
// broadcast: mult * ceil(log10(n+1)).
func RetransmitLimit(mult, n int) int {
	return mult * int(math.Ceil(math.Log10(float64(n+1))))
}

// SuspicionTimeout is memberlist's minimum suspicion timeout:
// mult * max(1, log10(max(1, n))) * probeInterval.
func SuspicionTimeout(mult, n int, probeInterval time.Duration) time.Duration {
	scale := math.Max(1, math.Log10(math.Max(1, float64(n))))
	return time.Duration(mult) * time.Duration(scale*1000) * probeInterval / 1000
}

// PushPullScale is memberlist's push/pull interval scaled to cluster size:
// unchanged up to 32 nodes, then (ceil(log2 n - log2 32) + 1) times.
func PushPullScale(interval time.Duration, n int) time.Duration {
	const threshold = 32
	if n <= threshold {
		return interval
	}
	mult := math.Ceil(math.Log2(float64(n))-math.Log2(threshold)) + 1
	return time.Duration(mult) * interval
}

// PackDeltas splits deltas into batches whose encoded size, with the batch
// header, fits budget bytes. Order is kept. A delta that alone exceeds the
// budget goes into a batch of its own and is reported in oversized (by index
// into the result), so the caller sends it over a stream instead of dropping
// it.
func PackDeltas(deltas []crdt.Delta, budget int) (batches [][]crdt.Delta, oversized []int) {
	const arrayHeader = 5 // worst-case msgpack array header
	size := arrayHeader
	var cur []crdt.Delta
	for i := range deltas {
		n := crdt.EncodedDeltaSize(&deltas[i])
		if len(cur) > 0 && size+n > budget {
			batches = append(batches, cur)
			cur, size = nil, arrayHeader
		}
		cur = append(cur, deltas[i])
		size += n
		if size > budget {
			oversized = append(oversized, len(batches))
			batches = append(batches, cur)
			cur, size = nil, arrayHeader
		}
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches, oversized
}

// Peer leases: how long a silent peer stays shown up.
//
// A gateway cannot tell a dead peer from a stalled one (SIGSTOP, a paused
// VM, a long collector pause) before the stall would have ended: a lease
// that tolerates stalls up to S expires no sooner than S after the last
// word heard. The lease is therefore sized from the longest stall it
// must ride out, and a crash is shown about that much later:
//
//	lease          = max pause + alive interval + LeaseMargin  (3.5s)
//	pause tolerated = lease - alive interval - LeaseMargin      (2s)
//	crash shown     ≤ lease + lease tick                        (3.675s)
//
// A stalled peer's last announcement before the stall left up to one alive
// interval before it; its first after the stall comes at most one alive
// interval after the one before (its timers run on a clock that skips its
// own stalls), so the peer is unheard for at most pause + alive interval,
// plus the delivery of that first announcement. A dead peer's lease counts
// from its last word, before its death, and is checked every lease tick.
// The observer's own stalls are not counted in either (the driver's lease
// clock skips them): they delay what it shows by their length.

// DefaultMaxPause is the longest stall of a peer that the default lease
// never shows as a failure.
const DefaultMaxPause = 2 * time.Second

// DefaultAliveInterval is how often a gateway announces itself by default:
// in eager mode one packet to each member, (N-1)/0.5s a gateway (30/s at
// 16 members, 126/s at 64).
const DefaultAliveInterval = 500 * time.Millisecond

// LeaseMargin is what a lease allows beyond a stalled peer's silence
// (pause + alive interval): the stall an observer does not count as its own
// (the driver's stall threshold, 250ms) and the time for the stalled
// peer's first announcement after it resumes to be scheduled, sent and read
// on a loaded host (750ms).
const LeaseMargin = time.Second

// DefaultLeaseTimeout is the default peer lease: DefaultMaxPause +
// DefaultAliveInterval + LeaseMargin.
const DefaultLeaseTimeout = DefaultMaxPause + DefaultAliveInterval + LeaseMargin

// LeaseTick is how often leases are checked: a twentieth of the lease, at
// most 250ms.
func LeaseTick(ttl time.Duration) time.Duration { return min(ttl/20, 250*time.Millisecond) }

// AliveIntervalFor is the alive interval for a lease of ttl:
// DefaultAliveInterval, or a seventh of a lease shorter than the default
// (the default's proportion), so a short lease still hears several
// announcements.
func AliveIntervalFor(ttl time.Duration) time.Duration {
	return max(min(DefaultAliveInterval, ttl/7), time.Millisecond)
}

// PauseTolerance is the longest stall of a peer that a lease of ttl with
// announcements every alive never shows as a failure: ttl - alive -
// LeaseMargin (0 if that is negative).
func PauseTolerance(ttl, alive time.Duration) time.Duration {
	return max(ttl-alive-LeaseMargin, 0)
}

// CrashBound bounds, in eager mode, the time from a peer's death to its
// sessions shown expired by the lease: the lease (counted from the peer's
// last word, before its death) and one lease tick. Stalls of the observer
// itself add their length. memberlist's failure detector may show it
// sooner.
func CrashBound(ttl time.Duration) time.Duration { return ttl + LeaseTick(ttl) }

// lease is one peer's lease: when it was last heard (Unix nanos, valid when
// heard) and whether it is marked down. A peer can be marked down (fail)
// before it was ever heard. Every input that bears on a peer's liveness
// goes through its lease (direct proof of life, memberlist's verdicts and
// joins, the passing of time), and the driver applies the transitions the
// node reports to the replica in the order they were made: the lease and
// the projection never disagree, so a stale "down" can never overtake a
// newer "up". Time is an argument.
type lease struct {
	last  int64
	heard bool
	down  bool
}

// heardAt refreshes the lease at now (the peer proved itself alive: an
// announcement or a delta straight from it) and reports whether the peer
// was down (so the caller marks it up again).
func (p *lease) heardAt(now int64) (wasDown bool) {
	wasDown = p.down
	if !p.heard || now > p.last {
		p.last, p.heard = now, true
	}
	p.down = false
	return wasDown
}

// begin starts the lease at now if it has none: memberlist reported the
// peer as a member before this node heard from it (on a fresh start every
// peer is in that state). Without it a peer that fails before its first
// announcement arrives would never expire by lease, and would wait for
// memberlist's slower failure detector. A peer already heard or marked down
// is unchanged.
func (p *lease) begin(now int64) {
	if p.heard || p.down {
		return
	}
	p.last, p.heard = now, true
}

// fail applies memberlist's verdict that the peer is dead (or left) at now
// and reports whether it was up (so the caller marks it down). A verdict is
// the end of a suspicion that began seconds earlier; a peer heard from
// within heardWithin before now has proved itself alive since, and the
// verdict is overruled (its lease goes on and expires if it really falls
// silent). heardWithin is 0 when there is no lease to fall back on
// (epidemic mode) or the peer said it left: the verdict then always counts.
func (p *lease) fail(now int64, heardWithin time.Duration) (wasUp bool) {
	if heardWithin > 0 && p.heard && now-p.last <= int64(heardWithin) {
		return false
	}
	wasUp = !p.down
	p.down = true
	return wasUp
}

// expire marks the lease down if it passed at now (it lasts ttl) and the
// peer was up, and reports whether it did.
func (p *lease) expire(now int64, ttl time.Duration) bool {
	if p.heard && !p.down && now-p.last > int64(ttl) {
		p.down = true
		return true
	}
	return false
}

// gap decides when a replica should pull from an origin whose announced
// watermark is ahead of its own: the state of the origin one peer
// announces (its current incarnation). A gap seen once may be deltas still
// in flight; a gap that persists from one announcement to the next is a
// loss, repaired by a pull.
type gap struct {
	incarnation uint64 // of the origin the open gap is about
	announced   uint64 // the watermark announced with the gap open
	open        bool
}

// observe records an announcement of origin o at watermark announced,
// when the local watermark is local, and reports whether to pull now. An
// announcement of another incarnation starts afresh.
func (g *gap) observe(o crdt.Origin, announced, local uint64) bool {
	if g.open && g.incarnation != o.Incarnation {
		g.open = false
	}
	if local >= announced {
		g.open = false
		return false
	}
	prev, open := g.announced, g.open
	g.incarnation, g.announced, g.open = o.Incarnation, announced, true
	// The gap persisted since the previous announcement: whatever was below
	// that announcement should have arrived by now.
	return open && local < prev
}
