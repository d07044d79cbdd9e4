package policy

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// closedEstimate is four synchronous clients thinking 0.3 ms on googlenet-p4
// with B_max 8, at the rate ad-hoc gives them (about 1200 req/s).
func closedEstimate() Estimate {
	e := energyEstimate(1200)
	e.MaxBatch = 8
	e.Callers = Callers{Known: true, ClosedLoop: 4, ThinkMs: 0.3}
	return e
}

// Only a known, wholly synchronous population on one instance is planned
// as a closed loop; anything else keeps the Poisson plan.
func TestBudgetPlansTheClosedLoop(t *testing.T) {
	for _, tt := range []struct {
		name   string
		edit   func(*Estimate)
		finite bool
	}{
		{"four synchronous clients", func(*Estimate) {}, true},
		{"a rate step is no step for a closed loop", func(e *Estimate) { e.Stepped = true }, true},
		{"an open-loop caller among them", func(e *Estimate) { e.Callers.Others = 1 }, false},
		{"callers not all known", func(e *Estimate) { e.Callers.Known = false }, false},
		{"no think time measured", func(e *Estimate) { e.Callers.ThinkMs = 0 }, false},
		{"two instances", func(e *Estimate) { e.Instances = 2 }, false},
		{"more clients than solved exactly", func(e *Estimate) { e.Callers.ClosedLoop = finiteMaxClients + 1 }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := closedEstimate()
			tt.edit(&e)
			r := newBudget(t, "1.10x").Plan(e)
			_, finite := r.(FiniteRule)
			if finite != tt.finite {
				t.Fatalf("Plan = %T (%v); closed-loop plan %v, want %v", r, r.Status(), finite, tt.finite)
			}
		})
	}
}

// A loop is solved as one only where its finite population shows: with
// one row waiting its rate (N-1)/Z is more than palmTolerance from the
// Poisson rate N/(Z+T) of the same load (T a batch of one, 1.36 ms).
func TestClosedLoopPalm(t *testing.T) {
	for _, tt := range []struct {
		clients int
		thinkMs float64
		loop    bool
	}{
		{1, 100, true},   // a lone client never has a partner
		{4, 0.3, true},   // synchronous clients, no think time
		{4, 100, true},   // 3/100 against 4/101.4: 24% off
		{16, 1, true},    // perf_analyzer's sixteen
		{40, 5, true},    // 39/5 against 40/6.4: 24% off
		{40, 100, false}, // 1.2% off
		{64, 150, false}, // a keep-alive pool read as closed: 0.7% off
	} {
		e := closedEstimate()
		e.Callers.ClosedLoop, e.Callers.ThinkMs = tt.clients, tt.thinkMs
		_, m, reason := gridModel(e, DefaultBudgetResolve)
		if reason != "" {
			t.Fatal(reason)
		}
		if _, loop := closedLoop(e, m); loop != tt.loop {
			t.Errorf("%d clients thinking %v ms: planned as a closed loop %v, want %v", tt.clients, tt.thinkMs, loop, tt.loop)
		}
	}
}

