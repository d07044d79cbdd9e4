package policy

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// The budget policy in a closed loop (docs/ALGORITHMS.md, "The closed
// loop, planned live").
//
// When every caller the dispatcher knows is a synchronous client
// (Estimate.Callers.Closed), the arrivals are not Poisson: N clients each
// send a request, wait for its answer, think and send the next, so the
// rate a wait can draw on falls as the clients queue, to zero when all of
// them wait. The Poisson plan prices a wait at the measured mean rate and
// so waits too little where the group is nearly complete (the last
// clients' requests come within a think time) and too long where few are
// left to come. The policy then solves the closed loop exactly
// (smdp.SolveFiniteBudget) for the population and the measured think time
// and applies its table: in state q (rows waiting at a free instance) it
// sends the table's batch or waits for the next arrival.

// finiteMaxClients is the largest closed loop planned exactly: the solve
// is dense O(N^3) linear algebra, 25-30 ms for the whole budget search at
// 64 clients (go test -bench Finite ./policy/smdp), and beyond a few dozen
// synchronous clients the loop's arrivals are close to Poisson anyway.
const finiteMaxClients = 64

// thinkResolve is the think-time grid of the closed-loop plans: the think
// time a plan is solved for is within 5% of the measured one, and a think
// time that wanders by noise does not solve again.
const thinkResolve = 0.10

// finiteKey is a closed loop's plan cache: one per budget and population,
// holding the solved think times (the cache's grid) and fits.
type finiteKey struct {
	budget  smdp.Budget
	clients int
	tail    tailKey
}

// palmTolerance is how close a closed loop's rate with one row waiting
// must come to the Poisson rate of the same load for the loop to be
// planned as Poisson arrivals (closedLoop).
const palmTolerance = 0.05

// closedLoop reports whether e is planned as a closed loop, and for which
// population: every caller synchronous, one instance (the model has one
// server), a population small enough to solve, and a loop whose finite
// population shows. A wait in state 1 draws on the N-1 clients still
// thinking, at (N-1)/Z, where Poisson arrivals of the same load come at
// N/(Z+T), T the loop's time in the proxy (at least a batch of one, m's
// service time). Many clients thinking long against a batch are
// Poisson-like (Palm's theorem): within palmTolerance the open plan is
// as right, cheaper to solve (the loop's is O(N^3)), and takes the open
// plan's guards (bursts, near overload). It also keeps a pool of
// keep-alive connections under an open stream, read as closed while its
// feedback score wanders (ALGORITHMS.md, "What is learnt of each
// source": 47-63 connections "thinking" 118-170 ms at 345 req/s), from a
// loop's plan.
func closedLoop(e Estimate, m smdp.Model) (smdp.Population, bool) {
	c := e.Callers
	if !c.Closed() || e.Instances != 1 || c.ClosedLoop > finiteMaxClients {
		return smdp.Population{}, false
	}
	n, z := float64(c.ClosedLoop), c.ThinkMs
	if r := (n - 1) * (z + m.ServiceMs(1)) / (n * z); math.Abs(r-1) < palmTolerance {
		return smdp.Population{}, false
	}
	return smdp.Population{Clients: c.ClosedLoop, ThinkMs: c.ThinkMs}, true
}

// finiteRule is the constrained optimum of the closed loop pop for the
// fit of m, at budget b, from the cache or solved.
func (p *Budget) finiteRule(b smdp.Budget, pop smdp.Population, m smdp.Model, busyTime bool) Rule {
	ratio := 1 + thinkResolve
	grid := int(math.Round(math.Log(pop.ThinkMs) / math.Log(ratio)))
	pop.ThinkMs = math.Pow(ratio, float64(grid))
	m.LambdaPerMs = 0 // the loop's rate is (N - q)/think, not a Poisson one
	if p.finite == nil {
		p.finite = make(map[finiteKey]*planCache)
	}
	key := finiteKey{budget: b, clients: pop.Clients, tail: tailKey{scale: p.tailScaleNow(), gap: p.gapSteps, late: p.lateSteps}}
	cache := p.finite[key]
	if cache == nil {
		cache = &planCache{}
		p.finite[key] = cache
	}
	if r, ok := cache.lookup(grid, m, p.resolve()); ok {
		return r
	}
	r := p.meter.time(func() Rule { return p.solveFinite(m, pop, b, busyTime) })
	p.solves++
	cache.add(grid, m, r, budgetCacheSize)
	return r
}

