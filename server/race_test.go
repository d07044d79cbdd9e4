//go:build race

package server_test

// raceEnabled says the race detector is on: it slows the proxy several
// times over, and beside the other packages' tests a latency figure then
// measures the machine (TestSoak reports it).
const raceEnabled = true
