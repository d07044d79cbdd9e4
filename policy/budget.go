package policy

import (
	"context"
	"fmt"
	"math"
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
	capacity ewVariance
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
// DefaultTailBudget, none when SLOP99 is set); SLOP99 bounds it absolutely,
// and alone (without LatencyBudget) leaves the mean unbounded. Seed varies
// the draws; NoTrim turns the live trim off: the plan alone, as the optimum
// comparisons and the sim command (unless --trim) run it; NoLearn keeps the
// trim but holds from the first plan, as a replay of minutes the live
// proxy lived past its learning does (package whatif).
type BudgetOptions struct {
	LatencyBudget   string        `yaml:"latency_budget" help:"budget: mean-latency budget, a factor of ad-hoc's mean latency (1.10x) or a duration (4ms); empty: 1.10x"`
	TailBudget      string        `yaml:"tail_budget" help:"budget: p99 budget, a factor of ad-hoc's p99 (1.20x) or off; empty: 1.20x, or off when slo_p99 is set"`
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
	_, err := o.tailBudget()
	return err
}

// Effective implements Defaulter: an empty latency budget is 1.10x
// (none when slo_p99 is set: the p99 alone is bounded), an empty tail
// budget 1.20x (off when slo_p99 is set), solve_share 0 its default.
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
	p.trim.calibLive, p.trim.calibPred, p.trim.calib, p.trim.calibSlices = t.calibLive, t.calibPred, t.calib, t.calibSlices
	p.trim.adhocMs = t.adhocMs
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

// Plan implements Policy.
func (p *Budget) Plan(e Estimate) Rule {
	p.mu.Lock()
	p.observeTail(e.Live)
	p.mu.Unlock()
	r := p.plan(e)
	p.mu.Lock()
	p.ranTail(r)
	p.mu.Unlock()
	return r
}

func (p *Budget) plan(e Estimate) Rule {
	if err := e.Validate(); err != nil {
		r := fallback(NameBudget, e, err)
		p.mu.Lock()
		p.show(PhaseAdhoc, r.Status().Note)
		p.tt.ref = 0
		p.mu.Unlock()
		return r
	}
	busyTime := !e.HasEnergy
	if busyTime {
		// Energy proportional to GPU busy time: 1 W while a batch runs.
		e.BetaMJ, e.Zeta0MJ, e.HasEnergy = e.AlphaMs, e.Tau0Ms, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.meter.at(e.Now)
	grid, m, reason := gridModel(e, p.resolve())
	if reason != "" {
		return p.conserve(reason, e)
	}
	if e.Decisions > 0 && e.OpenDecisions == 0 && p.kept != nil {
		// No caller could have sent a partner at any decision of the
		// slice (synchronous clients, all waiting): the rule sent at once
		// whatever its plan, so the plan is kept rather than solved
		// again for a fit that moved by noise.
		p.trim.next(p.Budget, false)
		return noted{p.kept, fmt.Sprintf("; kept: none of the last slice's %d decisions could wait (no caller idle)", e.Decisions)}
	}
	pop, closed := closedLoop(e, m)
	if e.Stepped && !closed {
		// A burst or a step: the queue holds the old rate's transient and
		// the new rate is one slice's count, so waiting planned for a
		// steady load does not hold (docs/ALGORITHMS.md, "Bursts"). A
		// closed loop's rate is not its load but its output: the plan for
		// it raises the rate it measures, which is no step (its load is
		// the population).
		return p.conserve(fmt.Sprintf(
			"the rate stepped (%.4g req/s over the last %v): work-conserving until it has held for a window", e.RatePerSec, e.Window), e)
	}
	p.capacity.add(math.Log(m.ServiceMuPerMs(m.MaxBatch)))
	if !closed && nearOverload(m, e.Arrivals, p.capacity.variance(), e.ServiceSCV) {
		p.guarded = guardHoldPlans
		return p.conserve(fmt.Sprintf(
			"%d arrivals in the last %v, a capacity varying %.1f%% and batch times varying %.0f%% cannot tell rho %.3f (congested as %.3f with exact batches) from the capacity line %.2f (%d standard errors): work-conserving",
			e.Arrivals, e.Window, 100*math.Sqrt(p.capacity.variance()), 100*math.Sqrt(max(e.ServiceSCV, 0)), m.Rho(),
			congestedRho(m.Rho(), e.ServiceSCV), 1-congestionMargin, overloadSigmas), e)
	}
	if !closed && p.guarded > 0 {
		p.guarded--
		return p.conserve(fmt.Sprintf(
			"the load reached the capacity line within the last %d plans (now rho %.3f, %d arrivals in the last %v): work-conserving %d plans more",
			guardHoldPlans, m.Rho(), e.Arrivals, e.Window, p.guarded), e)
	}
	p.setTailKeys(e)
	pickFor := func(b smdp.Budget) Rule {
		if closed {
			return p.finiteRule(b, pop, m, busyTime)
		}
		return p.rule(b, grid, m, busyTime)
	}
	// The plan for the user's bounds as set, whatever the tail trim's
	// scale: its saving decides whether to depart from ad-hoc at all.
	userRule := p.atUserScale(func() Rule { return pickFor(p.Budget) })
	// The model's ad-hoc p99 at this rate: the unit the next slice's calls
	// are counted in by the tail trim (observeTail).
	p.tt.ref = adhocP99(userRule)
	ubp, ok := userRule.(budgetPlan)
	if !ok {
		p.show(PhaseAdhoc, userRule.Status().Note)
		return p.untrimmed(userRule, e)
	}
	if !p.NoTrim {
		// The rule's model is at the rate (or the closed loop) of the
		// window that just ended, so its ad-hoc latency is the prediction
		// for that window's calls.
		p.trim.observe(p.Budget, e.Live, ubp.adhocMs())
	}
	why := p.noRoom()
	if why == "" && ubp.saving() < minSaving {
		why = fmt.Sprintf("the plan for %s saves %.2f%% of ad-hoc's energy per request at this load, under the %g%% the model can tell from its own error: work-conserving (%s)",
			p.promise(), 100*ubp.saving(), 100*minSaving, ubp.Status().Note)
	}
	if why != "" {
		// Ad-hoc, on a model whose rate and ad-hoc latency are known: its
		// calls teach the trims and the learning phase ad-hoc's.
		return p.conserveLearning(why, e)
	}
	if !p.NoLearn {
		if r, ok := p.earn(e); ok {
			return r
		}
	}
	// The plan at the budget and the scale of the p99 bound the trims
	// give: the user's plan above when they sit at the user's.
	rule := userRule
	if b := p.trim.budget(p.Budget); (!p.NoTrim && b != p.Budget) || p.tailScaleNow() != 1 {
		if p.NoTrim {
			b = p.Budget
		}
		rule = pickFor(b)
	}
	bp, ok := rule.(budgetPlan)
	if !ok {
		p.show(PhaseAdhoc, rule.Status().Note)
		return p.untrimmed(rule, e)
	}
	holding := ""
	if !p.NoLearn {
		why := p.holdingNote()
		p.show(PhaseHolding, why)
		holding = "; holding: " + why
	} else {
		p.show(PhaseHolding, "the plan alone (no learning phase)")
	}
	if p.NoTrim {
		return p.untrimmed(bp.withTrim(p.tailTrimNote()+holding), e)
	}
	if p.trim.next(p.Budget, true) {
		// A window of ad-hoc, whose calls measure the live latency the
		// budget is relative to (budgettrim.go).
		return p.guard(trimAdhocRule(e, fmt.Sprintf("live trim: %d slices of ad-hoc in %d, measuring the latency the budget is relative to (model: %.4g ms)%s",
			trimAdhoc, trimPeriod, bp.adhocMs(), holding)), e)
	}
	if p.trim.atAdhoc(p.Budget) {
		// Calls lived over the budget even under the plan for a 1% slack:
		// ad-hoc until the trim tries a plan again (budgettrim.go).
		note := "live trim: the calls lived over the budget with every plan down to a 1% slack; ad-hoc" + p.trim.note(p.Budget)
		p.show(PhaseAdhoc, note)
		p.kept = p.guard(trimAdhocRule(e, note), e)
		return p.kept
	}
	p.kept = p.guard(bp.withTrim(p.trim.note(p.Budget)+p.tailTrimNote()+holding), e)
	return p.kept
}

// atUserScale runs plan with the p99 bound at the user's (the tail
// trim's scale 1, its own plan cache), and the trim's scale back after.
func (p *Budget) atUserScale(plan func() Rule) Rule {
	s := p.tt.scale
	if s == 0 || s == 1 {
		return plan()
	}
	p.tt.scale = 1
	p.useTailKey()
	defer func() {
		p.tt.scale = s
		p.useTailKey()
	}()
	return plan()
}

// adhocP99 is the model's ad-hoc p99 a planned rule's tail model
// predicted (ms; 0 without a tail model).
func adhocP99(r Rule) float64 {
	if br, ok := r.(BudgetRule); ok && br.tail != nil {
		return br.tail.adhoc.P99Ms
	}
	return 0
}

// noRoom says why an SLO leaves no room for holds at this load ("" when
// it does): ad-hoc itself lives a p99 at or over tailTrimAim of it (its
// calibrated p99: the model's at this rate times what the ad-hoc slices
// lived over the model's).
func (p *Budget) noRoom() string {
	c := p.tailCalib()
	if p.SLOP99 <= 0 || c <= 0 || !(p.tt.ref > 0) {
		return ""
	}
	slo := float64(p.SLOP99) / float64(time.Millisecond)
	if live := c * p.tt.ref; live >= tailTrimAim*slo {
		return fmt.Sprintf("ad-hoc itself lives p99 %.3g ms at this load (the model's %.3g x%.3g measured), at or over %.0f%% of slo_p99 %v: no room to hold",
			live, p.tt.ref, c, 100*tailTrimAim, p.SLOP99)
	}
	return ""
}

// untrimmed applies a rule the live trim takes no part in: the slice is
// neither a plan nor one of the trim's ad-hoc windows, and the trim's
// rhythm of plans and ad-hoc windows does not advance across it.
func (p *Budget) untrimmed(r Rule, e Estimate) Rule {
	p.trim.next(p.Budget, false)
	return p.guard(r, e)
}

// trimAdhocRule is the ad-hoc the live trim runs, in its ad-hoc windows
// and while it holds at ad-hoc: every batch at once, its calls counted by
// the trim (untrimmed's are not).
func trimAdhocRule(e Estimate, note string) Rule {
	return Fill{Policy: NameBudget, Batch: e.MaxBatch, Note: note}
}

// workConserving sends every batch at once, with the reason the budget
// chose not to wait.
func workConserving(reason string) Rule {
	return Limit{Policy: NameBudget, Limit: 1, Note: reason}
}

// minSaving is the least share of ad-hoc's energy per request a plan must
// save, at the user's budget, for the budget to depart from ad-hoc: below
// it ad-hoc runs (work-conserving). A plan's saving is the model's, and
// the model is a few per cent off live (its fit, its overheads, the
// arrivals it assumes); a wait that saves less than that is as likely to
// cost as to save, and its wait costs latency for certain
// (docs/ALGORITHMS.md, "A saving too small to tell from the model's
// error"). It is also where the tail's bound leaves nothing to save (a
// trickle of requests): the default then sends at once.
const minSaving = 0.01

// guardHoldPlans is how many plans the budget stays work-conserving after
// the load last reached the near-overload line. The line is crossed by a
// window's count of arrivals, and at a load near it that count falls on
// either side from one second to the next; each plan would start on the
// queue the last left. Fifty plans are five seconds at the default window:
// what a plan near the line would save is not worth a backlog
// (docs/ALGORITHMS.md, "Near overload").
const guardHoldPlans = 50

// overloadSigmas is how many standard errors of the load the budget keeps
// between the load it plans for and overload.
const overloadSigmas = 3

// nearOverload reports whether the load cannot be told from overload:
// rho plus overloadSigmas standard errors reaches 1. The load's relative
// error has two parts: the window's Poisson count of arrivals (1/sqrt(n))
// and the capacity's spread, capVar the variance of the log of the
// throughput of full batches from window to window (the fit and the
// overheads are measured too).
//
// Near saturation a plan's latency moves as 1/(1-rho)^2 with the rate, so
// a rate a few per cent off plans a wait the queue cannot pay for, and the
// saving there is small; ad-hoc is within every budget. Live the capacity
// moves too, as the fit and the overheads move with the host's load
// (docs/ALGORITHMS.md, "Near overload").
//
// The margin ends short of the model's capacity, at 1 - congestionMargin:
// a wait near saturation raises the number of calls in flight, and a
// proxy on a busy host serves many calls in flight more slowly, so a
// plan that waits can tip the load into a backlog that ad-hoc at the same
// rate never enters (below, congestionMargin).
//
// A server whose batches vary (scv, Estimate.ServiceSCV) queues as an
// exact one at a higher load, congestedRho, and the test reads that load.
func nearOverload(m smdp.Model, arrivals int, capVar, scv float64) bool {
	if arrivals <= 0 {
		return false
	}
	rel := math.Sqrt(1/float64(arrivals) + max(capVar, 0))
	return congestedRho(m.Rho(), scv)*(1+overloadSigmas*rel) >= 1-congestionMargin
}

// congestedRho is the load at which a queue of exact service times waits
// as long as one of service times with squared coefficient of variation
// scv waits at rho: Poisson arrivals wait rho/(1-rho) (1+scv)/2 service
// times (Pollaczek-Khinchine), so rho' / (1-rho') = (1+scv) rho/(1-rho).
func congestedRho(rho, scv float64) float64 {
	if rho >= 1 || scv <= 0 || math.IsNaN(scv) {
		return rho
	}
	x := (1 + scv) * rho / (1 - rho)
	return x / (1 + x)
}

// congestionMargin is the share of the modelled capacity a plan keeps free
// (the capacity line is at 1 - congestionMargin of it). Two reasons:
//
//   - The proxy's own congestion: on a host shared by the proxy, the
//     server and the clients, the waits' longer latencies raise the calls
//     in flight, the throughput of full batches falls below the model's
//     and a backlog forms that ad-hoc at the same rate never enters.
//   - Capacity under an absolute p99 bound, as MLPerf's server scenario
//     and a fleet's sizing measure it (scripts/capacity-p99.sh): it is
//     found where ad-hoc's p99 climbs steeply with the rate, and there a
//     hold that lives a little over its plan costs a share of the
//     capacity several times its share of the p99. Holding nowhere near
//     that edge, the default serves at least ad-hoc's rate under any bound
//     that puts the edge there.
//
// It gives up what a plan saves near capacity, which is little (a few per
// cent: TestBudgetNeedsAMaterialSaving logs it; docs/ALGORITHMS.md, "Near
// overload").
const congestionMargin = 0.20

// ewVariance is an exponentially weighted mean and variance of a series.
type ewVariance struct {
	n          int
	mean, vari float64
}

// ewWeight is the weight of a new value: a memory of about twenty plans
// (five seconds of 250-ms slices).
const ewWeight = 0.05

func (v *ewVariance) add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return
	}
	v.n++
	if v.n == 1 {
		v.mean = x
		return
	}
	d := x - v.mean
	v.mean += ewWeight * d
	v.vari = (1 - ewWeight) * (v.vari + ewWeight*d*d)
}