// solveFinite solves the closed loop and turns the optimum into a rule; a
// failed solve gives the work-conserving rule.
func (p *Budget) solveFinite(m smdp.Model, pop smdp.Population, budget smdp.Budget, busyTime bool) Rule {
	c, err := smdp.SolveFiniteBudget(context.Background(), m, pop, budget)
	if err != nil {
		return Limit{Policy: NameBudget, Limit: 1, Note: fmt.Sprintf("closed loop of %d clients: latency budget solve failed, work-conserving: %v", pop.Clients, err)}
	}
	wait := p.MaxWait
	if wait <= 0 {
		// The bound runs from the oldest row's arrival, and in a closed
		// loop that row has usually waited out the batch before (it came
		// while that batch ran): the bound is that batch's time and four
		// mean think times beyond it. A partner that has not come by then
		// is late (a client that stopped within SourceIdleFor, or a think
		// time longer than measured), and the rows waiting go without it.
		ms := m.ServiceMs(min(pop.Clients, m.MaxBatch)) + 4*pop.ThinkMs
		wait = time.Duration(ms * float64(time.Millisecond))
	}
	sloNote := ""
	if p.SLOP99 > 0 {
		// The loop's plan has no tail model: an SLO bounds its holds
		// instead, so that the oldest row's hold and the batch it then
		// goes in (the whole group, at most) fit under it.
		room := p.SLOP99 - time.Duration(m.ServiceMs(min(pop.Clients, m.MaxBatch))*float64(time.Millisecond))
		if room = max(room, 0); room < wait {
			wait = room
			sloNote = fmt.Sprintf("; holds bounded at %v by slo_p99 %v", wait.Round(10*time.Microsecond), p.SLOP99)
		}
	}
	wait, tail := p.finiteTail(c, pop, m, wait)
	unit := "W"
	if busyTime {
		unit = "GPU-busy share"
	}
	note := fmt.Sprintf("budget %s = %.4g ms for a closed loop of %d clients thinking %.3g ms: %s, mean latency %.4g ms (ad-hoc %.4g), %.4g mJ per request (ad-hoc %.4g), power %.4g %s, w2 %.4g, %d solves",
		budget, c.BudgetMs, pop.Clients, pop.ThinkMs, tableSummary(c), c.LatencyMs, c.Adhoc.LatencyMs,
		c.EnergyPerRequestMJ, c.Adhoc.EnergyPerRequestMJ, c.PowerW, unit, c.W2, c.Solves)
	if !c.Binding {
		note += "; the budget does not bind"
	}
	note += sloNote
	if busyTime {
		note += "; no energy meter: energy taken proportional to GPU busy time, the budget maximises requests per GPU-second"
	}
	if tail != nil {
		if tail.held {
			note += fmt.Sprintf("; held to the p99 bound: holds bounded at %v, %.2f%% of ad-hoc's energy per request saved", wait.Round(10*time.Microsecond), 100*tail.saving())
		}
		note += tail.note()
	}
	return FiniteRule{constrained: c, pop: pop, wait: wait, seed: p.Seed, note: note, tail: tail}
}

// finiteTail holds a closed loop's table to the p99 bound, as withTail
// holds an open plan (docs/ALGORITHMS.md, "The tail"): the chain prices
// the loop's mean, and a row that waits for a partner waits the time the
// next of the thinking clients takes to send, an exponential time whose
// tail the mean hides (its 99th percentile is 4.6 times its mean). The
// tail model simulates the table and ad-hoc in the loop
// (smdp.FiniteTailLatency); when the table's p99 is over the bound, the
// longest hold bound, under wait, that keeps the p99 and the mean within
// theirs is searched by halving: a hold bound of 0 is ad-hoc, always
// within both. The relative bound is the tail budget itself: the capacity
// floor is of an open stream's rate, which a closed loop's population
// sets instead. It returns the hold bound and the tail plan, nil without
// a p99 bound.
func (p *Budget) finiteTail(c smdp.FiniteConstrained, pop smdp.Population, m smdp.Model, wait time.Duration) (time.Duration, *tailPlan) {
	if p.Tail <= 0 && p.SLOP99 <= 0 {
		return wait, nil
	}
	o := smdp.TailOptions{Requests: tailRequests, Seed: tailSeed}
	late := time.Duration(p.lateSteps) * lateStep
	table := byLivedHold(late, func(hold time.Duration) smdp.Tail {
		r := smdp.FiniteTailRule{First: c.First.Policy, Second: c.Second.Policy, Share: c.Share,
			HoldMs: float64(livedHold(hold, late)) / float64(time.Millisecond)}
		return smdp.FiniteTailLatency(m, pop, r, o)
	})
	adhoc := smdp.FiniteTailLatency(m, pop, smdp.FiniteTailRule{}, o)
	bound := p.p99Bound(adhoc.P99Ms, p.Tail)
	t := &tailPlan{adhoc: adhoc, boundMs: bound, factor: p.Tail, planned: table(wait)}
	if bound <= 0 || t.planned.P99Ms <= bound {
		return wait, t
	}
	// Within the bound the mean is the chain's, under the budget; the
	// hold bound's plans are checked against it in the simulation's own
	// terms, its ad-hoc mean scaled by the budget.
	meanMs := c.BudgetMs * adhoc.MeanMs / c.Adhoc.LatencyMs
	lo, hi := time.Duration(0), min(wait, time.Duration(bound*float64(time.Millisecond)))
	t.planned, t.held = adhoc, true
	for range tailHoldSteps + 4 {
		mid := (lo + hi) / 2
		if x := table(mid); x.P99Ms <= bound && x.MeanMs <= meanMs {
			lo, t.planned = mid, x
		} else {
			hi = mid
		}
	}
	return lo, t
}

