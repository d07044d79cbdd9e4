package policy

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// NameBudget is the latency-budget policy.
const NameBudget = "budget"

// DefaultLatencyBudget is the budget policy's budget when none is set: 10%
// above the mean latency of work-conserving batching.
var DefaultLatencyBudget = smdp.Budget{Factor: 1.10}

// Defaults of the budget policy's cache.
const (
	// DefaultBudgetResolve is the budget policy's rate grid, finer than
	// smdp's: a budget is a promise about mean latency, and near
	// saturation latency moves much faster than the rate, so a coarse grid
	// plans for a queue shorter than the real one (docs/ALGORITHMS.md,
	// "The live rule"). The price is more solves, off the request path
	// and cached.
	DefaultBudgetResolve = 0.02
	// budgetCacheSize is how many constrained optima the policy keeps.
	budgetCacheSize = 256
)

// Budget draws the least mean power (the most requests per joule) whose
// mean latency stays within a budget: relative to work-conserving batching
// at the current rate and fit ("1.10x") or absolute ("4ms").
//
// Plan solves the constrained SMDP (smdp.SolveBudget: the Lagrangian over
// the power weight w2 with the exact solver, 3 to 10 solves) for the
// measured rate and fitted tau(b), in the caller's goroutine: the monitor
// calls Plan off the request path and swaps the rule in atomically, so the
// dispatcher keeps the old rule while a solve runs. Optima are cached by
// grid rate and fit exactly as in SMDP, so a busy proxy solves once per
// load it visits, not once per window.
//
// The optimum mixes two control limits L1 < L2: the rule waits below L1,
// sends min(queue, B_max) from L2 on, and in between follows L2 (waits)
// with probability Mix, L1 (sends) otherwise, by a draw that depends only
// on the queue's state (the oldest row's arrival and the row count) and
// Seed. A decision asked again in the same state gets the same answer; a
// new state gets a fresh draw, which is the per-decision randomisation the
// constrained optimum needs (ALGORITHMS.md, "Latency budget").
//
// Without an energy line (no power meter, no profile figures) the energy of
// a batch is taken as proportional to its time on the GPU, zeta(b) = tau(b)
// at 1 W: the policy then maximises requests per GPU-second, and its note
// says so.
//
// With SLA > 0 (or a request carrying its own deadline) the slack rule
// guards the wait: a partial batch goes as soon as waiting longer could
// make the earliest deadline slip. The guard only sends earlier, so the
// mean latency stays within the budget.
//
// A Budget is safe for concurrent use; it must be used as a pointer.
type Budget struct {
	Budget smdp.Budget
	// SMax is the finite model's state bound; 0 selects SMDPStates(B_max).
	SMax int
	// Resolve is the relative re-solve threshold; 0 selects
	// DefaultBudgetResolve.
	Resolve float64
	// MaxWait, when > 0, replaces the wait bound of a partial batch.
	MaxWait time.Duration
	// Seed varies the rule's draws.
	Seed uint64
	// SLA, when > 0, is the deadline of rows without their own (the slack
	// guard); Safety the guard's over-estimate of batch time (0: default).
	SLA    time.Duration
	Safety float64

	// NoTrim turns the live trim off: every plan is solved for Budget as
	// given, whatever the calls lived (budgettrim.go).
	NoTrim bool
	// NoLearn holds from the first plan: no learning phase, no stop on
	// the calls' evidence (budgetphase.go); the plan alone, as the
	// simulator's runs without --trim and the optimum comparisons run it.
	NoLearn bool

	// Tail, when > 0, bounds the plan's p99 to Tail times ad-hoc's on the
	// same model, as the tail model predicts both (budgettail.go).
	Tail float64
	// CapacityFloor, when > 0, caps Tail's slack at each rate so that the
	// plans keep this share of ad-hoc's capacity under any absolute p99
	// bound (budgettail.go, capacitySlack).
	CapacityFloor float64
	// SLOP99, when > 0, bounds the plan's p99 absolutely. With MeanFree
	// the mean is not bounded (Budget is not solved for): the plan is the
	// most requests per joule whose p99 stays under SLOP99.
	SLOP99   time.Duration
	MeanFree bool

	mu     sync.Mutex
	caches map[smdp.Budget]*planCache // by the budget solved for
	// byTail holds caches by the tail search's key (tailKey); gapSteps
	// and lateSteps are the key's measured parts at the last plan.
	byTail              map[tailKey]map[smdp.Budget]*planCache
	gapSteps, lateSteps int
	tt                  tailTrim
	ph                  phases
	shown               atomic.Pointer[shownPhase]
	finite              map[finiteKey]*planCache // closed loops, by budget and population
	meter               solveMeter
	kept                Rule // the last planned rule, kept while no decision could wait
	trim                trim
	solves              int
	// capacity follows the log of the throughput of full batches as the
	// plans read it, so its spread from window to window counts in the
	// margin kept from overload (nearOverload).
	capacity ewSpread
	// load is the arrival rate over the last seconds the rate has held,
	// whose count tells the load from overload better than one window's
	// (nearOverload).
	load loadTrack
	// guarded counts the plans still held work-conserving since the load
	// last reached the near-overload line (guardHoldPlans).
	guarded int
}

