package chaos

import (
	"fmt"
	"strings"
	"time"
)

// Constants of the agent that the bounds depend on but no flag sets. They
// are read off the agent's code (node/config.go, dissem/node.go,
// gossip/config.go, cmd/rollcall/cluster.go); if the agent changes them,
// change them here.
const (
	// eventCoalesce is the node's event-coalescing window
	// (node.DefaultEventCoalesce).
	eventCoalesce = time.Millisecond
	// batchDelay is how long a write waits to share a gossip packet
	// (gossip.DefaultConfig().BatchDelay).
	batchDelay = 500 * time.Microsecond
	// loopbackRTT is a TCP round trip on loopback with the host busy,
	// for a gap pull.
	loopbackRTT = 50 * time.Millisecond
	// rejoinInterval is how often a gateway retries members memberlist
	// declared dead (gossip.DefaultConfig().ReconnectInterval): after a
	// network fault heals, a peer cut off long enough waits up to this.
	rejoinInterval = 10 * time.Second
	// defaultPeerLease is the agent's default --peer-lease
	// (dissem.DefaultLeaseTimeout), which the harness does not set.
	defaultPeerLease = 3500 * time.Millisecond
	// leaseMargin is what a peer lease allows beyond a stalled peer's
	// silence (dissem.LeaseMargin): a gateway paused for up to
	// lease - alive - leaseMargin is never shown down.
	leaseMargin = time.Second
	// shortPause is the longest pause of the schedule's short pauses: the
	// stall the agent's default lease rides out (dissem.DefaultMaxPause).
	shortPause = 2 * time.Second
	// DefaultSlack is what the bounds allow for a loaded two-core machine
	// running the agents, the workload and the observers at once:
	// scheduling delays, collector pauses, a burst of events queued.
	DefaultSlack = time.Second
)

// Bounds are the time bounds the checker holds the cluster to, derived
// from the agent's settings. All are durations; the checker works in
// milliseconds.
type Bounds struct {
	Heartbeat time.Duration // --heartbeat
	Timeout   time.Duration // --timeout: the client session timeout
	PeerLease time.Duration // --peer-lease: the lease on a silent peer gateway

	Sweep      time.Duration // expiry sweep period: min(250ms, Timeout/10)
	LeaseCheck time.Duration // peer lease check period: min(PeerLease/20, 250ms)
	Alive      time.Duration // alive announcement period: min(500ms, PeerLease/7)
	Repair     time.Duration // loss repair: 2*Alive + loopbackRTT
	Slack      time.Duration // loaded-machine allowance

	// Propagation bounds a write on one gateway reaching a subscriber or a
	// get on every other running one: batch + coalesce + Repair + Slack.
	Propagation time.Duration
	// SilentExpiry bounds, from a client's last request, its session
	// shown offline everywhere: Timeout + Sweep + Propagation.
	SilentExpiry time.Duration
	// CrashExpiry bounds, from a kill -9, the dead gateway's sessions shown
	// offline on every other: PeerLease + LeaseCheck + coalesce + Slack.
	// The lease counts from the last time the peer was heard, which is
	// before the kill.
	CrashExpiry time.Duration
	// PauseTolerance is the longest pause (SIGSTOP..SIGCONT) of a gateway
	// that must never show its sessions offline on the others:
	// PeerLease - Alive - the lease's margin (1s). A pause no longer is
	// not excused there.
	PauseTolerance time.Duration
	// Recovery is how long a gateway is excused after a pause ends or a
	// restart is ready (and its peers, about it): one announcement to be
	// heard + Repair + coalesce + Slack.
	Recovery time.Duration
	// JustJoined is how long after its ready a gateway counts as just
	// joined: Recovery + PeerLease + LeaseCheck. Its leases on its peers all
	// began at its join, so the first that passes for want of a peer that
	// does not speak to it yet passes a Timeout later. A client shown
	// offline there in that window is a Joined violation.
	JustJoined time.Duration
	// Convergence bounds, from the end of the last fault, every running
	// gateway answering the same for every user whose state is not
	// changing: max(Timeout, PeerLease) + LeaseCheck + Repair + coalesce +
	// 2*Slack.
	Convergence time.Duration
	// Rejoin is how long after a network fault heals the two sides are
	// excused: the reconnect round that rejoins a peer declared dead, then
	// Recovery.
	Rejoin time.Duration
	// Grace is how much shorter than Timeout a gap between a client's
	// requests may be for the client still to count as heartbeating: one
	// heartbeat interval (the gateway may read a request that late).
	Grace time.Duration
	// DisconnectGrace is --disconnect-grace: a session whose connection
	// closed without bye may show online that much longer than the usual
	// bound (close + DisconnectGrace + Propagation). DeriveBounds leaves it
	// zero; the caller sets it (WithDisconnectGrace).
	DisconnectGrace time.Duration
}

