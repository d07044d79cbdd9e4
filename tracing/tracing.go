// Package tracing follows a request through its batch with OpenTelemetry.
//
// A batching proxy is where a trace needs more than a parent: many requests
// merge into one upstream call. So each request gets a span in its
// client's trace (joined through the W3C traceparent header or gRPC
// metadata), each batch gets one span that links every member request's
// span, and the batch's context goes upstream as traceparent, so that
// Triton's own spans (its OpenTelemetry trace mode) hang under the batch.
// A request's span then answers the question only the proxy can: how long
// did this request wait for its batch, which batch was it in, with whom.
//
// Tracing is off unless an OTLP endpoint is configured; a nil *Tracer is
// valid and every method on it does nothing, so the request path pays one
// nil check when tracing is off.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ratebatch/ratebatch/internal/redact"
)

// Config turns tracing on. The OpenTelemetry SDK's own environment
// variables apply as they do for any OpenTelemetry program:
// OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT) when Endpoint is
// empty, OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf, the default, or grpc),
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the default sampler is
// parent-based, so a sampled client trace is always followed), and
// OTEL_SERVICE_NAME.
type Config struct {
	// Endpoint is the OTLP receiver's base URL (http://host:4318 for
	// OTLP/HTTP, http://host:4317 with protocol grpc). Empty: the
	// environment's, and no tracing when that is empty too.
	Endpoint string
	// Version is reported as service.version.
	Version string
}

// EndpointEnv are the variables that name an OTLP endpoint, in the SDK's
// order of precedence.
var EndpointEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

// Enabled reports whether c, with the environment, turns tracing on.
func (c Config) Enabled() bool {
	if c.Endpoint != "" {
		return true
	}
	for _, k := range EndpointEnv {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// Validate checks the endpoint's form.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("tracing.otlp_endpoint %q: want a URL such as http://localhost:4318", redact.URL(c.Endpoint))
	}
	return nil
}

// Tracer makes the proxy's spans. The zero value is not usable; a nil
// *Tracer is tracing off.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// Name is the instrumentation scope of every span the proxy makes.
const Name = "github.com/ratebatch/ratebatch"

// New returns a tracer exporting over OTLP, or nil (and no error) when c
// and the environment name no endpoint.
func New(ctx context.Context, c Config) (*Tracer, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !c.Enabled() {
		return nil, nil
	}
	exp, err := newExporter(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return NewWithExporter(exp, c.Version), nil
}

// NewWithExporter returns a tracer batching its spans to exp (tests give
// an in-memory exporter). The sampler is the SDK's, from the environment.
func NewWithExporter(exp sdktrace.SpanExporter, version string) *Tracer {
	return newTracer(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Second)), version)
}

// NewSynced is NewWithExporter with every span exported as it ends: for
// tests that read the exporter right after a request.
func NewSynced(exp sdktrace.SpanExporter, version string) *Tracer {
	return newTracer(sdktrace.WithSyncer(exp), version)
}

func newTracer(proc sdktrace.TracerProviderOption, version string) *Tracer {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(serviceName()), semconv.ServiceVersion(version)))
	if err != nil { // conflicting schema URLs: keep the defaults
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(proc, sdktrace.WithResource(res))
	return &Tracer{tp: tp, tracer: tp.Tracer(Name), prop: propagation.TraceContext{}}
}

func serviceName() string {
	if s := os.Getenv("OTEL_SERVICE_NAME"); s != "" {
		return s
	}
	return "ratebatch"
}

func newExporter(ctx context.Context, c Config) (sdktrace.SpanExporter, error) {
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", "http/protobuf":
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(c.Endpoint, "/")+"/v1/traces"))
		}
		return otlptracehttp.New(ctx, opts...)
	case "grpc":
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", proto)
	}
}

// Shutdown exports what is buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Extract returns ctx with the remote span context carried by c
// (traceparent and tracestate), if any.
func (t *Tracer) Extract(ctx context.Context, c propagation.TextMapCarrier) context.Context {
	if t == nil {
		return ctx
	}
	return t.prop.Extract(ctx, c)
}

// Inject writes ctx's span context into c as traceparent (and tracestate).
func (t *Tracer) Inject(ctx context.Context, c propagation.TextMapCarrier) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, c)
}

