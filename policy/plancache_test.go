package policy

import (
	"strings"
	"testing"
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
		{"metered", Options{LatencyBudget: "1.10x", SolveShare: 1e-6}, 2},
		{"free", Options{LatencyBudget: "1.10x", SolveShare: 1e-6, SolveFree: true}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := New(NameBudget, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			p := pol.(*Budget)
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
	if o := (Options{SolveShare: 1.5}); o.Validate() == nil {
		t.Error("solve_share 1.5 accepted")
	}
	if m := newSolveMeter(Options{}); m.share != DefaultSolveShare {
		t.Errorf("default share %v, want %v", m.share, DefaultSolveShare)
	}
}
