// Package stats holds the order statistics ratebatch summarises latencies
// with, so that the load generator, the simulator, the what-if replay, the
// load report and the profiler report the same percentile of the same
// numbers.
package stats

import "math"

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. It returns the zero value for an empty slice.
//
// p is in percent, not a fraction: p*n/100 is exact for whole p, where
// 0.99*n can land a hair above an integer and round the rank up.
func Percentile[T ~int64 | ~float64](sorted []T, p float64) T {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p * float64(n) / 100))
	return sorted[min(max(rank, 1), n)-1]
}
