package policy

import (
	"fmt"
	"math"
	"time"

	"github.com/ratebatch/ratebatch/internal/procs"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// gridModel is the SMDP model the solving policies (smdp, budget) plan
// for: the measured fit, energy line and spread of the batch times
// (rounded to a grid, spreadGrid), with the arrival rate rounded to a
// geometric grid of ratio 1+resolve, so Poisson noise around one load does
// not trigger a solve per window. The grid point replaces the measured rate
// only while it is a stable load. reason is non-empty when the estimate
// gives nothing to solve for; the caller is then work-conserving and says
// why.
func gridModel(e Estimate, resolve float64) (grid int, m smdp.Model, reason string) {
	switch {
	case !e.Observed():
		return 0, m, "no rate measured yet: work-conserving until the first window ends"
	case e.RatePerSec == 0:
		return 0, m, "no arrivals in the last window: work-conserving"
	case math.IsInf(e.RatePerSec, 1):
		return 0, m, "overload: the measured rate is infinite; serving min(queue, B_max)"
	}
	ratio := 1 + resolve
	lambda := e.RatePerSec / 1000
	grid = int(math.Round(math.Log(lambda) / math.Log(ratio)))
	m = smdp.Model{Latency: e.Latency, MaxBatch: e.MaxBatch, LambdaPerMs: math.Pow(ratio, float64(grid)), Extra: e.Extra,
		ServiceSCV: spreadGrid(e.ServiceSCV)}
	if e.HasEnergy {
		m.Energy = e.Energy
	}
	if m.Rho() >= 1 {
		// The grid point may lie above a stable measured rate.
		m.LambdaPerMs = lambda
	}
	if rho := m.Rho(); !(rho < 1) {
		return grid, m, fmt.Sprintf("overload: %.4g req/s is at or above the throughput of full batches (%.4g req/s, rho %.3f); serving min(queue, B_max)",
			e.RatePerSec, 1000*m.ServiceMuPerMs(m.MaxBatch), rho)
	}
	return grid, m, ""
}

// scvSteps is the grid the batch times' measured squared coefficient of
// variation is planned on, in steps per unit (0.05): a server's SCV reads
// 0.25-0.33 on the rough emulator from one point of a run to the next, and
// a plan per reading would be a solve per window. Below half a step (the
// exact emulator reads 0.003) the batch times are planned as exact.
const scvSteps = 20

// spreadGrid rounds a measured SCV to the grid, within the model's bound.
func spreadGrid(scv float64) float64 {
	if !(scv > 0) {
		return 0
	}
	return min(math.Round(scv*scvSteps)/scvSteps, smdp.MaxServiceSCV)
}

// spreadNote says how the plan priced the batch times' spread, for the
// rule's status.
func spreadNote(m smdp.Model) string {
	if m.ServiceSCV <= 0 {
		return ""
	}
	return fmt.Sprintf("; batch times varying (SCV %.2g: Gamma, scale %.3g ms)", m.ServiceSCV, m.SpreadScaleMs())
}

// planCache keeps solved rules, one per grid rate and fit, most recently
// used first, so a busy proxy does not solve every window and a rate that
// comes back costs no solve.
type planCache struct {
	entries []planEntry
}

type planEntry struct {
	grid int
	m    smdp.Model // the fit and energy line it was solved for
	rule Rule
}

// lookup returns a rule for the grid rate whose fit and energy line are
// within the relative tolerance tol of m's (alpha and tau0, beta and
// zeta0; B_max exactly), moving it to the front.
//
// The energy line is compared as the fit is: it is measured too, and
// without a power meter it is the fit itself (energy taken as GPU busy
// time). Compared exactly, every move of the fit missed the cache: a
// simulated resnet152-titanrtx at rho 0.1 solved 781 times in 290 windows.
func (c *planCache) lookup(grid int, m smdp.Model, tol float64) (Rule, bool) {
	for i, e := range c.entries {
		if e.grid != grid || e.m.MaxBatch != m.MaxBatch || e.m.ServiceSCV != m.ServiceSCV {
			continue
		}
		if !lineNear(m.AlphaMs, m.Tau0Ms, e.m.AlphaMs, e.m.Tau0Ms, tol) || !lineNear(m.BetaMJ, m.Zeta0MJ, e.m.BetaMJ, e.m.Zeta0MJ, tol) {
			continue
		}
		if !extraNear(m.Extra, e.m.Extra, tol*e.m.TauMs(1)) {
			continue
		}
		copy(c.entries[1:i+1], c.entries[:i])
		c.entries[0] = e
		return e.rule, true
	}
	return nil, false
}

// add puts a rule at the front, dropping the least recently used beyond size.
func (c *planCache) add(grid int, m smdp.Model, r Rule, size int) {
	c.entries = append([]planEntry{{grid: grid, m: m, rule: r}}, c.entries...)
	if len(c.entries) > size {
		c.entries = c.entries[:size]
	}
}

// lineNear reports whether the line (slope, intercept) is within the
// relative tolerance tol of the cached line (slope0, intercept0): the slope
// of the slope, the intercept of the larger of the two, so that a line
// through the origin does not demand an exact zero.
func lineNear(slope, intercept, slope0, intercept0, tol float64) bool {
	return math.Abs(slope-slope0) <= tol*slope0 && math.Abs(intercept-intercept0) <= tol*max(intercept0, slope0)
}

// extraNear reports whether every part of two measurements of the time
// outside tau(b) is within d ms of the other's: a move smaller than the
// re-solve threshold of tau(1) does not call for a new solve.
func extraNear(a, b smdp.Extra, d float64) bool {
	return math.Abs(a.HoldLoneMs-b.HoldLoneMs) <= d && math.Abs(a.HoldMergedMs-b.HoldMergedMs) <= d &&
		math.Abs(a.AfterLoneMs-b.AfterLoneMs) <= d && math.Abs(a.AfterMergedMs-b.AfterMergedMs) <= d
}

// nearest returns the cached rule for the same B_max whose grid rate is
// closest to grid, preferring one at or below it (a plan for a lower rate
// batches less, so it holds the latency budget at the higher one; a plan
// for a higher rate waits for partners that come more slowly), and its
// distance in grid steps. It leaves the order as it is.
func (c *planCache) nearest(grid, maxBatch int) (r Rule, dist int, ok bool) {
	best := math.MaxInt
	for _, e := range c.entries {
		if e.m.MaxBatch != maxBatch {
			continue
		}
		d := grid - e.grid // >= 0: at or below
		if d < 0 {
			d = -2 * d // above: only when nothing below is as near
		}
		if d < best {
			best, r, ok = d, e.rule, true
		}
	}
	return r, best, ok
}

// DefaultSolveShare is the share of one core the solving policies (smdp,
// budget) may spend on solves, averaged over time, when the options leave
// it at zero. A solve near saturation takes long and a constrained
// optimum several of them: solved every time the rate moved a grid step,
// they take most of a core of the live proxy near saturation, and the
// requests wait for the core; even a lone synchronous client, whose fit
// and overheads around a batch move past the cache's tolerance every few
// slices, pays solves in requests per joule. 0.02 bounds that to 20 ms of
// solves a second, and a new rate at moderate load waits a second or two
// for its own plan (docs/ALGORITHMS.md, "Solves within a share of a
// core"; the solvers' costs in docs/results/benchmarks.md).
const DefaultSolveShare = 0.02

// solveMeter keeps solves within a share of one core: after a solve that
// took d of wall time it allows the next only d*(1/share - 1) later on the
// plan's clock (the solve's cost is real time even in a simulation, whose
// runs must then not depend on it: SolveOptions.SolveFree). Until then a
// policy plans from the nearest solved rate. Live the plan's clock is the
// wall clock; a what-if's replay plans on its virtual clock, which then
// meters its solves as the live proxy's were, at a share of its own time.
// Guarded by the policy's mutex.
type solveMeter struct {
	share float64 // <= 0: no limit
	next  time.Time
	spent time.Duration
	now   time.Time // the plan's clock (at), the wall clock when unset
}

// at sets the plan's clock: the estimate's time.
func (s *solveMeter) at(now time.Time) {
	if now.IsZero() {
		now = time.Now()
	}
	s.now = now
}

func newSolveMeter(o SolveOptions) solveMeter {
	if o.SolveFree {
		return solveMeter{}
	}
	return solveMeter{share: or(o.SolveShare, DefaultSolveShare)}
}

// allow reports whether a solve may start now.
func (s *solveMeter) allow() bool { return s.share <= 0 || !s.clock().Before(s.next) }

func (s *solveMeter) clock() time.Time {
	if s.now.IsZero() {
		return time.Now()
	}
	return s.now
}

// time runs solve and accounts for its wall time. The solve keeps a P of
// the process free meanwhile (procs.Background): it runs on the monitor's
// goroutine, and on a proxy sized to one P it would otherwise hold every
// arrival and answer until the scheduler preempts it.
func (s *solveMeter) time(solve func() Rule) Rule {
	start := time.Now()
	r := func() Rule {
		defer procs.Background()()
		return solve()
	}()
	d := time.Since(start)
	s.spent += d
	if s.share > 0 && s.share < 1 {
		s.next = s.clock().Add(d + time.Duration(float64(d)*(1/s.share-1)))
	}
	return r
}

// deferredNote says a rule came from another rate's solve, for its status.
func deferredNote(dist int) string {
	return fmt.Sprintf("; planned from the nearest solved rate (%d grid steps away): solves are past their share of a core", dist)
}

// noted is a rule whose status carries one more note.
type noted struct {
	Rule
	note string
}

// Status implements Rule.
func (n noted) Status() Status {
	st := n.Rule.Status()
	st.Note += n.note
	return st
}