// The closed loop's plan is the exact optimum for the population and the
// think time on its grid: for four clients thinking 0.3 ms it waits for the
// whole group (smdp: control limit 4, +19.9% requests per joule at lower
// latency than ad-hoc), and its decisions follow the table.
func TestFiniteRuleFollowsTheTable(t *testing.T) {
	p := newBudget(t, "1.10x")
	p.NoTrim = true // the plan as solved, whatever the calls lived
	r, ok := p.Plan(closedEstimate()).(FiniteRule)
	if !ok {
		t.Fatal("not a closed-loop plan")
	}
	c, pop := r.Constrained()
	if pop.Clients != 4 || pop.ThinkMs < 0.3/1.05 || pop.ThinkMs > 0.3*1.05 {
		t.Fatalf("solved for %+v, want 4 clients thinking 0.3 ms within the grid's 5%%", pop)
	}
	m := smdp.Model{Latency: googlenet, MaxBatch: 8}
	m.BetaMJ, m.Zeta0MJ = 19.9, 19.6
	want, err := smdp.SolveFiniteBudget(context.Background(), m, pop, smdp.Budget{Factor: 1.10})
	if err != nil {
		t.Fatal(err)
	}
	if got, w := c.First.Policy, want.First.Policy; !slices.Equal(got, w) {
		t.Fatalf("table %v, the exact optimum's %v", got, w)
	}
	if l, ok := smdp.FiniteControlLimitOf(m, c.First.Policy); !ok || l != 4 {
		t.Fatalf("table %v: want control limit 4", c.First.Policy)
	}
	if c.LatencyMs >= c.Adhoc.LatencyMs || c.EnergyPerRequestMJ >= c.Adhoc.EnergyPerRequestMJ {
		t.Fatalf("optimum %.4g ms, %.4g mJ/req: want below ad-hoc's %.4g ms, %.4g mJ/req",
			c.LatencyMs, c.EnergyPerRequestMJ, c.Adhoc.LatencyMs, c.Adhoc.EnergyPerRequestMJ)
	}
	if st := r.Status(); st.BatchSize != 4 || !strings.Contains(st.Note, "closed loop of 4 clients") {
		t.Fatalf("status %v", st)
	}
	now := at(100)
	q := func(rows, idle int, waited time.Duration) Queue {
		return Queue{Now: now, Rows: rows, OldestArrival: now.Add(-waited), Instances: 1, MaxBatch: 8,
			IdleSources: idle, SourcesKnown: true}
	}
	for _, tt := range []struct {
		name string
		q    Queue
		want Decision
	}{
		{"empty", q(0, 4, 0), Wait()},
		{"instance busy", func() Queue { x := q(2, 2, 0); x.InFlight = 1; return x }(), Wait()},
		{"two of four: wait for the others", q(2, 2, time.Millisecond), WaitUntil(now.Add(-time.Millisecond + r.wait))},
		{"three of four", q(3, 1, 0), WaitUntil(now.Add(r.wait))},
		{"the whole group", q(4, 0, 0), Send(4)},
		{"no caller idle: nobody can come", q(2, 0, 0), Send(2)},
		{"a partner late past the bound", q(3, 1, r.wait), Send(3)},
		{"more rows than the population", q(6, 1, 0), Send(4)},
	} {
		if got := r.Decide(tt.q); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	// Planning the same loop again, with a think time within the grid,
	// costs no solve.
	solves := p.Solves()
	e := closedEstimate()
	e.Callers.ThinkMs = 0.292 // 0.3 and 0.292 round to the grid point 1.1^-13 = 0.2897
	if _, ok := p.Plan(e).(FiniteRule); !ok || p.Solves() != solves {
		t.Fatalf("a think time within the grid solved again (%d solves, were %d)", p.Solves(), solves)
	}
}

// Where the optimum mixes two tables in one state, the rule follows the
// second with the share solved for, drawn per decision.
func TestFiniteRuleMixes(t *testing.T) {
	c := smdp.FiniteConstrained{MixState: 2, Mix: 0.3}
	c.First.Policy = []int{0, 0, 2, 3}
	c.Second.Policy = []int{0, 0, 0, 3}
	c.Share = []float64{0, 0, 0.3, 0}
	r := FiniteRule{constrained: c, pop: smdp.Population{Clients: 3, ThinkMs: 1}, wait: time.Second, seed: 5}
	waits := 0
	const n = 20000
	for i := range n {
		d := r.Decide(Queue{Now: at(float64(i)), Rows: 2, OldestArrival: at(float64(i) - 0.5), Instances: 1, MaxBatch: 8, IdleSources: 1, SourcesKnown: true})
		if d.Rows == 0 {
			waits++
		} else if d.Rows != 2 {
			t.Fatalf("sent %d rows, want 2 or a wait", d.Rows)
		}
	}
	if share := float64(waits) / n; share < 0.28 || share > 0.32 {
		t.Fatalf("waited in %.3f of the decisions, want the mix 0.3", share)
	}
}

// A closed loop's plan keeps an SLO by its hold bound: the oldest row is
// held for partners no longer than the SLO less the group's batch.
func TestClosedLoopHoldsWithinTheSLO(t *testing.T) {
	for _, tt := range []struct {
		name    string
		opts    BudgetOptions
		thinkMs float64
		capped  bool
	}{
		{"no SLO nor tail budget: four think times beyond the batch", BudgetOptions{LatencyBudget: "1.10x", TailBudget: "off"}, 20, false},
		{"SLO 10 ms: a shorter bound", BudgetOptions{SLOP99: 10 * time.Millisecond}, 20, true},
		{"SLO 200 ms: four think times are shorter", BudgetOptions{SLOP99: 200 * time.Millisecond}, 20, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := closedEstimate()
			e.Callers.ThinkMs = tt.thinkMs
			p := newBudgetWith(t, tt.opts)
			r, ok := p.Plan(e).(FiniteRule)
			if !ok {
				t.Fatalf("Plan = %T, want the closed loop's plan", p.Plan(e))
			}
			_, m, _ := gridModel(e, DefaultBudgetResolve)
			group := time.Duration(m.ServiceMs(min(r.pop.Clients, m.MaxBatch)) * float64(time.Millisecond))
			free := group + time.Duration(4*r.pop.ThinkMs*float64(time.Millisecond))
			if tt.capped {
				if want := tt.opts.SLOP99 - group; (r.wait-want).Abs() > time.Microsecond || !strings.Contains(r.Status().Note, "slo_p99") {
					t.Errorf("hold bound %v, want the SLO less the group's batch %v (note %q)", r.wait, want, r.Status().Note)
				}
				return
			}
			if (r.wait - free).Abs() > time.Microsecond {
				t.Errorf("hold bound %v, want the batch and four think times %v", r.wait, free)
			}
		})
	}
}

