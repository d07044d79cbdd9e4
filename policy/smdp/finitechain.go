package smdp

import (
	"errors"
	"fmt"
	"math"
)

// finiteChain is the closed-loop model with what every (state, action)
// needs precomputed.
type finiteChain struct {
	m       Model
	n       int // clients N
	think   float64
	logFact []float64 // ln k!, k = 0..N
	// Per batch size a = 1..B_max: service time T(a), energy, the After
	// delay, ln p(a) and T(a)/Theta (= -ln(1 - p(a)), exact for any T).
	svc, zeta, after, logP, x, p []float64
}

func newFiniteChain(m Model, pop Population) *finiteChain {
	c := &finiteChain{m: m, n: pop.Clients, think: pop.ThinkMs, logFact: make([]float64, pop.Clients+1)}
	for k := 1; k <= c.n; k++ {
		c.logFact[k] = c.logFact[k-1] + math.Log(float64(k))
	}
	b := m.MaxBatch + 1
	c.svc, c.zeta, c.after = make([]float64, b), make([]float64, b), make([]float64, b)
	c.logP, c.x, c.p = make([]float64, b), make([]float64, b), make([]float64, b)
	for a := 1; a <= m.MaxBatch; a++ {
		c.svc[a], c.zeta[a], c.after[a] = m.ServiceMs(a), m.ZetaMJ(a), m.Extra.AfterMs(a)
		c.x[a] = c.svc[a] / c.think
		c.p[a] = -math.Expm1(-c.x[a])
		c.logP[a] = math.Log(c.p[a])
	}
	return c
}

func (c *finiteChain) states() int         { return c.n + 1 }
func (c *finiteChain) maxAction(q int) int { return min(q, c.m.MaxBatch) }

// parts returns the epoch's sojourn (ms), latency area (request*ms),
// energy (mJ) and requests served for action a in state q.
func (c *finiteChain) parts(q, a int) (sojourn, area, energy float64, served int) {
	thinking := float64(c.n - q)
	if a == 0 {
		y := c.think / thinking
		return y, float64(q) * y, 0, 0
	}
	t := c.svc[a]
	area = float64(q)*t + thinking*(t-c.think*c.p[a]) + float64(a)*c.after[a]
	return t, area, c.zeta[a], a
}

// row calls visit(j, p) for every next state of action a in state q.
func (c *finiteChain) row(q, a int, visit func(j int, p float64)) {
	if a == 0 {
		visit(q+1, 1)
		return
	}
	thinking, base := c.n-q, q-a
	if thinking == 0 {
		visit(base, 1)
		return
	}
	// Binomial(thinking, p) in log space: (1-p)^thinking underflows for
	// long batches next to short think times, the terms near the mean do not.
	for k := 0; k <= thinking; k++ {
		lp := c.logFact[thinking] - c.logFact[k] - c.logFact[thinking-k] - float64(thinking-k)*c.x[a]
		if k > 0 {
			lp += float64(k) * c.logP[a]
		}
		if pr := math.Exp(lp); pr > 0 {
			visit(base+k, pr)
		}
	}
}

func (c *finiteChain) checkPolicy(policy []int) error {
	if len(policy) != c.states() {
		return fmt.Errorf("finite policy has %d actions, want %d (states q = 0..%d)", len(policy), c.states(), c.n)
	}
	for q, a := range policy {
		if a < 0 || a > c.maxAction(q) {
			return fmt.Errorf("finite policy action %d in state %d is outside 0..%d", a, q, c.maxAction(q))
		}
	}
	if policy[c.n] == 0 {
		return fmt.Errorf("finite policy waits in state %d with every client queued: no arrival can come, so it must serve", c.n)
	}
	return nil
}

// matrix returns the dense transition matrix of the randomised policy that
// follows second[q] with probability share[q] and first[q] otherwise
// (share nil: first).
func (c *finiteChain) matrix(first, second []int, share []float64) [][]float64 {
	n := c.states()
	flat := make([]float64, n*n)
	P := make([][]float64, n)
	for q := range P {
		P[q] = flat[q*n : (q+1)*n]
		w1, w2 := mixWeights(first, second, share, q)
		for _, act := range [2]struct {
			a int
			w float64
		}{{first[q], w1}, {second[q], w2}} {
			if act.w > 0 {
				c.row(q, act.a, func(j int, p float64) { P[q][j] += act.w * p })
			}
		}
	}
	return P
}

func mixWeights(first, second []int, share []float64, q int) (w1, w2 float64) {
	if share == nil || first[q] == second[q] {
		return 1, 0
	}
	return 1 - share[q], share[q]
}

// evaluate prices a randomised policy exactly from the stationary
// distribution of its embedded chain: per-epoch expectations are the
// share-weighted mix of the two actions', so the renewal-reward ratios
// stay exact.
func (c *finiteChain) evaluate(first, second []int, share []float64) (FiniteEvaluation, error) {
	P := c.matrix(first, second, share)
	pi, err := gthStationary(P, nil)
	if err != nil {
		return FiniteEvaluation{}, fmt.Errorf("finite policy evaluation: %w", err)
	}
	var time, area, energy, served, batches float64
	for q, pq := range pi {
		if pq == 0 {
			continue
		}
		w1, w2 := mixWeights(first, second, share, q)
		for _, act := range [2]struct {
			a int
			w float64
		}{{first[q], w1}, {second[q], w2}} {
			if act.w == 0 {
				continue
			}
			y, ar, e, s := c.parts(q, act.a)
			w := pq * act.w
			time += w * y
			area += w * ar
			energy += w * e
			served += w * float64(s)
			if s > 0 {
				batches += w
			}
		}
	}
	if !(served > 0) {
		return FiniteEvaluation{}, errors.New("finite policy evaluation: the policy serves nothing in the long run")
	}
	return FiniteEvaluation{
		LatencyMs:          area / served,
		EnergyPerRequestMJ: energy / served,
		ThroughputPerMs:    served / time,
		PowerW:             energy / time,
		MeanBatch:          served / batches,
	}, nil
}