// variance is 0 until two values were seen.
func (v *ewVariance) variance() float64 { return v.vari }

// rule is the constrained optimum for the grid rate and model, at budget
// b, from the cache or solved.
func (p *Budget) rule(b smdp.Budget, grid int, m smdp.Model, busyTime bool) Rule {
	if p.caches == nil {
		p.useTailKey()
	}
	cache := p.caches[b]
	if cache == nil {
		cache = &planCache{}
		p.caches[b] = cache
	}
	if r, ok := cache.lookup(grid, m, p.resolve()); ok {
		return r
	}
	if !p.meter.allow() {
		if r, ok := p.nearest(b, grid, m.MaxBatch); ok {
			return r
		}
	}
	r := p.meter.time(func() Rule { return p.solve(m, b, busyTime) })
	p.solves++
	cache.add(grid, m, r, budgetCacheSize)
	return r
}

// nearest is the cached rule nearest to grid (planCache.nearest), of the
// budget b if it has one, else of the loosest budget solved that is not
// looser than b; its status says it was not solved for this rate. With
// neither, while the solves are past their share, it is the
// work-conserving rule: ad-hoc is within every budget.
//
// A looser budget's plan is never taken for b. The live trim tightens the
// budget when the calls lived above the promise; planning the tighter
// budget with the looser one's rule until a solve was allowed would keep
// the very rule that broke the promise, and the trim, measuring it under
// the new budget, would step on down past where it meant to go
// (docs/ALGORITHMS.md, "Solves within a share of a core"). The
// work-conserving rule is no BudgetRule, so Plan does not count its calls
// for the trim either: the trim holds its budget until that budget is
// solved.
func (p *Budget) nearest(b smdp.Budget, grid, maxBatch int) (Rule, bool) {
	var (
		r    Rule
		dist int
		ok   bool
	)
	if c := p.caches[b]; c != nil {
		r, dist, ok = c.nearest(grid, maxBatch)
	}
	solved := ok
	if !ok {
		var best smdp.Budget
		for ob, c := range p.caches {
			or, od, ok2 := c.nearest(grid, maxBatch)
			solved = solved || ok2
			if ok2 && stricter(ob, b) && (!ok || stricter(best, ob)) {
				best, r, dist, ok = ob, or, od, true
			}
		}
	}
	if !ok {
		if !solved {
			return nil, false // nothing solved for this B_max yet: solve
		}
		return Limit{Policy: NameBudget, Limit: 1,
			Note: fmt.Sprintf("budget %s not solved yet and solves are past their share of a core: work-conserving meanwhile", b)}, true
	}
	if br, isBR := r.(BudgetRule); isBR {
		br.solveNote = deferredNote(dist)
		return br, true
	}
	return r, true
}

