package node

import (
	"net/netip"
	"sync"
	"time"
)

// apiLimiter holds the backend API's request allowance of each source
// address (sourceKey): Limits.RequestRate per second, RequestBurst at once,
// what one client connection may make. A quiet source's bucket refills to
// full and is then dropped (prune), so memory follows the sources active
// within a burst's refill time.
type apiLimiter struct {
	mu    sync.Mutex
	bySrc map[netip.Addr]*tokenBucket
}

func newAPILimiter() *apiLimiter {
	return &apiLimiter{bySrc: make(map[netip.Addr]*tokenBucket)}
}

// allow takes a request from src's bucket at mono time now, or returns how
// long until one is allowed. A zero src (not TCP), or a rate of 0 or less,
// is not limited.
func (l *apiLimiter) allow(src netip.Addr, now int64, lim *Limits) (bool, time.Duration) {
	if !src.IsValid() || lim.RequestRate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bySrc[src]
	if b == nil {
		b = &tokenBucket{}
		l.bySrc[src] = b
	}
	return b.allow(now, lim.RequestRate, lim.RequestBurst)
}

// prune drops the buckets that have refilled to full by mono time now.
func (l *apiLimiter) prune(now int64, lim *Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s, b := range l.bySrc {
		if b.full(now, lim.RequestRate, lim.RequestBurst) {
			delete(l.bySrc, s)
		}
	}
}
