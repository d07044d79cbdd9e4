package policy

import "math"

// The evidence the budget's phases are decided on (budgetphase.go) is a
// count of calls over a bound among n: whether more than 1% of calls lived
// over a p99 bound is a binomial question, answered exactly.

// binomAtLeast is P(X >= k) for X ~ Binomial(n, p), 0 < p < 1.
func binomAtLeast(n, k int, p float64) float64 {
	switch {
	case k <= 0:
		return 1
	case k > n:
		return 0
	}
	return 1 - binomAtMost(n, k-1, p)
}

// binomAtMost is P(X <= k) for X ~ Binomial(n, p), summed term by term
// in log space (each term from the one before by the ratio of
// neighbours): no overflow, and no underflow that matters, for any n.
func binomAtMost(n, k int, p float64) float64 {
	if k < 0 {
		return 0
	}
	if k >= n {
		return 1
	}
	odds := math.Log(p) - math.Log1p(-p)
	lt := float64(n) * math.Log1p(-p) // log P(X = 0)
	sum := 0.0
	for i := 0; i <= k; i++ {
		if i > 0 {
			lt += math.Log(float64(n-i+1)/float64(i)) + odds
		}
		sum += math.Exp(lt)
	}
	return min(sum, 1)
}

// binomUpper is the one-sided upper confidence limit, at confidence
// 1 - alpha, of the share p behind k successes in n trials
// (Clopper-Pearson): the largest p under which k or fewer successes still
// have probability alpha. 1 for n < 1.
func binomUpper(n, k int, alpha float64) float64 {
	if n < 1 || k >= n {
		return 1
	}
	lo, hi := float64(max(k, 0))/float64(n), 1.0
	for range 50 {
		mid := (lo + hi) / 2
		if binomAtMost(n, k, mid) > alpha {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
