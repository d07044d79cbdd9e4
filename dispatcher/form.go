package dispatcher

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/policy"
)

// run is the decision loop: it re-decides on every arrival, completion,
// rule change and on the wake-up time the rule asked for, and keeps those
// appointments itself. Every batch it forms goes to its first caller.
func (q *modelQueue) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		next := q.dispatch(nil)
		if !next.IsZero() {
			timer.Reset(max(next.Sub(q.d.now()), 0))
		}
		q.mu.Lock()
		planner := q.spec.Planner
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-q.wake:
		case <-planner.Changed():
		case <-timer.C:
		}
		timer.Stop()
	}
}

// afterArrival is Submit's pass right after own was queued. It returns the
// batch holding own, if one leaves now, for the caller to run on its own
// goroutine (no hand-off at low load); the other batches are launched.
func (q *modelQueue) afterArrival(own *Call) *batch {
	var mine *batch
	q.keepAppointment(q.dispatch(func(b *batch) bool {
		if mine == nil && slices.Contains(b.Calls, own) {
			mine = b
			return true
		}
		return false
	}))
	return mine
}

// afterOwnBatch is a caller's pass once the batch it ran freed an
// instance: what queued meanwhile is launched.
func (q *modelQueue) afterOwnBatch() { q.keepAppointment(q.dispatch(nil)) }

// keepAppointment wakes the decision loop when the rule asked to decide
// again at a later time: a caller does not wait for it.
func (q *modelQueue) keepAppointment(next time.Time) {
	if !next.IsZero() {
		q.signal()
	}
}

// dispatch forms every batch the rule wants now and launches each, except
// those keep claims for the calling goroutine. It returns when to decide
// again (zero: on the next event).
func (q *modelQueue) dispatch(keep func(*batch) bool) (next time.Time) {
	batches, next := q.form()
	for i := range batches {
		if keep != nil && keep(&batches[i]) {
			continue
		}
		q.launch(&batches[i]) // form's slice: already on the heap
	}
	return next
}

// form takes out of the queue every batch the rule wants now, counting
// them in flight, and returns them with when to decide again.
func (q *modelQueue) form() (batches []batch, next time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// A panic of the rule (policy code) keeps the batches formed so far,
	// already out of the queue and counted in flight, and leaves the rest
	// queued; until the planner publishes a new rule the queue is then
	// decided as when draining (full batches at once), so that no caller
	// waits on a rule that cannot decide.
	defer func() {
		if v := recover(); v != nil {
			guard.Recovered(q.d.o.Logger, "decision", v)
			q.ruleBroken = q.spec.Planner.Rule()
			q.signal()
		}
	}()
	now := q.d.now()
	next = q.expire(now)
	rule := q.spec.Planner.Rule()
	fallback := q.draining || q.retired || (q.ruleBroken != nil && sameRule(q.ruleBroken, rule))
	formedBy := rule // Batch.Rule
	if fallback {
		formedBy = nil
	}
	idle, known := q.src.idle(now)
	q.order = q.byLevel(q.order)
	for _, k := range q.order {
		for {
			head := k.head()
			if head == nil {
				delete(q.keys, k.key)
				k.key, q.spare = "", k
				break
			}
			if q.inFlight >= q.spec.Instances {
				break
			}
			want, wake := q.decide(rule, fallback, k, head, now, idle, known)
			if want <= 0 {
				if wake.After(now) && (next.IsZero() || wake.Before(next)) {
					next = wake
				}
				break
			}
			calls, rows := k.take(want, nil)
			if len(calls) == 0 {
				continue
			}
			batches = append(batches, q.formed(calls, rows, now, formedBy))
		}
	}
	clear(q.order) // no key queue kept past the pass
	if q.draining && q.rows == 0 && q.inFlight == 0 && !q.idleClosed {
		q.idleClosed = true
		close(q.idle)
	}
	return batches, next
}

