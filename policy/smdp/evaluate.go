package smdp

import (
	"errors"
	"fmt"
)

// Evaluate computes the exact long-run performance of a deterministic
// policy on the finite model: policy[s] is the action in state s for
// s = 0..SMax and policy[SMax+1] the action in the overflow state.
//
// It builds the embedded chain (one step per decision epoch), finds its
// stationary distribution pi, and returns
// g = sum pi c / sum pi y and Delta = pi_So c(S_o, .) / sum pi y.
// To price many policies on one model, use an Evaluator.
func Evaluate(m Model, o Options, policy []int) (Evaluation, error) {
	e, err := NewEvaluator(m, o)
	if err != nil {
		return Evaluation{}, err
	}
	return e.Evaluate(policy)
}

// Evaluator prices policies on one model, building the model's arrival
// distributions once.
type Evaluator struct{ k *kernel }

// NewEvaluator validates the model and options and prepares the chain.
func NewEvaluator(m Model, o Options) (*Evaluator, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("smdp model: %w", err)
	}
	if err := o.validate(m); err != nil {
		return nil, fmt.Errorf("smdp options: %w", err)
	}
	return &Evaluator{k: newKernel(m, o)}, nil
}

// Evaluate is the package-level Evaluate on the evaluator's model.
func (e *Evaluator) Evaluate(policy []int) (Evaluation, error) {
	if err := e.k.checkPolicy(policy); err != nil {
		return Evaluation{}, err
	}
	return e.k.evaluate(policy)
}

func (k *kernel) checkPolicy(policy []int) error {
	if len(policy) != k.n {
		return fmt.Errorf("policy has %d actions, want %d (states 0..smax=%d, then the overflow state)", len(policy), k.n, k.o.SMax)
	}
	for s, a := range policy {
		if a < 0 || a > k.maxAction(s) {
			return fmt.Errorf("policy action %d in state %s is outside 0..%d", a, k.stateName(s), k.maxAction(s))
		}
	}
	if policy[k.so] == 0 {
		return errors.New("policy waits in the overflow state: it never serves a full queue, so its cost is unbounded; serve 1..B_max there")
	}
	return nil
}

func (k *kernel) stateName(s int) string {
	if s == k.so {
		return "S_o"
	}
	return fmt.Sprint(s)
}

func (k *kernel) evaluate(policy []int) (Evaluation, error) {
	return k.evaluateRandomized(policy, policy, nil)
}

// evaluateRandomized prices the stationary randomized policy that in state
// s takes second[s] with probability share[s] and first[s] otherwise
// (share nil: first everywhere). The embedded chain's row in s is the
// share-weighted mix of the two actions' rows, and so are the expected cost
// and sojourn of the epoch, so the renewal-reward ratios below stay exact.
//
// It stays one function: the renewal-reward sums of one pass over the
// states, each of which needs the others.
func (k *kernel) evaluateRandomized(first, second []int, share []float64) (Evaluation, error) {
	weights := func(s int) (wFirst, wSecond float64) {
		if share == nil || first[s] == second[s] {
			return 1, 0
		}
		return 1 - share[s], share[s]
	}
	pi, err := k.stationary(func(s int, visit func(j int, p float64)) {
		w1, w2 := weights(s)
		if w1 > 0 {
			k.row(s, first[s], func(j int, p float64) { visit(j, w1*p) })
		}
		if w2 > 0 {
			k.row(s, second[s], func(j int, p float64) { visit(j, w2*p) })
		}
	})
	if err != nil {
		return Evaluation{}, err
	}
	var cost, time, lat, energy, over, batches, served, deltaCost float64
	for s, p := range pi {
		if p == 0 {
			continue
		}
		w1, w2 := weights(s)
		for _, act := range [2]struct {
			a int
			w float64
		}{{first[s], w1}, {second[s], w2}} {
			if act.w == 0 {
				continue
			}
			q := p * act.w
			l, e, ov := k.costParts(s, act.a)
			lat += q * l
			energy += q * e
			over += q * ov
			time += q * k.sojourn(act.a)
			if act.a > 0 {
				batches += q
				served += q * float64(act.a)
			}
			if s == k.so {
				deltaCost += q * k.cost(s, act.a)
			}
		}
	}
	cost = k.o.W1*lat + k.o.W2*energy + over
	ev := Evaluation{
		G:            cost / time,
		LatencyMs:    lat / time,
		PowerW:       energy / time,
		OverflowCost: over / time,
		PiOverflow:   pi[k.so],
		Delta:        deltaCost / time,
	}
	if batches > 0 {
		ev.MeanBatch = served / batches
	}
	return ev, nil
}

// stationary returns the stationary distribution of the embedded chain
// whose row in state s rowOf lists. In exact arithmetic the chain has one recurrent class (the
// overflow state serves, and every state reaches it); in float64 some
// Poisson tails underflow to 0, which can leave S_o and other rarely
// visited states transient. So the recurrent class is found from the
// matrix as it is (the closed strongly connected component), transient
// states get probability 0, and on the class gthStationary solves pi P = pi.
func (k *kernel) stationary(rowOf func(s int, visit func(j int, p float64))) ([]float64, error) {
	n := k.n
	// Dense transition matrix.
	P := make([][]float64, n)
	flat := make([]float64, n*n)
	for s := range P {
		P[s] = flat[s*n : (s+1)*n]
		rowOf(s, func(j int, p float64) { P[s][j] += p })
	}
	pi, err := gthStationary(P, func(s int) error {
		return fmt.Errorf("state %s cannot return to the rest of its class (transition probabilities underflowed)", k.stateName(s))
	})
	if err != nil {
		return nil, fmt.Errorf("policy evaluation: %w", err)
	}
	return pi, nil
}

// rows returns the row function of a deterministic policy, for stationary.
func (k *kernel) rows(policy []int) func(s int, visit func(j int, p float64)) {
	return func(s int, visit func(j int, p float64)) { k.row(s, policy[s], visit) }
}
