package policy

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// googlenet-p4 with its energy line; mu(B_max) is about 2959 req/s.
func energyEstimate(rate float64) Estimate {
	e := estimate(rate)
	e.BetaMJ, e.Zeta0MJ, e.HasEnergy = 19.9, 19.6, true
	return e
}

func newSMDP(t *testing.T, w1, w2 float64) *SMDP {
	t.Helper()
	p, err := NewSMDP(w1, w2)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSMDPFallbacks(t *testing.T) {
	bad := energyEstimate(1000)
	bad.AlphaMs = 0
	tests := []struct {
		name string
		e    Estimate
		note string
	}{
		{"before the first window", Estimate{Now: t0, Latency: googlenet, MaxBatch: 32, Instances: 1}, "no rate measured"},
		{"a window without arrivals", energyEstimate(0), "no arrivals"},
		{"overload", energyEstimate(4000), "overload"},
		{"an infinite rate", func() Estimate { e := energyEstimate(1); e.RatePerSec = math.Inf(1); return e }(), "overload"},
		{"unusable estimate", bad, "alpha"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newSMDP(t, 1, 0.1)
			r := p.Plan(tt.e)
			if st := r.Status(); st.Policy != NameSMDP || !strings.Contains(st.Note, tt.note) {
				t.Fatalf("Status = %+v, want a note mentioning %q", st, tt.note)
			}
			q := Queue{Now: at(0), Rows: 3, OldestArrival: at(0), Instances: 1, MaxBatch: 32}
			if d := r.Decide(q); d != Send(3) {
				t.Fatalf("fallback rule holds requests: %+v", d)
			}
			if p.Solves() != 0 {
				t.Fatalf("a fallback ran the solver %d times", p.Solves())
			}
		})
	}
}

// The live rule is the solved table: it waits below the control limit,
// serves the table's batch at and above it, and only while an instance is
// free. The table itself has the control-limit structure.
func TestSMDPRuleFollowsTable(t *testing.T) {
	// The rule solves at the rate's point on the geometric grid of ratio
	// 1.1 (DefaultResolve): 1.48 per ms is 1.1^4.11, so 1.1^4; 2.66 per ms
	// is 1.1^10.26, so 1.1^10.
	cases := []struct {
		rate, w2  float64
		gridPerMs float64
	}{
		{1480, 1, math.Pow(1.1, 4)},    // rho 0.5, limit above 1
		{1480, 0, math.Pow(1.1, 4)},    // latency only
		{2660, 0.1, math.Pow(1.1, 10)}, // rho 0.9
	}
	if testing.Short() {
		cases = cases[:1]
	}
	for _, c := range cases {
		p := newSMDP(t, 1, c.w2)
		r, ok := p.Plan(energyEstimate(c.rate)).(SMDPRule)
		if !ok {
			t.Fatalf("rate %v: Plan did not return a solved table: %+v", c.rate, p.Plan(energyEstimate(c.rate)).Status())
		}
		table, limit := r.Table(), r.ControlLimit()
		sol, m := r.Solution()
		if !sol.Converged || sol.Delta >= smdp.DeltaAccept {
			t.Fatalf("rate %v: solve not accepted: converged %v delta %v", c.rate, sol.Converged, sol.Delta)
		}
		if math.Abs(m.LambdaPerMs-c.gridPerMs) > 1e-12 {
			t.Fatalf("rate %v: solved at %v per ms, want the grid's %v", c.rate, m.LambdaPerMs, c.gridPerMs)
		}
		// The control limit is the first state whose action serves.
		first := slices.IndexFunc(table, func(a int) bool { return a > 0 })
		if limit != first || limit < 1 {
			t.Fatalf("rate %v: control limit %d, the table's first serving state is %d", c.rate, limit, first)
		}
		for s, a := range table {
			if (s < limit) != (a == 0) {
				t.Fatalf("rate %v w2 %v: not a control-limit table: action %d in state %d, limit %d", c.rate, c.w2, a, s, limit)
			}
		}
		st := r.Status()
		// A partial batch waits at most for the limit's arrivals plus three
		// Poisson standard deviations of them: (L + 3*sqrt(L))/lambda.
		wantWait := time.Duration(0)
		if limit > 1 {
			l := float64(limit)
			wantWait = time.Duration((l + 3*math.Sqrt(l)) / c.gridPerMs * float64(time.Millisecond))
		}
		if st.BatchSize != limit || st.MaxWait != wantWait || !strings.Contains(st.Note, "control limit") {
			t.Fatalf("Status = %+v, want limit %d wait %v", st, limit, wantWait)
		}
		for s := 0; s < len(table)+5; s++ {
			q := Queue{Now: at(10), Rows: s, Instances: 1, MaxBatch: 32}
			if s > 0 {
				q.OldestArrival = at(10)
			}
			d := r.Decide(q)
			switch a := smdp.ActionAt(table, s); {
			case s == 0:
				if d != Wait() {
					t.Fatalf("empty queue: %+v", d)
				}
			case a > 0:
				if d != Send(a) {
					t.Fatalf("state %d: Decide %+v, table serves %d", s, d, a)
				}
			default:
				if d != WaitUntil(at(10).Add(st.MaxWait)) {
					t.Fatalf("state %d: Decide %+v, want a wait bounded by %v", s, d, st.MaxWait)
				}
				q.Now = q.OldestArrival.Add(st.MaxWait)
				if d := r.Decide(q); d != Send(s) {
					t.Fatalf("state %d at the bound: Decide %+v, want Send(%d)", s, d, s)
				}
			}
			q.InFlight = 1
			if d := r.Decide(q); d != Wait() {
				t.Fatalf("state %d with the instance busy: Decide %+v", s, d)
			}
		}
		if c.w2 == 1 && limit < 2 {
			t.Fatalf("rate %v w2 1: limit %d; the test needs a waiting region", c.rate, limit)
		}
	}
}