// NewBudget returns the policy with the given budget (zero: the default).
func NewBudget(b smdp.Budget) (*Budget, error) {
	if b.IsZero() {
		b = DefaultLatencyBudget
	}
	if !(b.Factor >= 1 || (b.Factor == 0 && b.AbsoluteMs > 0)) || math.IsInf(b.Factor, 0) || math.IsInf(b.AbsoluteMs, 0) {
		return nil, fmt.Errorf("latency budget %s: want a factor >= 1 of ad-hoc's mean latency (1.10x) or a duration > 0 (4ms)", b)
	}
	return &Budget{Budget: b}, nil
}

func init() {
	Register(NameBudget, func(o BudgetOptions) (Policy, error) {
		b, err := o.budget()
		if err != nil {
			return nil, err
		}
		p, err := NewBudget(b)
		if err != nil {
			return nil, err
		}
		p.SMax, p.Resolve, p.MaxWait, p.Seed = o.SMax, or(o.Resolve, DefaultBudgetResolve), o.MaxWait, o.Seed
		p.SLA, p.Safety = o.SLA, or(o.Safety, DefaultSlackSafety)
		p.NoTrim, p.NoLearn = o.NoTrim, o.NoTrim || o.NoLearn
		p.meter = newSolveMeter(o.SolveOptions)
		if err := p.setTail(o); err != nil {
			return nil, err
		}
		return p, nil
	})
}

// BudgetOptions are budget's options. LatencyBudget is the mean-latency
// budget as smdp.ParseBudget reads it (empty: DefaultLatencyBudget).
// TailBudget bounds the predicted p99 relative to ad-hoc's (empty:
// DefaultTailBudget, none when SLOP99 is set) and CapacityFloor caps that
// bound's slack at each rate (empty: DefaultCapacityFloor); SLOP99 bounds
// it absolutely,
// and alone (without LatencyBudget) leaves the mean unbounded. Seed varies
// the draws; NoTrim turns the live trim off: the plan alone, as the optimum
// comparisons and the sim command (unless --trim) run it; NoLearn keeps the
// trim but holds from the first plan, as a replay of minutes the live
// proxy lived past its learning does (package whatif).
type BudgetOptions struct {
	LatencyBudget   string        `yaml:"latency_budget" help:"budget: mean-latency budget, a factor of ad-hoc's mean latency (1.10x) or a duration (4ms); empty: 1.10x"`
	TailBudget      string        `yaml:"tail_budget" help:"budget: p99 budget, a factor of ad-hoc's p99 (1.20x) or off; empty: 1.20x, or off when slo_p99 is set"`
	CapacityFloor   string        `yaml:"capacity_floor" help:"budget: the share of ad-hoc's capacity under any absolute p99 bound the tail budget keeps (0.97): at each rate a hold may raise the p99 no more than ad-hoc's rises with the load that share costs, or 5%; off: the tail budget alone; empty: 0.97"`
	SLOP99          time.Duration `yaml:"slo_p99" help:"budget: the p99 inside the proxy the plan keeps under (15ms): the most requests per joule within it, with no mean budget unless latency_budget is set"`
	DeadlineOptions `yaml:",inline"`
	HoldOptions     `yaml:",inline"`
	SolveOptions    `yaml:",inline"`
	Seed            uint64 `yaml:"-"`
	NoTrim          bool   `yaml:"-"`
	NoLearn         bool   `yaml:"-"`
}

// Validate implements validator.
func (o BudgetOptions) Validate() error {
	if err := firstErr(o.DeadlineOptions.Validate(), o.HoldOptions.Validate(), o.SolveOptions.Validate()); err != nil {
		return err
	}
	if _, err := o.budget(); err != nil {
		return err
	}
	if o.SLOP99 < 0 {
		return paramErr("slo_p99", "must be >= 0 (0: none), got %v", o.SLOP99)
	}
	if _, err := o.tailBudget(); err != nil {
		return err
	}
	_, err := o.capacityFloor()
	return err
}

