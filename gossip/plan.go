package gossip

import (
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
)

func (m Mode) String() string {
	if m == ModeEager {
		return "eager"
	}
	return "epidemic"
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
// 9% of peers at 100 nodes, 80% at 1,000); there memberlist's failure
// detector alone marks gateways down.
func LeasesEnforced(m Mode) bool { return m == ModeEager }

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

// Leases tracks, per peer gateway, when it was last heard from. A peer
// whose lease has passed is shown failed in the projection until heard again.
// Time is an argument; Leases is not safe for concurrent use.
type Leases struct {
	ttl   time.Duration
	peers map[string]lease
}

// lease is one peer's entry: when it was last heard (Unix nanos, valid when
// heard) and whether it is marked down. A peer can be marked down (Fail)
// before it was ever heard.
type lease struct {
	last  int64
	heard bool
	down  bool
}

// NewLeases returns a lease table whose leases last ttl.
func NewLeases(ttl time.Duration) *Leases {
	return &Leases{ttl: ttl, peers: make(map[string]lease)}
}

// Heard refreshes node's lease at now and reports whether the node was down
// (so the caller marks it up again).
func (l *Leases) Heard(node string, now int64) (wasDown bool) {
	p := l.peers[node]
	wasDown = p.down
	if !p.heard || now > p.last {
		p.last, p.heard = now, true
	}
	p.down = false
	l.peers[node] = p
	return wasDown
}

// Fail marks node down at once (memberlist declared it dead or it left) and
// reports whether it was up.
func (l *Leases) Fail(node string) (wasUp bool) {
	p := l.peers[node]
	wasUp = !p.down
	p.down = true
	l.peers[node] = p
	return wasUp
}

// Forget drops a node from the table.
func (l *Leases) Forget(node string) { delete(l.peers, node) }

// Expire returns the nodes whose lease passed at now and were up, and marks
// them down.
func (l *Leases) Expire(now int64) []string {
	var out []string
	for node, p := range l.peers {
		if p.heard && !p.down && now-p.last > int64(l.ttl) {
			p.down = true
			l.peers[node] = p
			out = append(out, node)
		}
	}
	return out
}

// Down reports whether node is marked down.
func (l *Leases) Down(node string) bool { return l.peers[node].down }

// LastHeard returns when node was last heard from, and whether it ever was.
func (l *Leases) LastHeard(node string) (at int64, ok bool) {
	p := l.peers[node]
	return p.last, p.heard
}

// GapTracker decides when a replica should pull from an origin whose
// announced watermark is ahead of its own. A gap seen once may be deltas
// still in flight; a gap that persists from one announcement to the next is a
// loss, repaired by a pull. Not safe for concurrent use.
type GapTracker struct {
	seen map[crdt.Origin]uint64 // origin -> watermark announced with an open gap
}

// NewGapTracker returns an empty tracker.
func NewGapTracker() *GapTracker { return &GapTracker{seen: make(map[crdt.Origin]uint64)} }

// Observe records an announcement of origin o at watermark announced, when
// the local watermark is local, and reports whether to pull now.
func (g *GapTracker) Observe(o crdt.Origin, announced, local uint64) bool {
	if local >= announced {
		delete(g.seen, o)
		return false
	}
	prev, open := g.seen[o]
	g.seen[o] = announced
	// The gap persisted since the previous announcement: whatever was below
	// that announcement should have arrived by now.
	return open && local < prev
}

// Forget drops the tracker's state for an origin.
func (g *GapTracker) Forget(o crdt.Origin) { delete(g.seen, o) }
