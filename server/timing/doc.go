// Package timing holds the end-to-end tests of `ratebatch serve` whose
// assertions are timings: latency ratios between policies, the simulator's
// prediction of a live run, the line learned from round trips. The race
// detector slows the proxy several times over, so under -race they skip
// (see timing in timing_test.go) and `make test` runs this package again
// without it: one package, no list of test names to keep.
package timing
