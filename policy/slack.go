package policy

import (
	"fmt"
	"time"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// NameSlack is the SLA-aware slack policy.
const NameSlack = "slack"

// DefaultSlackSafety is how much the slack policy over-estimates a batch's
// execution time. The fitted tau(b) is a mean; a batch can run longer
// (jitter, a cold GPU clock, the upstream's own queueing), and a deadline
// missed by a little is missed all the same. 1.5 covers the +-20% spread
// the emulator and the simulator's jitter produce with room to spare, at the
// price of sending a little earlier than strictly needed.
const DefaultSlackSafety = 1.5

// Slack is SLA-aware batching (ALGORITHMS.md section 5). Every row has a
// deadline: its own (the dispatcher fills Queue.EarliestDeadline from the
// request's timeout parameter or the model's SLA) or, failing that,
// arrival + SLA. While an instance is free the rule collects rows up to a
// target and sends min(queue, B_max) once the target is reached; it sends
// early, whatever it holds, as soon as waiting for one more row could make
// the earliest deadline slip:
//
//	EarliestDeadline - Now <= Safety * tau(rows + 1)
//
// Waiting only pays if rows come: while the measured rate says the next row
// is not expected before the slack runs out (1/rate beyond that point), the
// rule sends what it holds at once instead of holding it to the deadline.
// Without any deadline (no SLA configured and none in the request) a
// partial batch waits at most tau(target), as in BatchMonitor.
//
// Target is Algorithm 1's batch size for the measured rate (TargetRate), or
// B_max (TargetMax): the largest batches the SLA allows, the most
// energy-efficient choice. Node-level preemption (LazyBatching proper) is
// not possible in front of an unmodified server; this rule is the part of it
// that is.
type Slack struct {
	SLA    time.Duration // deadline of rows without their own; 0: none
	Safety float64       // >= 1; 0 selects DefaultSlackSafety
	Target string        // TargetRate (default) or TargetMax
}

// Slack targets.
const (
	TargetRate = "rate"
	TargetMax  = "max"
)

func init() {
	Register(NameSlack, func(o SlackOptions) (Policy, error) {
		return Slack{SLA: o.SLA, Safety: or(o.Safety, DefaultSlackSafety), Target: o.Target}, nil
	})
}

// SlackOptions are slack's options; Target is TargetRate (default) or
// TargetMax.
type SlackOptions struct {
	DeadlineOptions `yaml:",inline"`
	Target          string `yaml:"-"`
}

// Validate implements validator.
func (o SlackOptions) Validate() error {
	if o.Target != "" && o.Target != TargetRate && o.Target != TargetMax {
		return paramErr("target", "must be %q or %q, got %q", TargetRate, TargetMax, o.Target)
	}
	return o.DeadlineOptions.Validate()
}

// Name implements Policy.
func (Slack) Name() string { return NameSlack }

// Plan implements Policy.
func (p Slack) Plan(e Estimate) Rule {
	if err := e.Validate(); err != nil {
		return fallback(NameSlack, e, err)
	}
	safety := p.Safety
	if !(safety >= 1) {
		safety = DefaultSlackSafety
	}
	target := e.MaxBatch
	if p.Target != TargetMax {
		target = 1
		if e.Observed() {
			target = ChooseBatch(e.RatePerSec, e.Latency, e.MaxBatch)
		}
	}
	r := SlackRule{target: target, sla: p.SLA, safety: safety, line: e.Latency}
	if e.Observed() && e.RatePerSec > 0 {
		r.gap = time.Duration(float64(time.Second) / e.RatePerSec)
	}
	return r
}

// SlackRule is one planned slack rule.
type SlackRule struct {
	target int
	sla    time.Duration
	safety float64
	line   batchcost.Latency
	gap    time.Duration // mean time between arrivals; 0: unknown
}

// Decide implements Rule.
func (r SlackRule) Decide(q Queue) Decision {
	if q.Rows <= 0 || !q.Free() {
		return Wait()
	}
	n := q.Rows
	if q.MaxBatch > 0 {
		n = min(n, q.MaxBatch)
	}
	if q.Rows >= r.target {
		return Send(n)
	}
	deadline := q.EarliestDeadline
	if deadline.IsZero() && r.sla > 0 && !q.OldestArrival.IsZero() {
		deadline = q.OldestArrival.Add(r.sla)
	}
	var due time.Time
	if deadline.IsZero() {
		due = q.OldestArrival.Add(r.tau(r.target, 1))
	} else {
		// The batch we would send after one more arrival, over-estimated.
		due = deadline.Add(-r.tau(n+1, r.safety))
		if r.gap > 0 && q.Now.Add(r.gap).After(due) {
			return Send(n) // the next row is not expected in time
		}
	}
	if !q.Now.Before(due) {
		return Send(n)
	}
	return WaitUntil(due)
}

func (r SlackRule) tau(b int, factor float64) time.Duration {
	return time.Duration(factor * r.line.TauMs(b) * float64(time.Millisecond))
}

// Status implements Rule. MaxWait is the SLA (the longest a row without its
// own deadline can wait), or tau(target) without one.
func (r SlackRule) Status() Status {
	wait := r.sla
	note := fmt.Sprintf("deadline: sends early when the slack falls to %.2g x tau(rows+1)", r.safety)
	if wait == 0 {
		wait = r.tau(r.target, 1)
		note = fmt.Sprintf("no SLA configured: requests without a timeout wait at most tau(%d); %s", r.target, note)
	}
	return Status{Policy: NameSlack, BatchSize: r.target, MaxWait: wait, Note: note}
}
