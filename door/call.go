package door

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/tracing"
)

// Backend is what every door shares: the queues behind them and what
// watches them. The server sets it once and gives it to each door, which
// makes its Door of it (New).
type Backend struct {
	Batcher Batcher
	// Discoverer, when set, looks a model up upstream the first time a
	// call names it (Door.Batches).
	Discoverer Discoverer
	// Health, when set, turns the doors' readiness answers (Triton's
	// server and model readiness) not ready while the upstream, or the
	// model, is failing; otherwise they are Triton's own.
	Health Health
	// Memory, when set, is the budget (limits.memory) every door admits
	// the calls of batched models and their answers against; nil: none.
	Memory *membudget.Budget
	// Tracer, when set, gives each batched call a span in its client's
	// trace; nil: tracing off.
	Tracer *tracing.Tracer
	// Metrics are the doors' series; nil: counted nowhere.
	Metrics *Metrics
	// Forward picks the headers of a batched call that go upstream with
	// its batch and key it (Admission.Forward); nil: Authorization alone.
	Forward *Forwarding
}

// Door is one front door's part of the contract: the Backend with the
// door's protocol, and the call path every door takes for an inference
// call of a batched model (Batches, Admit, then the Admission's Submit,
// Answered and Release), so that a call is admitted, queued, answered and
// counted the same way whichever door it came through, and a new door is
// a package that reads its protocol and writes its answers, nothing else.
type Door struct {
	Backend
	Protocol Protocol

	latency sync.Map // model -> prometheus.Observer, bound once per model
	// passed and passFailed are the pass-through counters of this door,
	// bound once: every pass-through counts.
	passed, passFailed prometheus.Counter
}

// New returns the door of protocol p on b.
func New(b Backend, p Protocol) *Door {
	if b.Metrics == nil {
		b.Metrics = NewMetrics(nil)
	}
	if b.Forward == nil {
		b.Forward, _ = NewForwarding(nil, nil, "") // Authorization: cannot fail
	}
	return &Door{Backend: b, Protocol: p,
		passed:     b.Metrics.Passthrough.WithLabelValues(string(p)),
		passFailed: b.Metrics.PassthroughErrors.WithLabelValues(string(p))}
}

// Batches reports whether the proxy batches model, looking it up upstream
// first when it is not known yet, so that the first calls of a model the
// repository index did not list are batched too. The lookup runs on its
// own context, not the caller's: callers naming the same model wait for
// one lookup, which one of them leaving must not end, and the discoverer
// bounds it.
func (d *Door) Batches(model string) bool {
	_, ok := d.Batcher.Model(model)
	if !ok && d.Discoverer != nil && model != "" {
		d.Discoverer.Ensure(context.Background(), model)
		_, ok = d.Batcher.Model(model)
	}
	return ok
}

// RepositoryChanged is told by a door that passed a repository load or
// unload of model through (Triton's model_repository extension, over
// either protocol), once the upstream answered it: the model's mode is
// decided again from its new configuration, so that a model reloaded as
// decoupled, say, is passed through from then on.
func (d *Door) RepositoryChanged(model string) {
	if d.Discoverer != nil {
		d.Discoverer.Changed(model)
	}
}

// Unready is the doors' verdict on the server's readiness: why it is not
// ready, "" when Triton's own answer stands (no Health, or none to add).
func (d *Door) Unready() string {
	if d.Health == nil {
		return ""
	}
	return d.Health.Unready()
}

// ModelUnready is the doors' verdict on a model's readiness, as Unready.
func (d *Door) ModelUnready(model string) string {
	if d.Health == nil {
		return ""
	}
	if failing, why := d.Health.Failing(model); failing {
		if why == "" {
			why = "model is failing upstream"
		}
		return why
	}
	return ""
}

// Admission is one inference call of a batched model from its arrival at
// a door until its answer is written: its bytes in the memory budget (and
// its answer's, once written), its call in the queue, its span. The door
// fills in Call once it has read and decoded the request; Release gives
// everything back. The zero Admission is not usable: Admit begins one.
type Admission struct {
	d     *Door
	Model string
	Start time.Time // when the call began to arrive
	Hold  membudget.Hold
	Call  *dispatcher.Call
	Span  tracing.Request
}

// Admit begins a's admission of a call of model that began to arrive at
// start. a is the door's own (on its stack): an admission allocates
// nothing.
func (d *Door) Admit(a *Admission, model string, start time.Time) {
	*a = Admission{d: d, Model: model, Start: start, Hold: membudget.Hold{B: d.Memory}}
}

// Trace starts the call's span in the trace its carrier (the request's
// headers or metadata) names; nothing when tracing is off.
func (a *Admission) Trace(c propagation.TextMapCarrier) {
	a.Span = a.d.Tracer.Start(c, string(a.d.Protocol), a.Model)
}