// Effective implements Defaulter: an empty latency budget is 1.10x
// (none when slo_p99 is set: the p99 alone is bounded), an empty tail
// budget 1.20x (off when slo_p99 is set), an empty capacity floor 0.97,
// solve_share 0 its default.
func (o BudgetOptions) Effective() BudgetOptions {
	if o.LatencyBudget == "" && o.SLOP99 <= 0 {
		o.LatencyBudget = fmt.Sprintf("%.2fx", DefaultLatencyBudget.Factor)
	}
	if o.TailBudget == "" {
		o.TailBudget = "off"
		if o.SLOP99 <= 0 {
			o.TailBudget = fmt.Sprintf("%.2fx", DefaultTailBudget)
		}
	}
	if o.CapacityFloor == "" {
		o.CapacityFloor = strconv.FormatFloat(DefaultCapacityFloor, 'f', -1, 64)
	}
	o.SolveOptions = o.SolveOptions.Effective()
	return o
}

// budget is LatencyBudget read (zero when empty).
func (o BudgetOptions) budget() (smdp.Budget, error) {
	if o.LatencyBudget == "" {
		return smdp.Budget{}, nil
	}
	b, err := smdp.ParseBudget(o.LatencyBudget)
	if err != nil {
		return b, paramErr("latency_budget", "%v", err)
	}
	return b, nil
}

// tailBudget is TailBudget read (0 when empty or off).
func (o BudgetOptions) tailBudget() (float64, error) {
	if o.TailBudget == "" {
		return 0, nil
	}
	f, err := ParseTailBudget(o.TailBudget)
	if err != nil {
		return 0, paramErr("tail_budget", "%v", err)
	}
	return f, nil
}

// capacityFloor is CapacityFloor read (DefaultCapacityFloor when empty, 0
// when off).
func (o BudgetOptions) capacityFloor() (float64, error) {
	if o.CapacityFloor == "" {
		return DefaultCapacityFloor, nil
	}
	f, err := ParseCapacityFloor(o.CapacityFloor)
	if err != nil {
		return 0, paramErr("capacity_floor", "%v", err)
	}
	return f, nil
}

// Name implements Policy.
func (*Budget) Name() string { return NameBudget }

// Objective implements Objectiver: requests per joule within the budget,
// or, without an energy line, per GPU-second (energy taken as busy time).
func (*Budget) Objective(hasEnergy bool) string {
	if hasEnergy {
		return "requests per joule within the latency budget"
	}
	return "requests per GPU-second within the latency budget: no energy line zeta(b), a batch's energy is taken as proportional to its GPU busy time"
}

// Resume implements Resumer: an earlier budget policy's live trim (its
// calibration of ad-hoc; all of it when the user's budget is the same)
// carries over, so an A/B through PUT /policy measures the
// trim as it runs rather than its first seconds.
func (p *Budget) Resume(earlier Policy) {
	e, ok := earlier.(*Budget)
	if !ok || e == p {
		return
	}
	e.mu.Lock()
	t, tt, ph := e.trim, e.tt, e.ph
	sameTail := e.Tail == p.Tail && e.SLOP99 == p.SLOP99
	e.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if sameTail {
		// The tail's trim carries over whatever the mean's does: its
		// scale and its measurements (ad-hoc's calls too).
		tt.last, tt.prior = sliceOther, sliceOther
		p.tt = tt
		p.caches = nil
	}
	// What was learnt of ad-hoc carries over whatever the promise; the
	// phase too when the promise is the same.
	if sameTail && e.Budget == p.Budget {
		p.ph = ph
	} else {
		p.ph.learnt = ph.learnt
	}
	if p.NoTrim || e.NoTrim {
		return
	}
	if e.Budget == p.Budget && t.set {
		// The same promise: the trim carries on where it stood, its
		// period and its unfinished measurement too, so a policy
		// switched back and forth every few seconds (an interleaved A/B,
		// scripts/interleave-check.sh) still steps.
		t.last = sliceOther
		p.trim = t
		return
	}
	p.trim.calibration = t.calibration
}

// Solves reports how many constrained optima Plan has computed.
func (p *Budget) Solves() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.solves
}

func (p *Budget) resolve() float64 {
	if p.Resolve > 0 && p.Resolve <= 1 {
		return p.Resolve
	}
	return DefaultBudgetResolve
}
