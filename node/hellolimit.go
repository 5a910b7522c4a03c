package node

import (
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/rollcall/rollcall/protocol"
)

// Hello rates. Each hello opens a session (a write every replica applies,
// a tombstone when it ends), so a client cycling hello and close with new
// device names costs the whole cluster. Two token buckets bound that: one
// per source address (sourceKey), taken by every hello before its token is
// verified, so a flood of hellos costs no signature checks past it, and
// one per user, taken once the token says who it is, so a stolen or buggy
// token cannot churn sessions from many addresses. A hello past either
// gets rate_limited and changes nothing; the connection stays open and may
// try again after the wait the message names (the handshake timeout still
// runs).

// Default hello rates.
const (
	// DefaultUserHelloRate and DefaultUserHelloBurst bound the hellos of
	// one user: every device of a user reconnecting at once after a
	// gateway fails (MaxSessionsPerUser's default), then a new session
	// every 100ms.
	DefaultUserHelloRate  = 10
	DefaultUserHelloBurst = 100
	// DefaultIPHelloRate and DefaultIPHelloBurst bound the hellos from
	// one source address: every connection an address may hold
	// (DefaultMaxConnectionsPerIP) may reconnect at once, a NAT's or a
	// load generator's, then 1,000 a second, below what would keep a
	// core busy verifying tokens (an RS256 check costs tens of
	// microseconds).
	DefaultIPHelloRate  = 1000
	DefaultIPHelloBurst = DefaultMaxConnectionsPerIP
)

// helloLimiter holds the hello token buckets by user and by source. The
// buckets of a quiet user or source refill to full and are then dropped
// (prune), so memory follows the users and sources active within a burst's
// refill time.
type helloLimiter struct {
	mu     sync.Mutex
	byUser map[string]*tokenBucket
	bySrc  map[netip.Addr]*tokenBucket
}

func newHelloLimiter() *helloLimiter {
	return &helloLimiter{byUser: make(map[string]*tokenBucket), bySrc: make(map[netip.Addr]*tokenBucket)}
}

// allowHelloFrom takes a hello from src's bucket at mono time now, or returns
// the error to refuse it with. A zero src (not TCP) is not limited.
func (n *Node) allowHelloFrom(src netip.Addr, now int64) *requestError {
	lim := n.limits.Load()
	if !src.IsValid() || lim.IPHelloRate <= 0 {
		return nil
	}
	ok, wait := takeHello(n.hellos, n.hellos.bySrc, src, now, lim.IPHelloRate, lim.IPHelloBurst)
	if ok {
		return nil
	}
	n.stats.rateLimited.Add(1)
	return errorf(protocol.CodeRateLimited, "at most %s hellos per second (%d at once) from one address; the next is allowed in %dms",
		strconv.FormatFloat(lim.IPHelloRate, 'g', -1, 64), lim.IPHelloBurst, max(wait.Milliseconds(), 1))
}

// allowHelloOf takes a hello from user's bucket at mono time now, or
// returns the error to refuse it with.
func (n *Node) allowHelloOf(user string, now int64) *requestError {
	lim := n.limits.Load()
	if lim.UserHelloRate <= 0 {
		return nil
	}
	ok, wait := takeHello(n.hellos, n.hellos.byUser, user, now, lim.UserHelloRate, lim.UserHelloBurst)
	if ok {
		return nil
	}
	n.stats.rateLimited.Add(1)
	return errorf(protocol.CodeRateLimited, "at most %s hellos per second (%d at once) for user %s; the next is allowed in %dms",
		strconv.FormatFloat(lim.UserHelloRate, 'g', -1, 64), lim.UserHelloBurst, truncate(user, 64), max(wait.Milliseconds(), 1))
}

// pruneHellos drops the buckets that have refilled to full by mono time
// now: they hold nothing a new bucket would not.
func (n *Node) pruneHellos(now int64) {
	lim := n.limits.Load()
	h := n.hellos
	h.mu.Lock()
	defer h.mu.Unlock()
	for u, b := range h.byUser {
		if b.full(now, lim.UserHelloRate, lim.UserHelloBurst) {
			delete(h.byUser, u)
		}
	}
	for s, b := range h.bySrc {
		if b.full(now, lim.IPHelloRate, lim.IPHelloBurst) {
			delete(h.bySrc, s)
		}
	}
}

// takeHello takes a hello from key's bucket in buckets (h.bySrc or
// h.byUser) under h.mu, making the bucket on first use.
func takeHello[K comparable](h *helloLimiter, buckets map[K]*tokenBucket, key K, now int64, rate float64, burst int) (bool, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := buckets[key]
	if b == nil {
		b = &tokenBucket{}
		buckets[key] = b
	}
	return b.allow(now, rate, burst)
}