// stricter reports whether budget a is at least as strict as b: of the
// same kind (relative or absolute) and no looser.
func stricter(a, b smdp.Budget) bool {
	if a.Relative() != b.Relative() {
		return false
	}
	if b.Relative() {
		return a.Factor <= b.Factor
	}
	return a.AbsoluteMs <= b.AbsoluteMs
}

// budgetFirstStates is the state space a default solve starts with: four
// full batches (and at least 32 states), doubled while the optimum's
// overflow share is at or above smdp.DeltaAccept, up to SMDPStates. A
// solve's cost grows as the cube of its states (GTH elimination of the
// embedded chain, several evaluations per Lagrangian search), and away
// from saturation the queue almost never holds four batches; the solves'
// bursts cost the calls latency of their own (BenchmarkBudgetSolve;
// docs/ALGORITHMS.md, "Solves within a share of a core"). Truncated where
// the queue does not reach, the optimum is the same
// (TestBudgetSolveStartsSmall).
func budgetFirstStates(maxBatch int) int { return max(4*maxBatch, 32) }

// solve computes the constrained optimum for m and turns it into a rule; a
// failed solve gives the work-conserving rule (cached too, so a model the
// solver rejects is not retried every window).
func (p *Budget) solve(m smdp.Model, budget smdp.Budget, busyTime bool) (out Rule) {
	if p.MeanFree {
		return p.solveSLO(m, busyTime)
	}
	sMax := p.SMax
	states := sMax
	if sMax == 0 {
		sMax = SMDPStates(m.MaxBatch)
		states = min(budgetFirstStates(m.MaxBatch), sMax)
	}
	sMax = max(sMax, m.MaxBatch)
	states = max(states, m.MaxBatch)
	var (
		c   smdp.Constrained
		err error
	)
	for ; ; states = min(2*states, sMax) {
		c, err = smdp.SolveBudget(context.Background(), m, budget, states)
		if err == nil && c.Delta < smdp.DeltaAccept || states >= sMax {
			break
		}
	}
	if err != nil {
		return Limit{Policy: NameBudget, Limit: 1, Note: "latency budget solve failed, work-conserving: " + err.Error()}
	}
	if p.Tail > 0 || p.SLOP99 > 0 {
		// The hold bound of the mean's plan, kept unless the tail needs
		// a shorter one.
		r := p.withTail(BudgetRule{
			first:  Limit{Policy: NameBudget, Limit: c.First.Limit, MaxWait: p.waitFor(c, m)},
			second: Limit{Policy: NameBudget, Limit: c.Second.Limit, MaxWait: p.waitFor(c, m)},
			mix:    c.Mix,
		}, m, c.BudgetMs)
		defer func() {
			br := out.(BudgetRule)
			br.tail, br.tailBound = r.tail, r.tailBound
			if r.tailBound {
				br.first.Limit, br.second.Limit, br.mix = r.first.Limit, r.second.Limit, r.mix
				br.first.MaxWait, br.second.MaxWait = r.first.MaxWait, r.second.MaxWait
				br.first.Note += r.tail.heldNote(r)
			}
			br.first.Note += r.tail.note()
			br.second.Note = br.first.Note
			out = br
		}()
	}
	wait := p.waitFor(c, m)
	unit := "W"
	if busyTime {
		unit = "GPU-busy share"
	}
	note := fmt.Sprintf("budget %s = %.4g ms at %.4g req/s (rho %.3f): control limits %d/%d mixed %.3f, mean latency %.4g ms (ad-hoc %.4g), power %.4g %s, w2 %.4g, %d solves",
		budget, c.BudgetMs, 1000*m.LambdaPerMs, m.Rho(), c.First.Limit, c.Second.Limit, c.Mix, c.LatencyMs, c.AdhocLatencyMs, c.PowerW, unit, c.W2, c.Solves)
	if !c.Binding {
		note += "; the budget does not bind"
	}
	note += spreadNote(m)
	if busyTime {
		note += "; no energy meter: energy taken proportional to GPU busy time, the budget maximises requests per GPU-second"
	}
	if c.Delta >= smdp.DeltaAccept {
		note += fmt.Sprintf("; overflow share %.2g above %g: approximate", c.Delta, smdp.DeltaAccept)
	}
	return BudgetRule{
		first:  Limit{Policy: NameBudget, Limit: c.First.Limit, MaxWait: wait, Note: note},
		second: Limit{Policy: NameBudget, Limit: c.Second.Limit, MaxWait: wait, Note: note},
		mix:    c.Mix, seed: p.Seed, constrained: c, model: m,
	}
}

