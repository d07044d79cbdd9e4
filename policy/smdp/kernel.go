package smdp

import "math"

// windowCut is the Poisson mass the value iteration neglects at each end
// of an action's arrival distribution. It moves an expectation by at most
// 2*windowCut*max|J|, far below Epsilon for any value function float64 can
// hold to that Epsilon, and shortens the sums; Evaluate always uses the
// full rows.
const windowCut = 1e-15

// batch holds what one serving action a > 0 needs: its time, energy and the
// distribution of arrivals during the batch.
type batch struct {
	tau, zeta float64
	// pmf[k] = P(k arrivals during tau) for k = 0..len(pmf)-1; beyond the
	// slice the probabilities underflow to 0.
	pmf []float64
	// tail[k] = P(at least k arrivals), for k = 0..SMax+1.
	tail []float64
	// lo, hi bound the window of k the value iteration sums over for a = 1
	// (larger batches follow by convolution, see expecter): the mass below
	// lo and above hi is each < windowCut.
	lo, hi int
}

// kernel is the finite model with all per-action quantities precomputed;
// it is shared by Solve and Evaluate so both see the same chain.
type kernel struct {
	m      Model
	o      Options
	so     int // index of the overflow state, SMax+1
	n      int // number of states, SMax+2
	lambda float64
	// theta is the batch times' Gamma scale (Model.SpreadScaleMs), disp
	// lambda*theta: the arrivals' dispersion beyond Poisson's.
	theta, disp float64
	b           []batch // b[a] for a = 1..B_max; b[0] unused
}

func newKernel(m Model, o Options) *kernel {
	k := &kernel{m: m, o: o, so: o.SMax + 1, n: o.SMax + 2, lambda: m.LambdaPerMs, theta: m.SpreadScaleMs()}
	k.disp = k.lambda * k.theta
	k.b = make([]batch, m.MaxBatch+1)
	for a := 1; a <= m.MaxBatch; a++ {
		tau := m.ServiceMs(a)
		pmf, tail := arrivals(m.LambdaPerMs*tau, k.disp, o.SMax+1)
		bt := batch{tau: tau, zeta: m.ZetaMJ(a), pmf: pmf, tail: tail}
		// Window: drop the lower and upper tails each below windowCut.
		cum := 0.0
		for bt.lo < len(pmf)-1 && cum+pmf[bt.lo] < windowCut {
			cum += pmf[bt.lo]
			bt.lo++
		}
		bt.hi = len(pmf) - 1
		for up := 0.0; bt.hi > bt.lo && up+pmf[bt.hi] < windowCut; bt.hi-- {
			up += pmf[bt.hi]
		}
		k.b[a] = bt
	}
	return k
}

// arrivals returns the distribution of the arrivals during a batch (see
// poisson for the slices): mean of them, Poisson for a deterministic batch
// time (disp 0), else Poisson mixed over a Gamma batch time of scale
// theta, disp = lambda*theta: the negative binomial of shape mean/disp and
// success probability disp/(1+disp), whose variance is mean*(1+disp).
func arrivals(mean, disp float64, kTail int) (pmf, tail []float64) {
	if !(disp > 0) {
		return poisson(mean, kTail)
	}
	r := mean / disp
	p := disp / (1 + disp)
	logP := math.Log(p)
	// In log space, by the ratio p(k+1)/p(k) = (k+r)/(k+1)*p from
	// p(0) = (1+disp)^-r: neither underflows at k = 0 for a large mean nor
	// loses the digits lgamma(k+r) - lgamma(r) does for a large shape.
	logPk := -r * math.Log1p(disp)
	next := 0
	return counts(kTail, func(k int) float64 {
		// counts asks for k = 0, 1, 2, ... in turn: one step of the
		// recurrence a call.
		for ; next < k; next++ {
			logPk += math.Log((float64(next)+r)/float64(next+1)) + logP
		}
		return math.Exp(logPk)
	}, func(k int, pk float64) bool {
		// Past the mean the pmf falls by (k+r)/(k+1)*p a step, by at
		// least max(that, p) from here on, so what is left is at most
		// pk/(1-ratio): stop when that is negligible.
		ratio := max((float64(k)+r)/float64(k+1)*p, p)
		return float64(k) > mean && pk < negligibleMass*(1-ratio)
	})
}

// negligibleMass is the probability a count distribution leaves out past
// its end: far below windowCut, and float64's resolution of 1.
const negligibleMass = 1e-40

// poisson returns the pmf of a Poisson(mean) variable up to where it
// underflows, and the upper tails P(K >= k) for k = 0..kTail. The pmf is
// computed in log space, exp(-mean + k ln mean - ln k!), which neither
// underflows at k = 0 for large means nor overflows in k^k; the tails are
// summed from the far end so that small tails keep their relative accuracy
// instead of being 1 minus a number close to 1.
func poisson(mean float64, kTail int) (pmf, tail []float64) {
	// Beyond mean + 40 sd + 40 the mass is below 1e-300.
	far := int(math.Ceil(mean+40*math.Sqrt(mean)+40)) + 1
	logMean := math.Log(mean)
	return counts(kTail, func(k int) float64 {
		lg, _ := math.Lgamma(float64(k + 1))
		return math.Exp(-mean + float64(k)*logMean - lg)
	}, func(k int, _ float64) bool { return k >= far })
}

