package policy

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// NameSMDP is the SMDP-optimal policy.
const NameSMDP = "smdp"

// Defaults of the smdp policy.
const (
	// DefaultResolve is the relative move of the arrival rate, alpha or
	// tau0 that makes the smdp policy solve again. The rate is rounded to a
	// geometric grid of this ratio, so Poisson noise around one load does
	// not trigger a solve per window, and the table is solved at the grid
	// point: within about half the ratio of the measured rate.
	DefaultResolve = 0.1
	// smdpCacheSize is how many solved tables the policy keeps, one per
	// grid rate and fit. A day-shaped trace from 1 to 240 req/s visits
	// about 60 grid rates at a ratio of 1.1; keeping them all means the way
	// back down costs no solve.
	smdpCacheSize = 64
)

// SMDP follows the control-limit table of the SMDP-optimal batching policy
// (ALGORITHMS.md section 3) for the measured arrival rate and the fitted
// tau(b), and the energy line zeta(b) where the estimate has one.
//
// The objective is W1 * (mean latency in ms) + W2 * (mean power in W): W2/W1
// is the price of a watt in milliseconds of mean latency, the knob between
// latency (W2 = 0: the lowest mean latency) and energy (large W2: bigger
// batches, fewer joules per request). Without energy figures the model has
// no power term, so W2 has no effect and the rule's note says so.
//
// Plan solves the SMDP (smdp.Solve, typically 0.02-5 s of CPU) in the
// caller's goroutine. The monitor calls Plan off the request path and
// publishes the new rule atomically, so the dispatcher keeps using the old
// table until the new one is ready. Solutions are cached: the rate is
// rounded to a geometric grid of ratio 1+Resolve and a table is solved again
// only for a new grid rate, or when alpha or tau0 moved more than Resolve
// (relative) since that table was solved.
//
// The SMDP decides when the server is free, on the number of requests
// waiting; the rule therefore looks the table up with Queue.Rows while an
// instance is free (rows in flight are already being served and do not
// count). With several instances each free one is offered the same table.
// A waiting decision is bounded: the oldest row waits at most
// (L + 3*sqrt(L))/lambda, L the control limit, which at the planned rate is
// exceeded less than 0.5% of the time; it fires when the rate drops within a
// window, where waiting on would cost more than the table assumed. Below
// the first window, with a window without arrivals, with a load at or above
// the throughput of full batches (rho >= 1) or when a solve fails, the rule
// is work-conserving (serve min(queue, B_max)) and its note says why.
//
// An SMDP is safe for concurrent use; it must be used as a pointer.
type SMDP struct {
	W1, W2 float64
	// SMax is the largest exact state of the finite model; 0 selects
	// SMDPStates(B_max).
	SMax int
	// Resolve is the relative re-solve threshold; 0 selects DefaultResolve.
	Resolve float64
	// MaxWait, when > 0, replaces the wait bound of a partial batch.
	MaxWait time.Duration

	mu     sync.Mutex
	cache  planCache
	meter  solveMeter
	solves int
}

// NewSMDP returns the policy with weights w1 (latency, > 0) and w2 (power,
// >= 0); both zero select the default, w1 1 and w2 0.
func NewSMDP(w1, w2 float64) (*SMDP, error) {
	o := SMDPOptions{W1: w1, W2: w2}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	w1, w2 = o.weights()
	return &SMDP{W1: w1, W2: w2}, nil
}

func init() {
	Register(NameSMDP, func(o SMDPOptions) (Policy, error) {
		w1, w2 := o.weights()
		return &SMDP{W1: w1, W2: w2, SMax: o.SMax, Resolve: or(o.Resolve, DefaultResolve), MaxWait: o.MaxWait, meter: newSolveMeter(o.SolveOptions)}, nil
	})
}

// SMDPOptions are smdp's options. W1 and W2 weigh its objective; both zero
// select latency only (W1 1, W2 0).
type SMDPOptions struct {
	W1           float64 `yaml:"w1" help:"smdp: weight of mean latency (per ms) in the cost"`
	W2           float64 `yaml:"w2" help:"smdp: weight of mean power (per W) in the cost; raise it to trade latency for energy"`
	HoldOptions  `yaml:",inline"`
	SolveOptions `yaml:",inline"`
}

