package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Past their share of a core, the solving policies plan a new rate from
// the nearest rate solved, preferring one below it, and say so; without a
// meter (the simulator) every new rate is solved.
func TestSolveShareDefersToTheNearestRate(t *testing.T) {
	for _, tc := range []struct {
		name       string
		o          Options
		wantSolves int
	}{
		{"metered", NewOptions(BudgetOptions{LatencyBudget: "1.10x", SolveOptions: SolveOptions{SolveShare: 1e-6}}), 2},
		{"free", NewOptions(BudgetOptions{LatencyBudget: "1.10x", SolveOptions: SolveOptions{SolveShare: 1e-6, SolveFree: true}}), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := New(NameBudget, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			p := pol.(*Budget)
			p.NoLearn = true // the plans from the first
			// The first rate is always solved (nothing to plan from); the
			// second, a half higher, too here: the meter's first solve
			// sets when the next may come, and a millionth of a core
			// waits for days.
			low, high := energyEstimate(600), energyEstimate(1200)
			p.Plan(low)
			p.meter.next = p.meter.next.AddDate(-1, 0, 0) // let one more solve through
			p.Plan(high)
			if p.Solves() != 2 {
				t.Fatalf("%d solves of two rates, want 2", p.Solves())
			}
			mid := p.Plan(energyEstimate(900))
			if p.Solves() != tc.wantSolves {
				t.Fatalf("%d solves after a third rate, want %d", p.Solves(), tc.wantSolves)
			}
			note := mid.Status().Note
			deferred := strings.Contains(note, "planned from the nearest solved rate")
			if deferred != (tc.wantSolves == 2) {
				t.Fatalf("third rate's note %q: deferred %v", note, deferred)
			}
			if deferred && !strings.Contains(note, "at 597.6 req/s") {
				t.Errorf("third rate planned from %q, want the rate below (600 req/s, grid 597.6)", note)
			}
		})
	}
	if o := (SolveOptions{SolveShare: 1.5}); o.Validate() == nil {
		t.Error("solve_share 1.5 accepted")
	}
	if m := newSolveMeter(SolveOptions{}); m.share != DefaultSolveShare {
		t.Errorf("default share %v, want %v", m.share, DefaultSolveShare)
	}
}

// Past its share of a core, the budget plans a budget it has not solved
// with the loosest solved budget that is no looser, else it solves it:
// the live trim tightens a budget because the calls lived above it, and
// the looser budget's rule is the one they lived.
func TestDeferredBudgetIsNeverLooser(t *testing.T) {
	cached := func(rules map[smdp.Budget]string) *Budget {
		p := &Budget{caches: map[smdp.Budget]*planCache{}}
		for b, name := range rules {
			c := &planCache{}
			c.add(10, smdp.Model{MaxBatch: 8}, Limit{Policy: name, Limit: 2}, budgetCacheSize)
			p.caches[b] = c
		}
		return p
	}
	rel := func(f float64) smdp.Budget { return smdp.Budget{Factor: f} }
	abs := func(ms float64) smdp.Budget { return smdp.Budget{AbsoluteMs: ms} }
	for _, tc := range []struct {
		name   string
		solved map[smdp.Budget]string
		want   smdp.Budget
		rule   string // the cached rule's name
		none   bool   // nothing to plan from: solve
	}{
		{"its own budget", map[smdp.Budget]string{rel(1.10): "1.10x"}, rel(1.10), "1.10x", false},
		{"a tighter budget than any solved: solve", map[smdp.Budget]string{rel(1.10): "1.10x"}, rel(1.05), "", true},
		{"a looser budget takes the solved one", map[smdp.Budget]string{rel(1.10): "1.10x"}, rel(1.20), "1.10x", false},
		{"the loosest that is no looser", map[smdp.Budget]string{rel(1.02): "1.02x", rel(1.04): "1.04x", rel(1.10): "1.10x"}, rel(1.06), "1.04x", false},
		{"absolute, tighter: solve", map[smdp.Budget]string{abs(4): "4ms"}, abs(3), "", true},
		{"absolute, looser", map[smdp.Budget]string{abs(4): "4ms", abs(2): "2ms"}, abs(5), "4ms", false},
		{"no relative plan for an absolute budget: solve", map[smdp.Budget]string{rel(1.10): "1.10x"}, abs(5), "", true},
		{"nothing solved", map[smdp.Budget]string{}, rel(1.10), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := cached(tc.solved).nearest(tc.want, 12, 8)
			if tc.none {
				if ok {
					t.Fatalf("planned %v with nothing solved, want a solve", r)
				}
				return
			}
			if !ok {
				t.Fatal("no rule")
			}
			l, isLimit := r.(Limit)
			if !isLimit {
				t.Fatalf("rule %T", r)
			}
			if l.Policy != tc.rule {
				t.Fatalf("planned with %q's rule, want %q's", l.Policy, tc.rule)
			}
		})
	}
}

