//go:build race

package server_test

// raceEnabled: the race detector slows the proxy several times over, so
// the live tests that compare latencies log their ratios instead of
// asserting them; `make test` runs them again without it, asserting.
const raceEnabled = true