// decide is how many rows of key queue k to send now, whose oldest call
// is head: one call when the queue is retired, a full batch when it falls
// back (draining, or a rule that panicked), else what the rule decides,
// told to the observer. When it sends none, wake is when the rule asks to
// decide again (zero: at the next event). Called with q.mu held.
func (q *modelQueue) decide(rule policy.Rule, fallback bool, k *keyQueue, head *Call, now time.Time, idle int, known bool) (want int, wake time.Time) {
	if q.retired {
		return 1, time.Time{} // each call alone (take always takes one)
	}
	if fallback {
		return q.spec.MaxBatch, time.Time{}
	}
	d := rule.Decide(policy.Queue{
		Now: now, Rows: k.rows, OldestArrival: head.arrived,
		EarliestDeadline: k.earliestDeadline(head),
		InFlight:         q.inFlight, InFlightRows: q.inFlightRows,
		Instances: q.spec.Instances, MaxBatch: q.spec.MaxBatch,
		IdleSources: idle, SourcesKnown: known,
	})
	if q.obs != nil {
		q.obs.Decided(Decision{Model: q.name, At: now, Rows: k.rows, Oldest: now.Sub(head.arrived), InFlight: q.inFlight,
			IdleSources: idle, SourcesKnown: known, Send: min(max(d.Rows, 0), q.spec.MaxBatch), WakeAt: d.WakeAt})
	}
	if d.Rows <= 0 {
		return 0, d.WakeAt
	}
	return min(d.Rows, q.spec.MaxBatch), time.Time{}
}

// formed counts the calls taken out of the queue as one batch in flight
// and returns it. Called with q.mu held.
func (q *modelQueue) formed(calls []*Call, rows int, now time.Time, formedBy policy.Rule) batch {
	forwardTimeout(calls, now)
	q.rows -= rows
	q.inFlight++
	q.inFlightRows += rows
	q.batchesSent++
	q.rowsSent += int64(rows)
	return batch{Batch: Batch{Model: q.name, Calls: calls, Rows: rows, Formed: now, Rule: formedBy},
		planner: q.spec.Planner, obs: q.obs, instances: q.spec.Instances, halfOutputs: q.spec.HalfOutputs}
}

// sameRule reports whether a and b are one rule; rules that cannot be
// compared (a func field, say) are taken as different, so a fallback
// lasts one pass.
func sameRule(a, b policy.Rule) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// launch hands a batch to its first caller, waiting in Submit, to run. A
// worker goroutine would cost a wake-up more per batch: one to start the
// worker and one per caller it answers, where the first caller is woken
// once and answers itself. The send never blocks: a taken call's channel
// is empty until its batch answers it, and only this batch will.
func (q *modelQueue) launch(b *batch) {
	b.Calls[0].done <- Result{run: b}
}

// expire answers queued calls whose Triton timeout has passed and returns
// the next expiry. Called with q.mu held.
func (q *modelQueue) expire(now time.Time) time.Time {
	var next time.Time
	for _, k := range q.keys {
		if k.expiring == 0 {
			continue
		}
		var gone []*Call
		k.each(func(c *Call) {
			switch {
			case c.Expire.IsZero():
			case !c.Expire.After(now):
				gone = append(gone, c)
			case next.IsZero() || c.Expire.Before(next):
				next = c.Expire
			}
		})
		for _, c := range gone {
			// Triton's answer to a request timed out in its queue: the
			// status UNAVAILABLE, this text (dynamic_batch_scheduler.cc).
			if c.state.CompareAndSwap(stateQueued, stateCancelled) {
				k.cancel(c)
				q.rows -= c.Rows
				q.src.leave(c.Source, now)
				q.d.o.Metrics.rejected(q.name, "timeout")
				q.deliver(c, Result{Err: &kserve.Error{Status: http.StatusServiceUnavailable, Msg: "Request timeout expired"},
					Queued: now.Sub(c.arrived)})
			}
		}
	}
	return next
}

// The queue is decided on by two kinds of goroutine, each at its own
// moment: the decision loop (run) on rule changes, wake-ups and signals;
// and a caller, right after enqueueing (afterArrival) and after running a
// batch (afterOwnBatch), which freed an instance. All form batches with the
// same pass (form); they differ in which batch, if any, they run themselves
// and in who keeps the rule's next appointment. A batch the deciding
// goroutine does not run itself goes to its first caller (launch): every
// batch runs on the goroutine of one of its own callers.