// The price of power raises the control limit: batches grow with w2.
func TestSMDPLimitGrowsWithW2(t *testing.T) {
	w2s := []float64{0, 0.1, 0.3, 1, 3}
	if testing.Short() {
		w2s = []float64{0, 1}
	}
	var limits []int
	for _, w2 := range w2s {
		r, ok := newSMDP(t, 1, w2).Plan(energyEstimate(1480)).(SMDPRule)
		if !ok {
			t.Fatalf("w2 %v: no table", w2)
		}
		limits = append(limits, r.ControlLimit())
	}
	if !slices.IsSorted(limits) || limits[len(limits)-1] <= limits[0] {
		t.Fatalf("control limits %v over w2 %v: want non-decreasing and rising", limits, w2s)
	}
}

func TestSMDPCachesSolves(t *testing.T) {
	p := newSMDP(t, 1, 0.1)
	grid := 1000 * math.Pow(1.1, -1) // a grid rate: 909 req/s
	limitAt := func(e Estimate) int {
		t.Helper()
		r, ok := p.Plan(e).(SMDPRule)
		if !ok {
			t.Fatalf("no table at %v req/s", e.RatePerSec)
		}
		return r.ControlLimit()
	}
	steps := []struct {
		name   string
		e      Estimate
		solves int
	}{
		{"first window solves", energyEstimate(grid), 1},
		{"a 3% move reuses the table", energyEstimate(grid * 1.03), 1},
		{"a 3% drop reuses the table", energyEstimate(grid * 0.97), 1},
		{"a 30% move solves again", energyEstimate(grid * 1.3), 2},
		{"back to the first rate hits the cache", energyEstimate(grid), 2},
		{"alpha moving 5% reuses the table", func() Estimate { e := energyEstimate(grid); e.AlphaMs *= 1.05; return e }(), 2},
		{"alpha moving 20% solves again", func() Estimate { e := energyEstimate(grid); e.AlphaMs *= 1.2; return e }(), 3},
		{"a different energy line solves again", func() Estimate { e := energyEstimate(grid); e.Zeta0MJ *= 2; return e }(), 4},
	}
	for _, s := range steps {
		limitAt(s.e)
		if got := p.Solves(); got != s.solves {
			t.Fatalf("%s: %d solves, want %d", s.name, got, s.solves)
		}
	}
}

func TestSMDPWithoutEnergyIgnoresW2(t *testing.T) {
	e := energyEstimate(1480)
	e.BetaMJ, e.Zeta0MJ, e.HasEnergy = 0, 0, false
	heavy, ok1 := newSMDP(t, 1, 5).Plan(e).(SMDPRule)
	none, ok2 := newSMDP(t, 1, 0).Plan(e).(SMDPRule)
	if !ok1 || !ok2 {
		t.Fatal("no table")
	}
	if !strings.Contains(heavy.Status().Note, "w2 has no effect") {
		t.Fatalf("note %q should say w2 has no effect", heavy.Status().Note)
	}
	if !slices.Equal(heavy.Table(), none.Table()) {
		t.Fatal("without energy figures w2 changed the table")
	}
}

func TestSMDPSmallSMaxIsRaised(t *testing.T) {
	p := newSMDP(t, 1, 0.1)
	p.SMax = 10 // below B_max 32
	r, ok := p.Plan(energyEstimate(300)).(SMDPRule)
	if !ok || !strings.Contains(r.Status().Note, "raised to B_max") || len(r.Table()) < 34 {
		t.Fatalf("rule %+v", p.Plan(energyEstimate(300)).Status())
	}
}

// Decide runs on every queue event; it must stay a table lookup.
func BenchmarkSMDPRuleDecide(b *testing.B) {
	p, err := NewSMDP(1, 1)
	if err != nil {
		b.Fatal(err)
	}
	r := p.Plan(energyEstimate(1480))
	q := Queue{Now: at(10), Rows: 5, OldestArrival: at(9), Instances: 1, MaxBatch: 32}
	b.ReportAllocs()
	for b.Loop() {
		q.Rows = q.Rows%40 + 1
		r.Decide(q)
	}
}

// Plan runs once per window; with the rate on a known grid point it must
// not solve again.
func BenchmarkSMDPPlanCached(b *testing.B) {
	p, err := NewSMDP(1, 0.1)
	if err != nil {
		b.Fatal(err)
	}
	e := energyEstimate(1480)
	p.Plan(e)
	b.ReportAllocs()
	for b.Loop() {
		p.Plan(e)
	}
	if p.Solves() != 1 {
		b.Fatalf("%d solves", p.Solves())
	}
}

func TestPoissonWait(t *testing.T) {
	for _, tc := range []struct {
		limit  int
		lambda float64
		want   time.Duration
	}{
		{1, 1, 0},                     // a lone row never waits
		{4, 1, 10 * time.Millisecond}, // 4 + 3*2 arrivals at one a millisecond
		{9, 2, 9 * time.Millisecond},  // (9 + 9) / 2
		{4, 0, 0},                     // no rate: no bound to derive
	} {
		if got := poissonWait(tc.limit, tc.lambda); got != tc.want {
			t.Errorf("poissonWait(%d, %v) = %v, want %v", tc.limit, tc.lambda, got, tc.want)
		}
	}
}