// tableSummary says what the optimum's tables do.
func tableSummary(c smdp.FiniteConstrained) string {
	s := "table " + smdp.FinitePolicySummary(c.First.Policy)
	if c.MixState >= 0 && c.Mix > 0 {
		s += fmt.Sprintf(", in state %d %d rows with probability %.3f", c.MixState, c.Second.Policy[c.MixState], c.Mix)
	} else if c.Binding && c.Mix > 0 {
		s += fmt.Sprintf(" mixed %.3f with %s", c.Mix, smdp.FinitePolicySummary(c.Second.Policy))
	}
	return s
}

// FiniteRule is a closed loop's constrained optimum: in each state q (rows
// waiting at a free instance, at most the population) the batch the table
// sends, 0 to wait for the next arrival, following the second table with
// the state's share.
type FiniteRule struct {
	constrained smdp.FiniteConstrained
	pop         smdp.Population
	wait        time.Duration // the longest the oldest row is held for a partner
	// tail is what the tail model predicts for the table and ad-hoc in
	// the loop (nil without a p99 bound).
	tail     *tailPlan
	seed     uint64
	note     string
	trimNote string
}

// Decide implements Rule.
func (r FiniteRule) Decide(q Queue) Decision {
	if q.Rows <= 0 || !q.Free() {
		return Wait()
	}
	n := q.Rows
	if q.MaxBatch > 0 {
		n = min(n, q.MaxBatch)
	}
	if q.SourcesKnown && q.IdleSources == 0 {
		return Send(n) // every caller is waiting: no partner can come
	}
	s := min(q.Rows, r.pop.Clients)
	c := r.constrained
	a := c.First.Policy[s]
	if c.Share[s] > 0 && draw(r.seed, q.OldestArrival, q.Rows) < c.Share[s] {
		a = c.Second.Policy[s]
	}
	if a > 0 {
		return Send(min(a, n))
	}
	due := q.OldestArrival.Add(r.wait)
	if !q.Now.Before(due) {
		return Send(n)
	}
	return WaitUntil(due)
}

// Status implements Rule. BatchSize is the fewest rows the first table
// sends at.
func (r FiniteRule) Status() Status {
	first := r.constrained.First.Policy
	size := len(first) - 1
	for q := 1; q < len(first); q++ {
		if first[q] > 0 {
			size = q
			break
		}
	}
	st := Status{Policy: NameBudget, BatchSize: size, MaxWait: r.wait, Note: r.note + r.trimNote}
	if r.tail != nil {
		st.PlannedMeanMs, st.PlannedP99Ms = r.tail.planned.MeanMs, r.tail.planned.P99Ms
	}
	return st
}

// Constrained is the optimum the rule came from, with the loop it was
// solved for (the think time on its grid, not the measured one).
func (r FiniteRule) Constrained() (smdp.FiniteConstrained, smdp.Population) {
	return r.constrained, r.pop
}

// budgetPlan is a rule the budget policy solved, which its live trim
// checks: the ad-hoc latency its model predicts for the same load, the
// share of ad-hoc's energy per request it saves (minSaving), and the rule
// with the trim's note.
type budgetPlan interface {
	Rule
	adhocMs() float64
	saving() float64
	withTrim(note string) Rule
}

func (r BudgetRule) adhocMs() float64 { return r.constrained.AdhocLatencyMs }
func (r FiniteRule) adhocMs() float64 { return r.constrained.Adhoc.LatencyMs }

// saving is 1 - power/ad-hoc's power: the open model serves the same
// arrivals under either rule, so powers compare as energies per request.
func (r BudgetRule) saving() float64 {
	if r.tail != nil && r.tail.held {
		return r.tail.saving()
	}
	if !(r.constrained.AdhocPowerW > 0) {
		return 0
	}
	return 1 - r.constrained.PowerW/r.constrained.AdhocPowerW
}

func (r FiniteRule) saving() float64 {
	if r.tail != nil && r.tail.held {
		return r.tail.saving()
	}
	if !(r.constrained.Adhoc.EnergyPerRequestMJ > 0) {
		return 0
	}
	return 1 - r.constrained.EnergyPerRequestMJ/r.constrained.Adhoc.EnergyPerRequestMJ
}

func (r BudgetRule) withTrim(note string) Rule { r.trimNote = note; return r }
func (r FiniteRule) withTrim(note string) Rule { r.trimNote = note; return r }