// A closed loop's table waits for the next of the thinking clients, an
// exponential wait whose tail the chain's mean hides: held to the tail
// budget, the plan's hold bound keeps the loop's simulated p99 within
// 1.20x ad-hoc's, where the table without it lives over (so the bound is
// what keeps it), and the plan still saves energy.
func TestClosedLoopHoldsWithinTheTailBudget(t *testing.T) {
	for _, tt := range []struct {
		clients int
		thinkMs float64
	}{{15, 60}, {8, 12}, {16, 20}} {
		t.Run(fmt.Sprintf("%d clients thinking %g ms", tt.clients, tt.thinkMs), func(t *testing.T) {
			e := energyEstimate(200)
			e.MaxBatch = 16
			e.AlphaMs, e.Tau0Ms = 0.5, 7.1
			e.Callers = Callers{Known: true, ClosedLoop: tt.clients, ThinkMs: tt.thinkMs}
			plan := func(tail string) FiniteRule {
				p := newBudgetWith(t, BudgetOptions{TailBudget: tail})
				p.NoLearn = true
				_, m, _ := gridModel(e, DefaultBudgetResolve)
				pop, ok := closedLoop(e, m)
				if !ok {
					t.Fatalf("%d clients thinking %g ms not planned as a closed loop", tt.clients, tt.thinkMs)
				}
				r, ok := p.finiteRule(p.Budget, pop, m, false).(FiniteRule)
				if !ok {
					t.Fatalf("no closed loop's plan")
				}
				return r
			}
			held, free := plan(""), plan("off")
			if held.tail == nil || free.tail != nil {
				t.Fatalf("tail plans: %v with the tail budget, %v without, want one and none", held.tail, free.tail)
			}
			adhoc, bound := held.tail.adhoc.P99Ms, held.tail.boundMs
			if want := DefaultTailBudget * adhoc; math.Abs(bound-want) > 1e-9 {
				t.Errorf("p99 bound %.4g ms, want %.2fx ad-hoc's %.4g", bound, DefaultTailBudget, adhoc)
			}
			if got := held.tail.planned.P99Ms; got > bound {
				t.Errorf("planned p99 %.4g ms over the bound %.4g", got, bound)
			}
			// The table alone, priced by the same model.
			_, m, _ := gridModel(e, DefaultBudgetResolve)
			c, pop := free.Constrained()
			alone := smdp.FiniteTailLatency(m, pop, smdp.FiniteTailRule{First: c.First.Policy, Second: c.Second.Policy, Share: c.Share,
				HoldMs: float64(livedHold(free.wait, holdLate)) / float64(time.Millisecond)}, smdp.TailOptions{Requests: tailRequests, Seed: tailSeed})
			if !(alone.P99Ms > bound) {
				t.Errorf("the table without a hold bound lives p99 %.4g ms, within the bound %.4g: the test shows nothing", alone.P99Ms, bound)
			}
			if !(held.wait < free.wait) || !(held.saving() > 0) {
				t.Errorf("hold bound %v (without the tail budget %v), saving %.2f%%: want a shorter bound that still saves", held.wait, free.wait, 100*held.saving())
			}
			t.Logf("ad-hoc p99 %.4g ms, the table's %.4g, held %.4g with holds bounded at %v (was %v); saving %.2f%% (the table's %.2f%%)",
				adhoc, alone.P99Ms, held.tail.planned.P99Ms, held.wait, free.wait, 100*held.saving(), 100*free.saving())
		})
	}
}

// Near the capacity line a closed loop is planned only when its whole
// group fits in a batch (its waits cannot queue past one): a loop of more
// clients than B_max, which is also what a pool of connections under an
// open stream reads as while its feedback score wanders, is
// work-conserving there as an open stream is, and planned at light load.
func TestClosedLoopNearOverload(t *testing.T) {
	for _, tc := range []struct {
		clients int
		rho     float64
		thinkMs float64
		planned bool
	}{
		{8, 0.85, 0.3, true}, // the group fits in B_max 8
		{43, 0.85, 2, false}, // more than B_max: guarded
		{12, 0.3, 2, true},   // light load: planned
	} {
		t.Run(fmt.Sprintf("%d clients at rho %v", tc.clients, tc.rho), func(t *testing.T) {
			e := closedEstimate()
			_, m, _ := gridModel(e, DefaultBudgetResolve)
			e.RatePerSec = tc.rho * 1000 * m.ServiceMuPerMs(e.MaxBatch)
			e.Arrivals = int(e.RatePerSec)
			e.Callers = Callers{Known: true, ClosedLoop: tc.clients, ThinkMs: tc.thinkMs}
			p := newBudget(t, "1.10x")
			p.NoLearn = true
			r := p.Plan(e)
			_, finite := unwrapped(r).(FiniteRule)
			guarded := strings.Contains(r.Status().Note, "cannot tell rho")
			if finite != tc.planned || guarded == tc.planned {
				t.Errorf("planned as a loop %v, near-overload guard %v; want the loop planned %v (note %q)", finite, guarded, tc.planned, r.Status().Note)
			}
		})
	}
}