// Forward gives the admitted call (a.Call) what its caller's headers
// carry upstream: those that decide who may call (Backend.Forward), and
// its traceparent when the proxy does not trace (a tracer sends its own).
// get and each read the door's headers as Forwarding.Of says.
func (a *Admission) Forward(get func(name string) []byte, each func(func(name, value []byte))) {
	var trace string
	if !a.d.Tracing() {
		if t := get("traceparent"); t != nil {
			trace = string(t)
		}
	}
	a.Call.Forward(a.d.Backend.Forward.Of(a.d.Protocol, get, each), trace)
}

// Tracing reports whether the door traces calls: a door reads a carrier
// that costs something to build only then.
func (d *Door) Tracing() bool { return d.Tracer != nil }

// Submit queues the call and waits for its result; ctx ending while the
// call is still queued (its caller left) withdraws it.
func (a *Admission) Submit(ctx context.Context) dispatcher.Result {
	a.Span.Rows(a.Call.Rows)
	return a.d.Batcher.Submit(a.Span.Context(ctx), a.Model, a.Call)
}

// Answered is told once res's answer, of n bytes as written, is on its
// way to the caller: the batcher learns where the call's latency ends,
// the answer's buffers go back, the written bytes stay held against the
// memory budget until Release (even past it: the work is done, and the
// next large calls wait), and the call's latency is counted.
func (a *Admission) Answered(res *dispatcher.Result, n int64) {
	a.d.Batcher.Delivered(*res)
	res.Release()
	a.Hold.Force(n)
	a.d.latencyOf(a.Model).Observe(time.Since(a.Start).Seconds())
}

// ReleaseCall gives the call back for reuse: nothing refers to the
// request's bytes after it. Release does it; a door that must free the
// body's buffers in between calls it first.
func (a *Admission) ReleaseCall() {
	if a.Call != nil {
		a.Call.Release()
		a.Call = nil
	}
}

// Release gives back what the admission holds: the call, then the bytes
// held.
func (a *Admission) Release() {
	a.ReleaseCall()
	a.Hold.Release()
}

// latencyOf returns the model's latency observer at this door without a
// label lookup per call. Only batched models reach it, so the map stays
// small.
func (d *Door) latencyOf(model string) prometheus.Observer {
	if o, ok := d.latency.Load(model); ok {
		return o.(prometheus.Observer)
	}
	o, _ := d.latency.LoadOrStore(model, d.Metrics.Latency.WithLabelValues(model, string(d.Protocol)))
	return o.(prometheus.Observer)
}

// Failed counts a batched call answered with an error; status is the
// door's own word for it, an HTTP status or a gRPC code name.
func (d *Door) Failed(model, status string) {
	d.Metrics.Errors.WithLabelValues(model, string(d.Protocol), status).Inc()
}

// Refused counts a request refused at the door before a queue, by reason.
func (d *Door) Refused(reason string) { d.Metrics.Rejected.WithLabelValues(reason).Inc() }

// Passed counts a call passed through to the upstream.
func (d *Door) Passed() { d.passed.Inc() }

// PassedWhole counts an inference call of a batched model passed to the
// upstream as it came (the call is not one the dispatcher batches). Only
// models the proxy batches are labelled, so the label's values stay as
// few as they.
func (d *Door) PassedWhole(model string) {
	d.Metrics.PassedWhole.WithLabelValues(model, string(d.Protocol)).Inc()
}

// PassFailed counts a passed-through call that failed to reach the
// upstream.
func (d *Door) PassFailed() { d.passFailed.Inc() }

// Sources: a call's caller is its connection (dispatcher.Call.Source).
// Each door names its own connections, in its own half of the ids, so
// that no two open connections of either door share one: the HTTP door's
// fasthttp numbers connections from 1 (the lower half), the gRPC door
// hashes its peer's address into the upper half.

// HTTPSource is the source of a call on the HTTP connection numbered id.
func HTTPSource(id uint64) uint64 { return id &^ (1 << 63) }

// GRPCSource is the source of a call on the connection from addr: its TCP
// address, which no two open connections share, hashed (FNV-1a) without
// an allocation. 0 (unknown) for any other transport.
func GRPCSource(addr net.Addr) uint64 {
	a, ok := addr.(*net.TCPAddr)
	if !ok {
		return 0
	}
	const prime = 1099511628211
	h := uint64(14695981039346656037)
	for _, b := range a.IP {
		h = (h ^ uint64(b)) * prime
	}
	h = (h ^ uint64(a.Port&0xff)) * prime
	h = (h ^ uint64(a.Port>>8)) * prime
	return h | 1<<63
}
