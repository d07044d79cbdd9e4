package dispatcher

import (
	"context"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// Observer learns what the dispatcher does with a model's calls: the one
// way out of the request path. The model's monitor learns its arrival rate
// and batch times from it, the energy meter when the GPUs are busy, the
// decision log writes it down, and tests record it; a Dispatcher tells
// each model's ModelSpec.Observer and Options.Observer (joined as
// Observers) of every event of that model.
//
// The methods are called on the request path, some with the model's queue
// locked (Arrived after it, Decided under it): they must be quick, must not
// block and must not call the Dispatcher. The events are values, and a
// *Batch is the dispatcher's own: an observer keeps what it needs, not the
// pointers. A panic in BatchStarted or BatchEnded is contained and counted
// (the batch goes on). An observer with nothing to do for some events embeds
// NopObserver; one that wraps another must forward every method (the
// interface has all of them, so the compiler sees a wrapper that does not).
//
// Tracing plugs in here. Each Call carries the context its door gave
// Submit (Call.Context), where a tracer finds the caller's span; in
// BatchStarted a tracer starts the batch's span, linked to its members'
// (Batch.Calls), and stores it in Batch.Ctx, the context the upstream call
// is made with (Upstream.Infer), so that the upstream client can inject
// it (a traceparent); BatchEnded ends it from Batch.Ctx.
type Observer interface {
	// Arrived: a call entered its model's queue.
	Arrived(Arrival)
	// Decided: the model's rule decided on one key's queue (not when the
	// queue drains or the rule has failed, when batches leave full).
	Decided(Decision)
	// BatchStarted: a batch is about to be sent. An observer may read
	// b.Calls (not keep them) and set b.Ctx to a context derived from it;
	// the observers after it in Observers see it set.
	BatchStarted(b *Batch)
	// BatchEnded: the batch's callers have their answers and its instance
	// is free. b.Calls is nil by then: the callers may have reused them.
	BatchEnded(b *Batch, e BatchEnd)
	// Answered: a caller has written the answer of a batch that succeeded
	// (its door called Dispatcher.Delivered).
	Answered(Answer)
}

// Arrival is a call entering its model's queue.
type Arrival struct {
	Model string
	At    time.Time
	// Call is the call that arrived; nil outside the live dispatcher (the
	// simulator). Its fields are the caller's: read, do not keep.
	Call *Call
	Rows int // the call's rows
	// Queued is the model's queued rows with this call's.
	Queued int
	// Caller is what the queue took the call's caller for as it arrived
	// (its connection's kind, as the plan reads the callers).
	Caller CallerKind
}

// Decision is one decision of a model's rule on one key's queue.
type Decision struct {
	Model string
	At    time.Time
	// Rows are the key's queued rows, the oldest of them waiting Oldest.
	Rows   int
	Oldest time.Duration
	// InFlight is the model's batches in flight.
	InFlight int
	// IdleSources is how many known callers could still send a call now;
	// SourcesKnown is false when some callers cannot be counted.
	IdleSources  int
	SourcesKnown bool
	// Send is the rows the rule sends now (at most the model's max batch);
	// 0: it waits, until WakeAt at the latest.
	Send   int
	WakeAt time.Time
}

// PartnerPossible reports whether another call could still have come to
// join the batch at this decision: a caller was idle, or the callers
// unknown. When none could, the rule sends at once whatever its plan, and
// a plan need not be solved again for such decisions.
func (d Decision) PartnerPossible() bool { return !d.SourcesKnown || d.IdleSources > 0 }

// Batch is one batch on its way to the upstream.
type Batch struct {
	Model string
	// Calls are the batch's callers, in the order of its rows; nil in
	// BatchEnded.
	Calls []*Call
	Rows  int
	// Formed is when the rule sent the batch, Started when it began to
	// run (BatchStarted).
	Formed, Started time.Time
	// Rule is the rule that formed the batch, whose Status names its
	// policy (a tracer labels the batch with it); nil when the batch left
	// full without a decision (the queue draining, or the rule failed). An
	// observer may read it, not call Decide.
	Rule policy.Rule
	// Ctx is the context of the batch's upstream call (Upstream.Infer):
	// context.Background() unless an observer set it in BatchStarted.
	Ctx context.Context
}

// BatchEnd is how a batch ended.
type BatchEnd struct {
	At    time.Time // when its instance was free again
	Rows  int
	Calls int // the batch's callers
	// OK reports that the upstream answered the whole batch; RoundTrip is
	// then its time, which teaches the model's batch time, and Hold the
	// proxy's own time the batch held its instance beyond the round trip
	// (handing it to the goroutine that runs it, merging, decoding and
	// splitting the answer, delivering the parts), which a plan must count
	// beside it. Both are zero when not OK.
	OK        bool
	RoundTrip time.Duration
	Hold      time.Duration
	// Served is the rows answered without an error.
	Served int
}

// Answer is a caller's answer written by its door.
type Answer struct {
	Model string
	// Arrived is when the call began to arrive (Call.Received, else when
	// it was queued); Latency runs from there to the answer's being
	// written: the call's latency as the proxy can see it, against which
	// a plan's promise is checked (the budget policy's live trim).
	Arrived time.Time
	Latency time.Duration
	// After is how long the answer took from its batch's end to its being
	// written: the wake-up of a caller that did not run the batch, and the
	// encoding of its part.
	After time.Duration
	Calls int // callers in the call's batch
}

// NopObserver does nothing; an Observer with nothing to do for some
// events embeds it.
type NopObserver struct{}

func (NopObserver) Arrived(Arrival)             {}
func (NopObserver) Decided(Decision)            {}
func (NopObserver) BatchStarted(*Batch)         {}
func (NopObserver) BatchEnded(*Batch, BatchEnd) {}
func (NopObserver) Answered(Answer)             {}

// Observers tells each of its observers of every event, in order.
type Observers []Observer

func (obs Observers) Arrived(a Arrival) {
	for _, o := range obs {
		o.Arrived(a)
	}
}

func (obs Observers) Decided(d Decision) {
	for _, o := range obs {
		o.Decided(d)
	}
}

func (obs Observers) BatchStarted(b *Batch) {
	for _, o := range obs {
		o.BatchStarted(b)
	}
}

func (obs Observers) BatchEnded(b *Batch, e BatchEnd) {
	for _, o := range obs {
		o.BatchEnded(b, e)
	}
}

func (obs Observers) Answered(a Answer) {
	for _, o := range obs {
		o.Answered(a)
	}
}

// join is the observer that tells each of the observers that is not nil:
// nil for none (the dispatcher then skips the events and their clock
// readings), the one, or Observers.
func join(each ...Observer) Observer {
	var out Observers
	for _, o := range each {
		if o != nil {
			out = append(out, o)
		}
	}
	switch len(out) {
	case 0:
		return nil
	case 1:
		return out[0]
	}
	return out
}
