// Package testpoll is the tests' one way to wait for something that happens on
// another goroutine: ask again until it holds or a deadline passes, instead
// of sleeping for a time that is too short on a busy machine and too long
// on a quiet one.
package testpoll

import (
	"testing"
	"time"
)

// Deadline is how long Until waits. It matters only when the condition
// never holds: a passing test waits only as long as the condition takes.
const Deadline = 10 * time.Second

// interval is the pause between two looks at the condition.
const interval = time.Millisecond

// Until returns once cond holds, asking again every millisecond, and fails
// the test (t.Fatalf, so from the test's goroutine only) naming what it
// waited for if Deadline passes first. Only for what must happen: what must
// not is checked after a happens-before signal that it could have.
func Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	until(t, what, cond, Deadline)
}

// Within is Until with a bound of the test's own, for what must happen
// within a stated time (a readiness verdict within 2 s): it fails past
// wait, and returns how long cond took to hold.
func Within(t testing.TB, what string, wait time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	until(t, what, cond, wait)
	return time.Since(start)
}

func until(t testing.TB, what string, cond func() bool, wait time.Duration) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %v waiting for: %s", wait, what)
		}
		time.Sleep(interval)
	}
}
