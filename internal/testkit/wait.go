package testkit

import (
	"testing"
	"time"
)

// pollEvery is how often WaitFor checks its condition: short beside every
// bound a test waits within, long enough not to busy a shared machine.
const pollEvery = 5 * time.Millisecond

// WaitFor returns once cond holds, checking it every few milliseconds, and
// fails t (naming what it waited for) if it does not hold within the
// bound. The bound is a deadline for a test that would otherwise hang, not
// a timing assertion: give one the slowest machine still meets.
func WaitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(pollEvery)
	}
}