// Effective implements Defaulter: both weights 0 stand for w1 1 and w2
// 0 (NewSMDP), solve_share 0 for its default.
func (o SMDPOptions) Effective() SMDPOptions {
	o.W1, o.W2 = o.weights()
	o.SolveOptions = o.SolveOptions.Effective()
	return o
}

// Validate implements validator.
func (o SMDPOptions) Validate() error {
	switch {
	case !(o.W1 >= 0) || !finite(o.W1):
		return paramErr("w1", "w1 (weight of mean latency per ms) must be a finite number >= 0, got %v", o.W1)
	case !(o.W2 >= 0) || !finite(o.W2):
		return paramErr("w2", "w2 (weight of mean power per W) must be a finite number >= 0, got %v", o.W2)
	case o.W1 == 0 && o.W2 > 0:
		return paramErr("w1", "w1 (weight of mean latency per ms) must be > 0 for the smdp policy, got 0; favour energy with a larger w2 instead")
	}
	return firstErr(o.HoldOptions.Validate(), o.SolveOptions.Validate())
}

// weights are W1 and W2 with both zero read as the default objective.
func (o SMDPOptions) weights() (w1, w2 float64) {
	if o.W1 == 0 && o.W2 == 0 {
		return 1, 0
	}
	return o.W1, o.W2
}

// Name implements Policy.
func (*SMDP) Name() string { return NameSMDP }

// Objective implements Objectiver: the weighted latency and power, or
// latency alone when w2 is 0 or, without an energy line, has no effect.
func (p *SMDP) Objective(hasEnergy bool) string {
	switch {
	case p.W2 == 0:
		return "mean latency (w2 0: energy not weighed)"
	case hasEnergy:
		return "w1 x mean latency + w2 x mean power"
	}
	return "mean latency: no energy line zeta(b), so w2 has no effect"
}

// Solves reports how many times Plan has run the solver.
func (p *SMDP) Solves() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.solves
}