// A cached plan serves a fit and an energy line within the re-solve
// tolerance of the ones it was solved for, and no other: without a power
// meter the energy line is the fit itself, and an exact comparison of it
// had every slice of a simulated run miss the cache.
func TestPlanCacheTolerance(t *testing.T) {
	base := smdp.Model{MaxBatch: 8, LambdaPerMs: 0.5}
	base.AlphaMs, base.Tau0Ms = 1, 2
	base.BetaMJ, base.Zeta0MJ = 1, 2
	for _, tc := range []struct {
		name string
		move func(*smdp.Model)
		hit  bool
	}{
		{"same", func(*smdp.Model) {}, true},
		{"fit within 2%", func(m *smdp.Model) { m.AlphaMs *= 1.015; m.Tau0Ms *= 0.99 }, true},
		{"energy within 2%", func(m *smdp.Model) { m.BetaMJ *= 1.015; m.Zeta0MJ *= 0.99 }, true},
		{"slope 3% off", func(m *smdp.Model) { m.AlphaMs *= 1.03 }, false},
		{"energy slope 3% off", func(m *smdp.Model) { m.BetaMJ *= 1.03 }, false},
		{"energy intercept 5% off", func(m *smdp.Model) { m.Zeta0MJ *= 1.05 }, false},
		{"other B_max", func(m *smdp.Model) { m.MaxBatch = 16 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c planCache
			c.add(7, base, Fill{Batch: 8}, 4)
			m := base
			tc.move(&m)
			if _, hit := c.lookup(7, m, 0.02); hit != tc.hit {
				t.Errorf("lookup hit %v, want %v", hit, tc.hit)
			}
			if _, hit := c.lookup(8, base, 0.02); hit {
				t.Error("another grid rate hit")
			}
		})
	}
}

// The meter runs on the plan's clock (Estimate.Now): a replay planning on
// a virtual clock (the what-if) has its solves metered at their share of
// its own time, as the live proxy's are of the wall clock's. A rate that
// comes before the meter allows a solve is planned from the nearest; one
// that comes after, on the plan's clock, is solved, however little wall
// time passed.
func TestSolveShareRunsOnThePlansClock(t *testing.T) {
	pol, err := New(NameBudget, NewOptions(BudgetOptions{LatencyBudget: "1.10x", NoLearn: true, SolveOptions: SolveOptions{SolveShare: 0.01}}))
	if err != nil {
		t.Fatal(err)
	}
	p := pol.(*Budget)
	at := func(rate float64, later time.Duration) Estimate {
		e := energyEstimate(rate)
		e.Now = e.Now.Add(later)
		return e
	}
	p.Plan(at(600, 0))
	wait := p.meter.next.Sub(t0) // 100 times the solve's wall time
	if p.Solves() != 1 || wait <= 0 {
		t.Fatalf("%d solves, the next allowed %v later: want one, and a wait", p.Solves(), wait)
	}
	if note := p.Plan(at(1200, wait/2)).Status().Note; p.Solves() != 1 || !strings.Contains(note, "planned from the nearest solved rate") {
		t.Fatalf("a new rate within the wait: %d solves, note %q; want it planned from the nearest", p.Solves(), note)
	}
	if note := p.Plan(at(1200, wait+time.Millisecond)).Status().Note; p.Solves() != 2 || strings.Contains(note, "nearest solved rate") {
		t.Fatalf("the rate after the wait on the plan's clock: %d solves, note %q; want it solved", p.Solves(), note)
	}
}
