package policy

import (
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// allowing is a rule whose plan allows a hold for its tail.
type allowing struct {
	Limit
	allow time.Duration
}

func (a allowing) HoldAllowance() time.Duration { return a.allow }

// A planned rule's hold ends at holdBatches times its target batch's
// time, as the estimate learnt it, whatever its own wait bound; a rule
// whose plan allows more for its tail keeps it; the operator's own holds
// (Fill) and rules planned without a line are left alone; a decision to
// send, or with no instance free, is the inner rule's.
func TestHoldBound(t *testing.T) {
	e := Estimate{Window: time.Second, MaxBatch: 8, Instances: 1,
		Latency: batchcost.Latency{AlphaMs: 0.1, Tau0Ms: 0.3},
		Extra:   smdp.Extra{HoldLoneMs: 0.05, HoldMergedMs: 0.08, AfterLoneMs: 0.02, AfterMergedMs: 0.04}}
	t2 := e.Latency.TauMs(2) + e.Extra.HoldMs(2) + e.Extra.AfterMs(2)
	lone := Limit{Policy: NameBudget, Limit: 2, MaxWait: 62 * time.Millisecond}
	for _, tc := range []struct {
		name    string
		r       Rule
		e       Estimate
		want    time.Duration
		bounded bool
	}{
		{"planned hold", lone, e, time.Duration(holdBatches * t2 * float64(time.Millisecond)), true},
		{"target of four", Limit{Policy: NameBudget, Limit: 4}, e,
			time.Duration(holdBatches * (e.Latency.TauMs(4) + 0.12) * float64(time.Millisecond)), true},
		{"target beyond B_max", Limit{Policy: NameBudget, Limit: 99}, e,
			time.Duration(holdBatches * (e.Latency.TauMs(8) + 0.12) * float64(time.Millisecond)), true},
		{"tail allows more", allowing{lone, 9 * time.Millisecond}, e, 9 * time.Millisecond, true},
		{"tail allows less", allowing{lone, time.Microsecond}, e, time.Duration(holdBatches * t2 * float64(time.Millisecond)), true},
		{"maxbatch's delay", MaxBatch{MaxQueueDelay: time.Second}.Plan(e), e, 0, false},
		{"no line", lone, Estimate{MaxBatch: 8, Instances: 1}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := HoldBound(tc.r, tc.e)
			if ok != tc.bounded || (ok && (got-tc.want).Abs() > time.Microsecond) {
				t.Fatalf("HoldBound = %v %v, want %v %v", got, ok, tc.want, tc.bounded)
			}
			if _, wrapped := BoundHolds(tc.r, tc.e).(Bounded); wrapped != tc.bounded {
				t.Fatalf("BoundHolds wrapped %v, want %v", wrapped, tc.bounded)
			}
		})
	}

	r := BoundHolds(lone, e)
	bound, _ := HoldBound(lone, e)
	if bound >= lone.MaxWait/10 {
		t.Fatalf("bound %v: no tighter than the rule's own %v", bound, lone.MaxWait)
	}
	t0 := time.Unix(1000, 0)
	q := Queue{Now: t0, Rows: 1, OldestArrival: t0, Instances: 1, MaxBatch: 8}
	if d := r.Decide(q); d.Rows != 0 || !d.WakeAt.Equal(t0.Add(bound)) {
		t.Fatalf("a fresh row: %+v, want a wait until %v", d, t0.Add(bound))
	}
	q.Now = t0.Add(bound)
	if d := r.Decide(q); d.Rows != 1 {
		t.Fatalf("a row held the bound: %+v, want it sent", d)
	}
	if d := lone.Decide(q); d.Rows != 0 {
		t.Fatalf("the inner rule sends at the bound (%+v): the test shows nothing", d)
	}
	q.InFlight = 1
	if d := r.Decide(q); d.Rows != 0 {
		t.Fatalf("no instance free: %+v, want a wait", d)
	}
	q.InFlight, q.Rows = 0, 2
	if d := r.Decide(q); d.Rows != 2 {
		t.Fatalf("the inner rule's send: %+v, want 2 rows", d)
	}
	if st := r.Status(); st.MaxWait != bound || st.BatchSize != 2 {
		t.Fatalf("status %+v: want max wait %v, batch 2", st, bound)
	}
}
