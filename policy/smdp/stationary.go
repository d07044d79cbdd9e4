package smdp

import (
	"fmt"
	"math"
	"slices"
)

// gthStationary is the stationary distribution of a unichain transition
// matrix: its recurrent class by closedClass, transient states 0, and on
// the class GTH (Grassmann, Taksar, Heyman 1985), which solves pi P = pi
// without subtractions and so keeps tiny probabilities accurate to a few
// ulps. Both models evaluate through it (kernel.stationary,
// finiteChain.evaluate).
//
// GTH anchors the first state of the class at 1 and builds the others up
// from it; in a closed loop the first state (fewest requests waiting) can
// be rarer than the likely ones by more than float64's range (64 clients
// thinking 0.3 ms against 3.5 ms batches: all of them thinking at once has
// probability ~1e-280 per batch), so the back-substitution would overflow
// to Inf and NaN. Rescaling the partial solution whenever it grows large
// keeps it finite; the states it underflows to 0 are beyond 1e-300 of the
// likely ones. For the same reason (1024 clients: the queue never drains
// in float64) the probability of going back down from a state can
// underflow to 0: with stuck nil the states below it then get 0 and the
// solution starts at that state (see anchor); otherwise stuck names the
// error, as the Poisson model, whose chain must drain, reports it.
//
// It stays one function: one elimination and one back-substitution, each
// with its rescaling, as the algorithm is written down.
func gthStationary(P [][]float64, stuck func(class int) error) ([]float64, error) {
	idx, err := closedClass(P)
	if err != nil {
		return nil, err
	}
	c := len(idx)
	A := make([][]float64, c)
	for i, s := range idx {
		A[i] = make([]float64, c)
		for j, t := range idx {
			A[i][j] = P[s][t]
		}
	}
	outOf := func(m int) float64 {
		out := 0.0
		for j := range m {
			out += A[m][j]
		}
		return out
	}
	// anchor is the lowest state the solution builds on. If a state's
	// probability of moving below it underflows to 0 in elimination, the
	// states below it carry no mass float64 can show (mass flows up from
	// them by waiting, and back down with probability 0): they get 0 and
	// the solution starts at that state.
	anchor := 0
	for m := c - 1; m > 0; m-- {
		out := outOf(m)
		if !(out > 0) {
			if stuck != nil {
				return nil, stuck(idx[m])
			}
			anchor = m
			break
		}
		for i := range m {
			if f := A[i][m] / out; f != 0 {
				axpy(f, A[m], A[i][:m])
			}
		}
	}
	x := make([]float64, c)
	x[anchor] = 1
	for m := anchor + 1; m < c; m++ {
		v := 0.0
		for i := anchor; i < m; i++ {
			v += x[i] * A[i][m]
		}
		out := outOf(m)
		if r := v / out; r > 1e250 || math.IsInf(r, 0) {
			// Everything below m is negligible next to m; out/v may
			// underflow to 0, which says just that.
			f := out / v
			for i := anchor; i < m; i++ {
				x[i] *= f
			}
			x[m] = 1
		} else {
			x[m] = r
		}
		if x[m] > 1e200 {
			for i := anchor; i <= m; i++ {
				x[i] *= 1e-200
			}
		}
	}
	total := 0.0
	for _, v := range x {
		total += v
	}
	pi := make([]float64, len(P))
	for i, s := range idx {
		pi[s] = x[i] / total
	}
	return pi, nil
}

// closedClasses returns every closed communicating class of P (states in
// increasing order), by Tarjan's strongly connected components: a
// component is closed when no transition leaves it.
//
// It stays one function: Tarjan's algorithm as it is written down, its
// recursion a closure over the one set of arrays.
func closedClasses(P [][]float64) [][]int {
	n := len(P)
	index, low, comp := make([]int, n), make([]int, n), make([]int, n)
	onStack := make([]bool, n)
	var stack []int
	var comps [][]int
	counter := 0
	var visit func(v int)
	visit = func(v int) {
		counter++
		index[v], low[v] = counter, counter
		stack = append(stack, v)
		onStack[v] = true
		for w, p := range P[v] {
			if p == 0 {
				continue
			}
			if index[w] == 0 {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			var cl []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp[w] = len(comps)
				cl = append(cl, w)
				if w == v {
					break
				}
			}
			slices.Sort(cl)
			comps = append(comps, cl)
		}
	}
	for v := range n {
		if index[v] == 0 {
			visit(v)
		}
	}
	var closed [][]int
	for i, cl := range comps {
		leaves := false
		for _, s := range cl {
			for t, p := range P[s] {
				if p != 0 && comp[t] != i {
					leaves = true
				}
			}
		}
		if !leaves {
			closed = append(closed, cl)
		}
	}
	return closed
}

// closedClass returns, in increasing order, the states of the chain's only
// closed communicating class, or an error if there is more than one. In a
// finite chain every state reaches some closed class, so with one closed
// class the chain is unichain.
func closedClass(P [][]float64) ([]int, error) {
	closed := closedClasses(P)
	switch len(closed) {
	case 1:
		return closed[0], nil
	case 0: // cannot happen in a finite stochastic matrix
		return nil, fmt.Errorf("the chain has no closed class")
	}
	a, b := closed[0], closed[1]
	return nil, fmt.Errorf("the chain has more than one recurrent class (states %d..%d and %d..%d)", a[0], a[len(a)-1], b[0], b[len(b)-1])
}
