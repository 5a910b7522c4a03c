package node

import (
	"math"
	"time"
)

// Per-session rate limits (without them a sender of 20,000 sends went
// unthrottled while its victim was cut as a slow consumer). The limit
// protects the gateway's CPU and the recipients' attention from one
// flooding session; what keeps a recipient connected under floods from
// many sessions at once is that a message never overflows its queue
// (conn.sendMessage).

// tokenBucket is a session's allowance of one kind of request: it holds up
// to burst tokens, gains rate tokens per second, and each request takes
// one. Times are Node.mono() readings, so a test's fake clock drives it.
// The zero value is a full bucket. Guarded by the session's lock (n.mu).
type tokenBucket struct {
	tokens  float64
	last    int64 // mono time of the last refill
	started bool
}

// allow takes a token at mono time now if there is one. Otherwise it takes
// nothing and returns how long until there will be one. A rate of 0 or less
// allows everything.
func (b *tokenBucket) allow(now int64, rate float64, burst int) (bool, time.Duration) {
	return b.allowN(now, rate, burst, 1)
}

// allowN is allow for a request that takes k tokens (k at most burst): all
// of them, or none and how long until there will be k.
func (b *tokenBucket) allowN(now int64, rate float64, burst, k int) (bool, time.Duration) {
	if rate <= 0 {
		return true, 0
	}
	if !b.started {
		b.tokens, b.last, b.started = float64(burst), now, true
	}
	if now < b.last {
		b.last = now // a clock that stepped back refills nothing
	}
	b.tokens = math.Min(float64(burst), b.tokens+rate*float64(now-b.last)/float64(time.Second))
	b.last = now
	if b.tokens >= float64(k) {
		b.tokens -= float64(k)
		return true, 0
	}
	wait := time.Duration(math.Ceil((float64(k) - b.tokens) / rate * float64(time.Second)))
	return false, wait
}

// full reports whether the bucket would hold burst tokens at mono time now
// (a rate of 0 or less: always).
func (b *tokenBucket) full(now int64, rate float64, burst int) bool {
	if rate <= 0 || !b.started {
		return true
	}
	return b.tokens+rate*float64(now-b.last)/float64(time.Second) >= float64(burst)
}
