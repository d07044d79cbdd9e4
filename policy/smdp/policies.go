package smdp

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// The builders below express the baselines of ALGORITHMS.md section 2 as
// deterministic policies on the finite model (len SMax+2, the last entry is
// the overflow state S_o), so Evaluate can price them next to the optimum.

// AdHoc is work-conserving batching: whenever the server is free, send
// everything waiting, up to B_max. It is the control-limit policy with
// limit 1.
func AdHoc(m Model, sMax int) []int { return ControlLimit(m, sMax, 1) }

// AdHocMeanBatch is the mean batch ad-hoc batching sends on the line lat
// at lambdaPerMs Poisson arrivals: everything waiting whenever the server
// is free, evaluated exactly on the model's chain (AdHoc, DefaultSMax). At
// or past saturation, or where the chain cannot be evaluated, it is the
// fluid figure lat.AdhocBatch (B_max at saturation). Unlike the fluid
// figure it counts, at light load, the requests that find another waiting.
func AdHocMeanBatch(lat batchcost.Latency, maxBatch int, lambdaPerMs float64) float64 {
	fluid := lat.AdhocBatch(lambdaPerMs, maxBatch)
	m := Model{Latency: lat, MaxBatch: maxBatch, LambdaPerMs: lambdaPerMs}
	if !(lambdaPerMs > 0) || maxBatch < 1 || m.Rho() >= 1 {
		return fluid
	}
	ev, err := Evaluate(m, Options{W1: 1, SMax: DefaultSMax, Epsilon: DefaultEpsilon, IterMax: DefaultIterMax}, AdHoc(m, DefaultSMax))
	if err != nil || !(ev.MeanBatch >= 1) {
		return fluid
	}
	return ev.MeanBatch
}

// ControlLimit waits while fewer than limit requests are in the system and
// then serves min(s, B_max): the structure section 3 expects of optimal
// policies. limit must be in 1..sMax+1 (sMax+1: serve only in S_o).
func ControlLimit(m Model, sMax, limit int) []int {
	policy := make([]int, sMax+2)
	for s := range policy {
		if s >= limit {
			policy[s] = min(s, m.MaxBatch)
		}
	}
	policy[sMax+1] = m.MaxBatch
	return policy
}

// Static always sends exactly b: it waits until b requests are present and
// then serves b, however long the queue (S_o serves b too). With
// lambda >= mu(b) the queue it leaves behind grows into S_o and Delta says
// so.
func Static(m Model, sMax, b int) []int {
	policy := make([]int, sMax+2)
	for s := range policy {
		if s >= b {
			policy[s] = b
		}
	}
	return policy
}

// BatchMonitorSize is the batch size Algorithm 1 (ALGORITHMS.md section 1)
// publishes for a steady arrival rate lambda: the smallest b in 2..B_max
// with lambda < b/tau(b), else B_max.
func BatchMonitorSize(m Model) int {
	for b := 2; b <= m.MaxBatch; b++ {
		if m.LambdaPerMs < m.ServiceMuPerMs(b) {
			return b
		}
	}
	return m.MaxBatch
}

// BatchMonitor is the faithful BatchMonitor/BatchDispatcher pair at a steady
// rate: the dispatcher forms batches of exactly pbs = BatchMonitorSize, so
// in this model it is Static(pbs).
//
// Approximation: the live dispatcher also sends a partial batch when its
// oldest request has waited for the wait bound. That rule depends on a
// request's age, which the SMDP state (a count) does not carry, so it is
// left out here. It matters only when fewer than pbs requests wait longer
// than the bound; since pbs is the smallest size whose throughput covers
// lambda, collecting pbs requests takes about tau(pbs), which is short next
// to a bound of several batch times, so the omission is small at steady
// load. The per-window rate estimation is also absent (lambda is known).
func BatchMonitor(m Model, sMax int) []int { return Static(m, sMax, BatchMonitorSize(m)) }

// NamedPolicy builds a policy from a short spec, as the CLI accepts them:
//
//	adhoc          work-conserving (limit 1)
//	batchmonitor   Algorithm 1's batch size as a static policy
//	static:B       always exactly B (1..B_max)
//	limit:L        wait below L requests, then serve min(s, B_max)
func NamedPolicy(m Model, sMax int, spec string) ([]int, error) {
	name, arg, hasArg := strings.Cut(strings.TrimSpace(spec), ":")
	num := func(what string, lo, hi int) (int, error) {
		if !hasArg {
			return 0, fmt.Errorf("policy %q needs a %s: %s:N", spec, what, name)
		}
		v, err := strconv.Atoi(arg)
		if err != nil || v < lo || v > hi {
			return 0, fmt.Errorf("policy %q: %s must be an integer in %d..%d", spec, what, lo, hi)
		}
		return v, nil
	}
	noArg := func() error {
		if hasArg {
			return fmt.Errorf("policy %q takes no argument", spec)
		}
		return nil
	}
	switch name {
	case "adhoc":
		if err := noArg(); err != nil {
			return nil, err
		}
		return AdHoc(m, sMax), nil
	case "batchmonitor":
		if err := noArg(); err != nil {
			return nil, err
		}
		return BatchMonitor(m, sMax), nil
	case "static":
		b, err := num("batch size", 1, m.MaxBatch)
		if err != nil {
			return nil, err
		}
		return Static(m, sMax, b), nil
	case "limit":
		l, err := num("control limit", 1, sMax+1)
		if err != nil {
			return nil, err
		}
		return ControlLimit(m, sMax, l), nil
	}
	return nil, fmt.Errorf("unknown policy %q (known: adhoc, batchmonitor, static:B, limit:L)", spec)
}
