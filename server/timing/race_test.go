//go:build race

package timing_test

// raceEnabled: the race detector slows the proxy several times over, so
// the tests of this package skip under it (timing).
const raceEnabled = true
