package smdp

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// selectKth gives what a sort puts at k, whatever the values' order:
// random, sorted either way, all equal, few distinct, tiny.
func TestSelectKthIsTheSortedValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gen := map[string]func(n int) []float64{
		"random": func(n int) []float64 {
			a := make([]float64, n)
			for i := range a {
				a[i] = rng.ExpFloat64()
			}
			return a
		},
		"ascending": func(n int) []float64 {
			a := make([]float64, n)
			for i := range a {
				a[i] = float64(i)
			}
			return a
		},
		"descending": func(n int) []float64 {
			a := make([]float64, n)
			for i := range a {
				a[i] = float64(n - i)
			}
			return a
		},
		"equal": func(n int) []float64 { return slices.Repeat([]float64{3}, n) },
		"few distinct": func(n int) []float64 {
			a := make([]float64, n)
			for i := range a {
				a[i] = float64(rng.IntN(3))
			}
			return a
		},
	}
	for name, g := range gen {
		for _, n := range []int{1, 2, 3, 10, 101, 20000} {
			a := g(n)
			sorted := slices.Sorted(slices.Values(a))
			for _, k := range []int{0, n / 2, n * 9 / 10, n * 99 / 100, n - 1} {
				b := slices.Clone(a)
				if got := selectKth(b, k); got != sorted[k] {
					t.Fatalf("%s n=%d k=%d: %v, the sorted value is %v", name, n, k, got, sorted[k])
				}
				for i := range b {
					if i < k && b[i] > b[k] || i > k && b[i] < b[k] {
						t.Fatalf("%s n=%d k=%d: a[%d]=%v on the wrong side of a[k]=%v", name, n, k, i, b[i], b[k])
					}
				}
			}
		}
	}
}
