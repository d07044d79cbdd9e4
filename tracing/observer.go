package tracing

import (
	"context"
	"errors"

	"github.com/ratebatch/ratebatch/dispatcher"
	"go.opentelemetry.io/otel/trace"
)

// Batches is the dispatcher.Observer that traces batches: in BatchStarted
// it starts the batch's span linked to its members' spans, records on
// each member's span its wait and its batch, and hands the batch's context
// to the upstream call (dispatcher.Batch.Ctx), whose client injects it as
// traceparent; in BatchEnded it ends the span. The policy on the members'
// spans is the batch's own rule's (dispatcher.Batch.Rule), so a traced
// batch asks no one else for it.
type Batches struct {
	dispatcher.NopObserver
	T *Tracer
}

var _ dispatcher.Observer = (*Batches)(nil)

// errBatchFailed marks a batch span whose upstream call did not answer the
// whole batch; each member's own span carries its own outcome.
var errBatchFailed = errors.New("the batch failed")

// BatchStarted starts b's span when one of its calls is sampled: a batch
// of requests no one asked to trace costs nothing more.
func (o *Batches) BatchStarted(b *dispatcher.Batch) {
	if o == nil || o.T == nil {
		return
	}
	members := make([]context.Context, 0, len(b.Calls))
	traced := false
	for _, c := range b.Calls {
		ctx := c.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		if trace.SpanContextFromContext(ctx).IsSampled() {
			traced = true
		}
		members = append(members, ctx)
	}
	if !traced {
		return
	}
	ctx, span := o.T.StartBatch(members, b.Model, b.Rows)
	b.Ctx = ctx
	policy := "" // the batch left without its rule's decision
	if b.Rule != nil {
		policy = b.Rule.Status().Policy
	}
	sc := span.SpanContext()
	for i, c := range b.Calls {
		Batched(trace.SpanFromContext(members[i]), b.Started.Sub(c.Arrived()), b.Rows, len(b.Calls), policy, sc)
	}
}

// BatchEnded ends b's span, if BatchStarted started one.
func (o *Batches) BatchEnded(b *dispatcher.Batch, e dispatcher.BatchEnd) {
	if b.Ctx == nil {
		return
	}
	span := trace.SpanFromContext(b.Ctx)
	if !span.SpanContext().IsValid() {
		return
	}
	var err error
	if !e.OK {
		err = errBatchFailed
	}
	EndBatch(span, e.RoundTrip, err)
}
