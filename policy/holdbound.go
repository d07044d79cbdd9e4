package policy

import (
	"fmt"
	"time"
)

// The hold bound (docs/ALGORITHMS.md, "The hold bound").
//
// A planned rule holds a partial batch for partners its model expects:
// Poisson arrivals at the measured rate, a closed loop of the callers the
// dispatcher counts. When the model is wrong the partners do not come and
// the hold lasts until the rule's own wait bound, which is sized from the
// model (the time the rate takes to fill the batch, a think time): a lone
// client whose calls each come on a new connection, planned as Poisson at
// its own rate, was held the time its own next call would take, fifty
// times a batch of one. No optimal plan holds that long. Merging a
// partner saves at most one batch's fixed cost, less than the batch's
// time T(B); a hold past a few such times costs the held rows more
// latency than the tail budgets allow (1.20x ad-hoc's p99 is a fifth of a
// latency of at least T(1) beyond it) and buys at most one T(B) of
// instance time per partner. So every planned rule is bounded at
// holdBatches times T(B), B its target batch, T(b) = tau(b) plus the
// proxy's own time around a batch, both as the plan learnt them; a rule
// whose plan allows a longer hold for its tail (an absolute p99 objective
// well above ad-hoc's) says so (HoldAllower) and is bounded there instead.

// holdBatches is the hold bound in batch times of the rule's target batch.
const holdBatches = 4

// HoldAllower is a Rule whose plan itself bounds how long it may hold the
// oldest row of a partial batch: an objective on the latency's tail (a p99
// bound less the batch's own time). The hold bound is then the larger of
// that and holdBatches batch times.
type HoldAllower interface {
	HoldAllowance() time.Duration
}

// HoldBound returns the longest r, planned from e, may hold the oldest row
// of a partial batch at a free instance, and false when r is not bounded:
// a built-in rule whose hold is the operator's own setting (Fill:
// maxbatch's max_queue_delay, static's max_wait; adhoc never holds), or an
// estimate without a usable latency line.
func HoldBound(r Rule, e Estimate) (time.Duration, bool) {
	if _, fill := r.(Fill); fill || r == nil {
		return 0, false
	}
	if e.Latency.Validate() != nil || e.MaxBatch < 1 {
		return 0, false
	}
	b := min(max(r.Status().BatchSize, 2), e.MaxBatch)
	ms := holdBatches * (e.Latency.TauMs(b) + e.Extra.HoldMs(b) + e.Extra.AfterMs(b))
	bound := time.Duration(ms * float64(time.Millisecond))
	if a, ok := r.(HoldAllower); ok {
		bound = max(bound, a.HoldAllowance())
	}
	return bound, bound > 0
}

// BoundHolds returns r with its holds bounded (HoldBound), or r itself
// when it is not bounded.
func BoundHolds(r Rule, e Estimate) Rule {
	bound, ok := HoldBound(r, e)
	if !ok {
		return r
	}
	return Bounded{Rule: r, Bound: bound}
}

// Bounded is a rule whose holds end Bound after the oldest row's arrival:
// once an instance is free and the oldest row has waited Bound, what waits
// is sent whatever the inner rule answers, and a wait asks to decide again
// by then.
type Bounded struct {
	Rule
	Bound time.Duration
}

// Decide implements Rule.
func (b Bounded) Decide(q Queue) Decision {
	d := b.Rule.Decide(q)
	if d.Rows > 0 || q.Rows <= 0 || !q.Free() || q.OldestArrival.IsZero() {
		return d
	}
	due := q.OldestArrival.Add(b.Bound)
	if !q.Now.Before(due) {
		n := q.Rows
		if q.MaxBatch > 0 {
			n = min(n, q.MaxBatch)
		}
		return Send(n)
	}
	if d.WakeAt.IsZero() || d.WakeAt.After(due) {
		d.WakeAt = due
	}
	return d
}

// Status implements Rule: the inner rule's, its MaxWait at most the bound.
func (b Bounded) Status() Status {
	st := b.Rule.Status()
	st.MaxWait = min(st.MaxWait, b.Bound)
	st.Note += fmt.Sprintf("; holds bounded at %v", b.Bound.Round(time.Microsecond))
	return st
}
