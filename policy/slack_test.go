package policy

import (
	"strings"
	"testing"
	"time"
)

func TestSlackDecide(t *testing.T) {
	// googlenet-p4, tau(b) = 0.3051 b + 1.052 ms. At 10 req/s Algorithm 1
	// targets 2; at 2000 req/s a larger batch.
	tau := func(b int, f float64) time.Duration {
		return time.Duration(f * (0.3051*float64(b) + 1.052) * float64(time.Millisecond))
	}
	plan := func(p Slack, rate float64) Rule { return p.Plan(estimate(rate)) }
	sla20 := Slack{SLA: 20 * time.Millisecond, Safety: 1.5}
	q := func(now float64, rows int, oldest float64, deadline float64) Queue {
		qq := Queue{Now: at(now), Rows: rows, OldestArrival: at(oldest), Instances: 1, MaxBatch: 32}
		if deadline > 0 {
			qq.EarliestDeadline = at(deadline)
		}
		return qq
	}
	target := batchAt2000
	tests := []struct {
		name string
		rule Rule
		q    Queue
		want Decision
	}{
		{"empty waits", plan(sla20, 2000), Queue{Now: at(0), Instances: 1, MaxBatch: 32}, Wait()},
		{"busy waits", plan(sla20, 2000), Queue{Now: at(0), Rows: 3, OldestArrival: at(0), InFlight: 1, Instances: 1, MaxBatch: 32}, Wait()},
		{"target reached sends the queue", plan(sla20, 2000), q(0, target+3, 0, 0), Send(target + 3)},
		{"below target waits until the slack for one more runs out", plan(sla20, 2000), q(1, 2, 0, 0),
			WaitUntil(at(20).Add(-tau(3, 1.5)))},
		{"slack gone sends early", plan(sla20, 2000), q(20, 2, 0, 0), Send(2)},
		{"the request's own deadline wins over the SLA", plan(sla20, 2000), q(1, 2, 0, 9), WaitUntil(at(9).Add(-tau(3, 1.5)))},
		{"an own deadline already past sends at once", plan(sla20, 2000), q(10, 1, 0, 5), Send(1)},
		{"the next row is not expected in time: send now", plan(sla20, 10), q(0, 1, 0, 0), Send(1)},
		{"max target collects up to B_max", plan(Slack{SLA: 20 * time.Millisecond, Safety: 1.5, Target: TargetMax}, 2000), q(1, 31, 0, 0),
			WaitUntil(at(20).Add(-tau(32, 1.5)))},
		{"no deadline at all falls back to tau(target)", plan(Slack{}, 2000), q(0, 1, 0, 0), WaitUntil(at(0).Add(tau(target, 1)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Decide(tt.q); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A batch sent when the rule says so completes before the earliest
// deadline whenever tau is predicted right, even with the safety factor at
// its minimum of 1.
func TestSlackMeetsDeadlines(t *testing.T) {
	for _, safety := range []float64{1, 1.5, 3} {
		rule := Slack{SLA: 15 * time.Millisecond, Safety: safety}.Plan(estimate(3000))
		for rows := 1; rows < 32; rows++ {
			q := Queue{Now: at(0), Rows: rows, OldestArrival: at(0), Instances: 1, MaxBatch: 32}
			d := rule.Decide(q)
			if d.Rows > 0 {
				continue
			}
			// Decide again exactly when asked: the rule must send then, and
			// the batch must finish by the deadline.
			q.Now = d.WakeAt
			d2 := rule.Decide(q)
			if d2.Rows != rows {
				t.Fatalf("safety %v rows %d: at its own wake-up the rule answered %+v", safety, rows, d2)
			}
			done := q.Now.Add(estimate(0).TauDuration(rows))
			if done.After(at(15)) {
				t.Fatalf("safety %v rows %d: batch ends %v after the deadline", safety, rows, done.Sub(at(15)))
			}
		}
	}
}

func TestSlackStatus(t *testing.T) {
	st := Slack{SLA: 30 * time.Millisecond}.Plan(estimate(10)).Status()
	if st.Policy != NameSlack || st.MaxWait != 30*time.Millisecond || st.BatchSize != 2 {
		t.Fatalf("Status = %+v", st)
	}
	if st := (Slack{}).Plan(estimate(10)).Status(); !strings.Contains(st.Note, "no SLA") {
		t.Fatalf("without an SLA the note should say so: %q", st.Note)
	}
}
