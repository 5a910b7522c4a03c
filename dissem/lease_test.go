package dissem

import (
	"testing"
	"time"
)

// The default lease keeps both promises: a gateway stalled for up to
// DefaultMaxPause is never shown down, and one that dies is shown down
// within 4s.
func TestDefaultLeaseBounds(t *testing.T) {
	d := DefaultConfig()
	if got := PauseTolerance(d.LeaseTimeout, d.AliveInterval); got < DefaultMaxPause {
		t.Errorf("the default lease %v (alive %v) rides out pauses up to %v, want %v", d.LeaseTimeout, d.AliveInterval, got, DefaultMaxPause)
	}
	if got := CrashBound(d.LeaseTimeout); got > 4*time.Second {
		t.Errorf("the default lease %v shows a crash within %v, want 4s", d.LeaseTimeout, got)
	}
	if got := AliveIntervalFor(d.LeaseTimeout); got != d.AliveInterval {
		t.Errorf("AliveIntervalFor(%v) = %v, want the default %v", d.LeaseTimeout, got, d.AliveInterval)
	}
	for _, ttl := range []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, 15 * time.Second} {
		if a := AliveIntervalFor(ttl); 2*a >= ttl {
			t.Errorf("AliveIntervalFor(%v) = %v: not well under the lease", ttl, a)
		}
	}
}

// A peer's lease expires only once it has been silent for longer than the
// lease, and at the first lease check after that.
func TestLeaseExpiresAtTheFirstCheckPastIt(t *testing.T) {
	const ttl = 3500 * time.Millisecond
	tick := int64(LeaseTick(ttl))
	for _, silent := range []int64{0, 1, tick - 1, int64(ttl) / 3} {
		var l lease
		l.heardAt(silent)
		deadline := silent + int64(CrashBound(ttl))
		var at int64 = -1
		for now := int64(0); now <= deadline+tick; now += tick {
			if l.expire(now, ttl) {
				at = now
				break
			}
			if now-silent > int64(ttl) {
				t.Fatalf("heard at %d: still up at %d, past the lease", silent, now)
			}
		}
		if at < 0 || at-silent <= int64(ttl) || at > deadline {
			t.Errorf("heard at %d: expired at %d, want within (%d, %d]", silent, at, silent+int64(ttl), deadline)
		}
	}
}
