//go:build race

package capacity_test

// raceEnabled: the race detector slows the load generator several times
// over, so the live search skips under it.
const raceEnabled = true