// counts tabulates a count distribution p(k) for k = 0, 1, ... until
// done(k, p(k)), as poisson returns it. It calls p once for each k, in
// increasing order from 0, so p may carry a running value from one k to
// the next (arrivals' recurrence does).
func counts(kTail int, p func(k int) float64, done func(k int, pk float64) bool) (pmf, tail []float64) {
	full := make([]float64, 0, 64)
	last := 0
	for k := 0; ; k++ {
		pk := p(k)
		full = append(full, pk)
		if pk > 0 {
			last = k
		}
		if done(k, pk) {
			break
		}
	}
	pmf = full[:last+1]
	tail = make([]float64, kTail+1)
	// Upper tails from the far end; tails at k > last are exactly 0.
	acc := 0.0
	for k := last; k >= 0; k-- {
		acc += full[k]
		if k <= kTail {
			tail[k] = acc
		}
	}
	return pmf, tail
}

// effective returns the request count a state stands for: S_o counts as SMax.
func (k *kernel) effective(s int) int {
	if s == k.so {
		return k.o.SMax
	}
	return s
}

// maxAction is the largest batch allowed in state s.
func (k *kernel) maxAction(s int) int {
	if s == k.so {
		return k.m.MaxBatch
	}
	return min(s, k.m.MaxBatch)
}

// sojourn is y(s,a): the batch time when serving, the mean time to the
// next arrival when waiting.
func (k *kernel) sojourn(a int) float64 {
	if a == 0 {
		return 1 / k.lambda
	}
	return k.b[a].tau
}

// costParts splits c(s,a) into its latency integral (requests*ms^2 per
// request-rate, i.e. ms^2: multiply by w1), its energy (mJ: multiply by
// w2), and its abstract overflow part (already weighted).
func (k *kernel) costParts(s, a int) (lat, energy, over float64) {
	n := float64(k.effective(s))
	y := k.sojourn(a)
	if a == 0 {
		lat = n / (k.lambda * k.lambda)
	} else {
		tau := k.b[a].tau
		// Each of the a requests served waits After beyond the batch:
		// a*After of area in the requests-in-system integral. The
		// arrivals during the batch add lambda*E[T^2]/2 of area, and
		// E[T^2] = tau^2 + theta*tau.
		lat = n*tau/k.lambda + tau*(tau+k.theta)/2 + float64(a)*k.m.Extra.AfterMs(a)/k.lambda
		energy = k.b[a].zeta
	}
	if s == k.so {
		over = k.o.Co * y
	}
	return lat, energy, over
}

// cost is c(s,a) including the abstract overflow cost.
func (k *kernel) cost(s, a int) float64 {
	lat, energy, over := k.costParts(s, a)
	return k.o.W1*lat + k.o.W2*energy + over
}

// row calls visit(j, p) for every state j reachable from s under action a
// with its embedded-chain probability. Waiting moves to s+1 (S_o stays);
// serving a leaves s-a+k after k arrivals, and everything past SMax is S_o.
func (k *kernel) row(s, a int, visit func(j int, p float64)) {
	if a == 0 {
		if s >= k.o.SMax {
			visit(k.so, 1)
		} else {
			visit(s+1, 1)
		}
		return
	}
	bt := &k.b[a]
	base := k.effective(s) - a
	lim := k.o.SMax - base // largest k that stays in the exact states
	for kk := 0; kk <= lim && kk < len(bt.pmf); kk++ {
		if bt.pmf[kk] > 0 {
			visit(base+kk, bt.pmf[kk])
		}
	}
	if over := bt.tail[lim+1]; over > 0 {
		visit(k.so, over)
	}
}

// eta returns the uniformization constant: a fixed fraction of the bound
// min(1/lambda, tau(a)/(1-p_a(a)), tau(a)/sum_{i<=a} p_i(a)) over a, so
// that every state keeps a positive self-loop (aperiodic chain).
func (k *kernel) eta() float64 {
	bound := 1 / k.lambda
	for a := 1; a <= k.m.MaxBatch; a++ {
		bt := &k.b[a]
		pa := 0.0
		if a < len(bt.pmf) {
			pa = bt.pmf[a]
		}
		bound = min(bound, bt.tau/(1-pa))
		// sum_{i<=a} p_i = 1 - P(K >= a+1)
		if stay := 1 - bt.tail[a+1]; stay > 0 {
			bound = min(bound, bt.tau/stay)
		}
	}
	return etaFraction * bound
}

// etaFraction keeps eta strictly inside the uniformization bound. Larger
// values mix faster (fewer RVI sweeps); 1 would remove the self-loop of
// the tightest state.
const etaFraction = 0.99