// Attribute keys of the proxy's spans.
const (
	KeyModel     = attribute.Key("ratebatch.model")
	KeyDoor      = attribute.Key("ratebatch.door")
	KeyRows      = attribute.Key("ratebatch.rows")
	KeyWait      = attribute.Key("ratebatch.queue_wait_ms")
	KeyBatchRows = attribute.Key("ratebatch.batch.rows")
	KeyCalls     = attribute.Key("ratebatch.batch.calls")
	KeyPolicy    = attribute.Key("ratebatch.policy")
	KeyBatched   = attribute.Key("ratebatch.batched")
	KeyRoundTrip = attribute.Key("ratebatch.batch.round_trip_ms")
	KeyStatus    = attribute.Key("http.response.status_code")
)

// StartRequest starts the span of one client request in the trace its
// carrier names (a new trace when it names none), as a server span.
// door is "http" or "grpc"; the span's name is the KServe v2 operation.
func (t *Tracer) StartRequest(ctx context.Context, c propagation.TextMapCarrier, door, op, model string) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(ctx)
	}
	if c != nil {
		ctx = t.prop.Extract(ctx, c)
	}
	return t.tracer.Start(ctx, op, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(KeyDoor.String(door), KeyModel.String(model)))
}

// Batched records on a request's span what its batch was: how long it
// waited in the queue, the batch's rows and callers, the policy that sent
// it, and a link to the batch's span.
func Batched(span trace.Span, wait time.Duration, rows, calls int, policy string, batch trace.SpanContext) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(KeyBatched.Bool(true), KeyWait.Float64(ms(wait)),
		KeyBatchRows.Int(rows), KeyCalls.Int(calls), KeyPolicy.String(policy))
	if batch.IsValid() {
		span.AddLink(trace.Link{SpanContext: batch})
	}
}

// End ends a request's span with its outcome: an HTTP status (the gRPC
// door maps its code to the status Triton's HTTP door would give) and the
// error message for a failure.
func End(span trace.Span, status int, msg string) {
	if !span.IsRecording() {
		span.End()
		return
	}
	span.SetAttributes(KeyStatus.Int(status))
	if status >= 400 {
		span.SetStatus(codes.Error, msg)
	}
	span.End()
}

// StartBatch starts the span of one batch sent upstream, as a client span
// linking every member's span. Its parent is the first member whose span
// is sampled, so that the batch (and Triton's spans under it) belongs to
// a trace someone asked for; the others reach it through their links and
// their own link back (Batched).
func (t *Tracer) StartBatch(members []context.Context, model string, rows int) (context.Context, trace.Span) {
	if t == nil || len(members) == 0 {
		return context.Background(), trace.SpanFromContext(context.Background())
	}
	parent := members[0]
	links := make([]trace.Link, 0, len(members))
	chosen := false
	for _, m := range members {
		sc := trace.SpanContextFromContext(m)
		if !sc.IsValid() {
			continue
		}
		links = append(links, trace.Link{SpanContext: sc})
		if !chosen && sc.IsSampled() {
			parent, chosen = m, true
		}
	}
	return t.tracer.Start(parent, "batch "+model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithLinks(links...),
		trace.WithAttributes(KeyModel.String(model), KeyBatchRows.Int(rows), KeyCalls.Int(len(members))))
}

// EndBatch ends a batch's span with its upstream round trip and outcome.
func EndBatch(span trace.Span, roundTrip time.Duration, err error) {
	if span.IsRecording() {
		span.SetAttributes(KeyRoundTrip.Float64(ms(roundTrip)))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Request is one request's span at a door. The zero Request, a door's
// when tracing is off, does nothing.
type Request struct{ span trace.Span }

// Start starts the span of one inference call at a door ("http",
// "grpc"), in the trace its carrier (the request's headers or metadata)
// names; the zero Request when t is nil (tracing off).
func (t *Tracer) Start(c propagation.TextMapCarrier, door, model string) Request {
	if t == nil {
		return Request{}
	}
	_, span := t.StartRequest(context.Background(), c, door, "ModelInfer", model)
	return Request{span: span}
}

// Context returns ctx carrying the request's span, for the call the door
// submits (the batch's observer finds it there: Batches).
func (r Request) Context(ctx context.Context) context.Context {
	if r.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, r.span)
}

// Rows records the request's rows.
func (r Request) Rows(n int) {
	if r.span != nil && r.span.IsRecording() {
		r.span.SetAttributes(KeyRows.Int(n))
	}
}

// End ends the request's span with its outcome (see End).
func (r Request) End(status int, msg string) {
	if r.span != nil {
		End(r.span, status, msg)
	}
}
