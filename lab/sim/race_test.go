//go:build race

package sim

// raceEnabled makes the long simulation tests shorter: the race detector
// slows the simulator tenfold and the package must finish within go test's
// default timeout.
const raceEnabled = true
