//go:build race

package server_test

// raceEnabled says the race detector is on: it slows the proxy several
// times over, and beside the other packages' tests a latency bound then
// measures the machine (TestSoak keeps its books under -race and holds its
// latency bound only without it: make test-go runs it so).
const raceEnabled = true