// Plan implements Policy.
func (p *SMDP) Plan(e Estimate) Rule {
	if err := e.Validate(); err != nil {
		return fallback(NameSMDP, e, err)
	}
	grid, m, reason := gridModel(e, p.resolve())
	if reason != "" {
		return p.workConserving(reason)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.meter.at(e.Now)
	if r, ok := p.cache.lookup(grid, m, p.resolve()); ok {
		return r
	}
	if !p.meter.allow() {
		if r, dist, ok := p.cache.nearest(grid, m.MaxBatch); ok {
			return noted{r, deferredNote(dist)}
		}
	}
	rule := p.meter.time(func() Rule { return p.solve(m, e.HasEnergy) })
	p.solves++
	p.cache.add(grid, m, rule, smdpCacheSize)
	return rule
}

func (p *SMDP) resolve() float64 {
	if p.Resolve > 0 && p.Resolve <= 1 {
		return p.Resolve
	}
	return DefaultResolve
}

// solve runs the solver for m and turns the solution into a rule. A
// solution whose overflow share is too large is solved once more with a
// doubled state space before it is accepted with a note. A failed solve
// gives the work-conserving rule; it is cached like a table, so a model the
// solver rejects is not retried every window.
func (p *SMDP) solve(m smdp.Model, hasEnergy bool) Rule {
	w2 := p.W2
	var notes []string
	if !hasEnergy && w2 > 0 {
		w2 = 0
		notes = append(notes, "no energy figures: w2 has no effect, the table minimises latency")
	}
	sMax := p.SMax
	if sMax == 0 {
		sMax = SMDPStates(m.MaxBatch)
	}
	if sMax < m.MaxBatch {
		notes = append(notes, fmt.Sprintf("smax %d raised to B_max %d", sMax, m.MaxBatch))
		sMax = m.MaxBatch
	}
	var sol smdp.Solution
	for attempt := 0; ; attempt++ {
		co, err := smdp.DefaultCo(m, p.W1, w2, sMax)
		if err != nil {
			return p.workConserving("smdp solve failed, work-conserving: " + err.Error())
		}
		o := smdp.Options{W1: p.W1, W2: w2, Co: co, Epsilon: smdp.DefaultEpsilon, SMax: sMax, IterMax: smdp.DefaultIterMax}
		if sol, err = smdp.Solve(context.Background(), m, o); err != nil {
			return p.workConserving("smdp solve failed, work-conserving: " + err.Error())
		}
		if sol.Delta < smdp.DeltaAccept || attempt == 1 {
			break
		}
		sMax *= 2
	}
	if sol.Delta >= smdp.DeltaAccept {
		notes = append(notes, fmt.Sprintf("overflow share %.2g above %g even with smax %d: the table is approximate", sol.Delta, smdp.DeltaAccept, sMax))
	}
	if !sol.Converged {
		notes = append(notes, fmt.Sprintf("value iteration stopped after %d sweeps without converging", sol.Iterations))
	}
	limit := min(sol.ControlLimit, len(sol.Policy)-1)
	wait := p.MaxWait
	if wait <= 0 {
		wait = poissonWait(limit, m.LambdaPerMs)
	}
	note := fmt.Sprintf("control limit %d at %.4g req/s (rho %.3f): g %.4g, mean latency %.4g ms, power %.4g W, %d sweeps",
		limit, 1000*m.LambdaPerMs, m.Rho(), sol.G, sol.LatencyMs, sol.PowerW, sol.Iterations)
	note += spreadNote(m)
	for _, n := range notes {
		note += "; " + n
	}
	return SMDPRule{table: sol.Policy, limit: limit, wait: wait, note: note, solution: sol, model: m}
}

// SMDPStates is the smdp policy's default SMax for a model with the given
// B_max: smdp.DefaultSMax, or twice B_max for larger models, so that a
// queue of two full batches is still an exact state.
func SMDPStates(maxBatch int) int { return max(smdp.DefaultSMax, 2*maxBatch) }

func (p *SMDP) workConserving(note string) Rule {
	return Limit{Policy: NameSMDP, Limit: 1, Note: note}
}

// SMDPRule dispatches by a solved SMDP table: with an instance free and s
// rows waiting it sends table[s] rows (states past the table use its
// overflow entry), and it waits otherwise, at most its wait bound.
type SMDPRule struct {
	table    []int
	limit    int
	wait     time.Duration
	note     string
	solution smdp.Solution
	model    smdp.Model
}

// Decide implements Rule.
func (r SMDPRule) Decide(q Queue) Decision {
	if q.Rows <= 0 || !q.Free() {
		return Wait()
	}
	if a := smdp.ActionAt(r.table, q.Rows); a > 0 {
		return Send(a)
	}
	due := q.OldestArrival.Add(r.wait)
	if !q.Now.Before(due) {
		return Send(q.Rows)
	}
	return WaitUntil(due)
}

// Status implements Rule. BatchSize is the control limit.
func (r SMDPRule) Status() Status {
	return Status{Policy: NameSMDP, BatchSize: r.limit, MaxWait: r.wait, Note: r.note}
}

// Table returns a copy of the action per state (0..SMax, then the overflow
// state), as smdp.Evaluate takes it.
func (r SMDPRule) Table() []int { return append([]int(nil), r.table...) }

// ControlLimit is the smallest number of waiting rows the table serves.
func (r SMDPRule) ControlLimit() int { return r.limit }

// Solution is the solver's result the table came from, with the model it
// was solved for (the grid rate, not the measured one).
func (r SMDPRule) Solution() (smdp.Solution, smdp.Model) { return r.solution, r.model }

// poissonWait is the wait bound of a partial batch planned for Poisson
// arrivals at lambdaPerMs and filled at limit rows: the time limit
// arrivals take, plus three standard deviations of it (a gamma of shape
// limit: mean limit/lambda, deviation sqrt(limit)/lambda). Rows that waited
// that long wait for a rate the window overstated, and go. A limit of 1
// never waits: 0.
func poissonWait(limit int, lambdaPerMs float64) time.Duration {
	if limit <= 1 || !(lambdaPerMs > 0) {
		return 0
	}
	l := float64(limit)
	return time.Duration((l + 3*math.Sqrt(l)) / lambdaPerMs * float64(time.Millisecond))
}