// guard adds the slack rule's deadline check when an SLA is configured.
func (p *Budget) guard(r Rule, e Estimate) Rule {
	if p.SLA <= 0 {
		return r
	}
	s := Slack{SLA: p.SLA, Safety: p.Safety, Target: TargetMax}.Plan(e).(SlackRule)
	return guarded{Rule: r, slack: s}
}

// guarded sends a partial batch early when the slack rule says a deadline
// would slip; otherwise the inner rule decides.
type guarded struct {
	Rule
	slack SlackRule
}

// Decide implements Rule.
func (g guarded) Decide(q Queue) Decision {
	d := g.Rule.Decide(q)
	if d.Rows > 0 || q.Rows <= 0 || !q.Free() {
		return d
	}
	s := g.slack.Decide(q)
	if s.Rows > 0 {
		return s
	}
	if !s.WakeAt.IsZero() && (d.WakeAt.IsZero() || s.WakeAt.Before(d.WakeAt)) {
		d.WakeAt = s.WakeAt
	}
	return d
}

// Status implements Rule.
func (g guarded) Status() Status {
	st := g.Rule.Status()
	st.Note += fmt.Sprintf("; SLA guard %v", g.slack.sla)
	return st
}

// BudgetRule is one planned constrained optimum: the control limits of its
// two policies and the probability of following the second where they
// differ.
type BudgetRule struct {
	first, second Limit
	mix           float64
	seed          uint64
	constrained   smdp.Constrained
	model         smdp.Model
	trimNote      string // the live trim's state when the rule was handed out
	solveNote     string // set when the rule was solved for another rate
	// tail is the tail model's prediction for the rule (nil: none);
	// tailBound says the p99 bound chose the limits and the hold.
	tail      *tailPlan
	tailBound bool
}

