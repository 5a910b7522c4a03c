package testkit

import (
	"testing"
	"time"
)

// pollEvery is how often WaitFor checks its condition: short beside every
// bound a test waits within, long enough not to busy a shared machine.
const pollEvery = 5 * time.Millisecond

// minWait is the shortest bound WaitFor waits within. A test that states a
// shorter one states what it expects on a quiet machine; on a shared or
// loaded one (CI beside a busy loop, the race detector) the same behaviour
// can take several times longer, and a bound is only there so that a test
// that would hang fails instead.
const minWait = 30 * time.Second

// WaitFor returns once cond holds, checking it every few milliseconds, and
// fails t (naming what it waited for) if it does not hold within the
// bound. The bound is a deadline for a test that would otherwise hang, not
// a timing assertion: bounds under 30 s are raised to it. Timing promises
// are measured in benchmarks.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	within = max(within, minWait)
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pollEvery)
	}
}
