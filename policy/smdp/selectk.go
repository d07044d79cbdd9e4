package smdp

import (
	"math/bits"
	"slices"
)

// selectKth reorders a so that a[k] is its k-th smallest value (from 0),
// every value before it at most a[k] and every one after at least, and
// returns it: what slices.Sort(a) would put at a[k], in linear expected
// time. TailLatency reads three order statistics of each simulated
// sample, and a plan runs many simulations: a sort of each sample was
// most of their cost. Values must not be NaN.
func selectKth(a []float64, k int) float64 {
	lo, hi := 0, len(a)-1
	// Quickselect with a median-of-three pivot; after as many rounds as
	// a balanced one would take twice over, the rest is sorted, which
	// bounds the worst case as introselect does.
	for rounds := 2 * bits.Len(uint(len(a))); hi > lo; rounds-- {
		if rounds == 0 {
			slices.Sort(a[lo : hi+1])
			break
		}
		p := partition(a, lo, hi)
		switch {
		case k < p:
			hi = p - 1
		case k > p:
			lo = p + 1
		default:
			return a[k]
		}
	}
	return a[k]
}

// partition puts a[lo..hi]'s median-of-three pivot at its place p and
// returns p: a[lo..p-1] <= a[p] <= a[p+1..hi] (Lomuto's scheme).
func partition(a []float64, lo, hi int) int {
	mid := lo + (hi-lo)/2
	if a[mid] < a[lo] {
		a[mid], a[lo] = a[lo], a[mid]
	}
	if a[hi] < a[lo] {
		a[hi], a[lo] = a[lo], a[hi]
	}
	if a[mid] < a[hi] {
		a[mid], a[hi] = a[hi], a[mid]
	}
	// a[hi] is now the median of the three.
	pivot, p := a[hi], lo
	for i := lo; i < hi; i++ {
		if a[i] < pivot {
			a[i], a[p] = a[p], a[i]
			p++
		}
	}
	a[p], a[hi] = a[hi], a[p]
	return p
}