// Decide implements Rule.
func (r BudgetRule) Decide(q Queue) Decision {
	if q.SourcesKnown && q.IdleSources == 0 && q.Rows > 0 && q.Free() {
		// No caller that could send is idle: the arrival rate during a
		// wait is zero, and the optimum of the model with that rate
		// sends at once (docs/ALGORITHMS.md, "Sources").
		n := q.Rows
		if q.MaxBatch > 0 {
			n = min(n, q.MaxBatch)
		}
		return Send(n)
	}
	lo, hi := r.first.Limit, r.second.Limit
	if q.Rows >= min(lo, hi) && q.Rows < max(lo, hi) && r.mix > 0 && draw(r.seed, q.OldestArrival, q.Rows) < r.mix {
		return r.second.Decide(q)
	}
	return r.first.Decide(q)
}

// draw is a uniform number in [0, 1) that depends only on its arguments
// (splitmix64 of their mix): the same queue state always gets the same
// draw, distinct states independent-looking ones.
func draw(seed uint64, oldest time.Time, rows int) float64 {
	x := seed ^ uint64(oldest.UnixNano()) ^ uint64(rows)*0x9e3779b97f4a7c15
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// Status implements Rule. BatchSize is the first (smaller) control limit.
func (r BudgetRule) Status() Status {
	st := r.first.Status()
	st.BatchSize = min(r.first.Limit, r.second.Limit)
	st.Note += r.solveNote + r.trimNote
	if r.tail != nil {
		st.PlannedMeanMs, st.PlannedP99Ms = r.tail.planned.MeanMs, r.tail.planned.P99Ms
	}
	return st
}

// Limits returns the two control limits and the share of the second.
func (r BudgetRule) Limits() (first, second int, mix float64) {
	return r.first.Limit, r.second.Limit, r.mix
}

// Constrained is the optimum the rule came from, with the model it was
// solved for (the grid rate, not the measured one).
func (r BudgetRule) Constrained() (smdp.Constrained, smdp.Model) { return r.constrained, r.model }
