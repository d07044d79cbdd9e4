package timing_test

import "testing"

// timing marks a test of this package: its assertions are timings, which
// hold only in a binary the race detector does not slow several times
// over, so under -race it skips (make test runs the package again without
// -race), and in -short mode it skips too (live load).
func timing(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skip("timing assertions: run without -race (make test does)")
	}
	if testing.Short() {
		t.Skip("live load")
	}
}
