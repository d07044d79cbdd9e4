//go:build race

package main

// raceEnabled says the race detector is on: it slows the proxy and the
// load generator several times over, so that a load's shape (its
// bursts) and the learning it feeds are the machine's, not the test's.
const raceEnabled = true