// WithDisconnectGrace returns b with the agents' --disconnect-grace.
func (b Bounds) WithDisconnectGrace(grace time.Duration) Bounds {
	b.DisconnectGrace = max(grace, 0)
	return b
}

// DeriveBounds computes the bounds for the agent settings heartbeat and
// timeout, with the agent's default --peer-lease, with the given slack
// (DefaultSlack if zero).
func DeriveBounds(heartbeat, timeout, slack time.Duration) Bounds {
	return deriveBounds(heartbeat, timeout, defaultPeerLease, slack)
}

// WithPeerLease returns b for agents run with --peer-lease lease.
func (b Bounds) WithPeerLease(lease time.Duration) Bounds {
	return deriveBounds(b.Heartbeat, b.Timeout, lease, b.Slack).WithDisconnectGrace(b.DisconnectGrace)
}

func deriveBounds(heartbeat, timeout, lease, slack time.Duration) Bounds {
	if slack == 0 {
		slack = DefaultSlack
	}
	b := Bounds{Heartbeat: heartbeat, Timeout: timeout, PeerLease: lease, Slack: slack}
	b.Sweep = min(250*time.Millisecond, max(timeout/10, time.Millisecond))
	b.LeaseCheck = min(lease/20, 250*time.Millisecond)
	b.Alive = max(min(500*time.Millisecond, lease/7), time.Millisecond)
	b.Repair = 2*b.Alive + loopbackRTT
	b.Propagation = batchDelay + eventCoalesce + b.Repair + slack
	b.SilentExpiry = timeout + b.Sweep + b.Propagation
	b.CrashExpiry = lease + b.LeaseCheck + eventCoalesce + slack
	b.PauseTolerance = max(lease-b.Alive-leaseMargin, 0)
	b.Recovery = b.Alive + b.Repair + eventCoalesce + slack
	b.JustJoined = b.Recovery + lease + b.LeaseCheck
	b.Convergence = max(timeout, lease) + b.LeaseCheck + b.Repair + eventCoalesce + 2*slack
	b.Rejoin = rejoinInterval + b.Recovery
	b.Grace = heartbeat
	return b
}

// Describe prints the bounds with their formulas, one a line.
func (b Bounds) Describe() string {
	var s strings.Builder
	p := func(name, formula string, d time.Duration) {
		fmt.Fprintf(&s, "  %-13s %-58s = %v\n", name, formula, d)
	}
	fmt.Fprintf(&s, "bounds (heartbeat %v, timeout %v, peer lease %v):\n", b.Heartbeat, b.Timeout, b.PeerLease)
	p("sweep", "min(250ms, timeout/10)", b.Sweep)
	p("lease check", "min(peer lease/20, 250ms)", b.LeaseCheck)
	p("alive", "min(500ms, peer lease/7)", b.Alive)
	p("repair", "2*alive + rtt 50ms", b.Repair)
	p("slack", "loaded 2-core machine", b.Slack)
	p("propagation", "batch 2ms + coalesce 10ms + repair + slack", b.Propagation)
	p("silent", "last request + timeout + sweep + propagation", b.SilentExpiry)
	p("crash", "kill + peer lease + lease check + coalesce + slack", b.CrashExpiry)
	p("pause", "a pause this short is never shown: peer lease - alive - 1s", b.PauseTolerance)
	p("recovery", "after resume/ready: alive + repair + coalesce + slack", b.Recovery)
	p("just joined", "after ready: recovery + peer lease + lease check", b.JustJoined)
	p("convergence", "after faults: max(timeout, peer lease) + lease check + repair + coalesce + 2*slack", b.Convergence)
	p("rejoin", "after a network fault heals: reconnect round 10s + recovery", b.Rejoin)
	p("grace", "a request gap under timeout-grace is heartbeating", b.Grace)
	p("disconnect", "--disconnect-grace: a dropped connection's session stays", b.DisconnectGrace)
	return s.String()
}

// ms converts a duration to the history's milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
