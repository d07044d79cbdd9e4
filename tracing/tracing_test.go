package tracing

import (
	"context"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/tracing/tracingtest"
	"github.com/valyala/fasthttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// A client's traceparent (W3C trace-context, version 00, sampled).
const (
	clientTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParent = "00f067aa0ba902b7"
	traceparent  = "00-" + clientTrace + "-" + clientParent + "-01"
)

func TestNilTracerIsOff(t *testing.T) {
	var tr *Tracer
	ctx, span := tr.StartRequest(context.Background(), nil, "http", "infer", "m")
	if span.IsRecording() || trace.SpanContextFromContext(ctx).IsValid() {
		t.Fatal("a nil tracer made a span")
	}
	End(span, 200, "")
	bctx, bspan := tr.StartBatch([]context.Context{ctx}, "m", 1)
	EndBatch(bspan, time.Millisecond, nil)
	var h fasthttp.RequestHeader
	tr.Inject(bctx, HeaderCarrier{&h})
	if len(h.Peek("traceparent")) != 0 {
		t.Fatal("a nil tracer injected a traceparent")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestConfig(t *testing.T) {
	for _, k := range EndpointEnv {
		t.Setenv(k, "")
	}
	tests := []struct {
		endpoint string
		enabled  bool
		bad      bool
	}{
		{"", false, false},
		{"http://localhost:4318", true, false},
		{"https://collector:4318/", true, false},
		{"localhost:4318", true, true},
		{"ftp://x", true, true},
	}
	for _, tc := range tests {
		c := Config{Endpoint: tc.endpoint}
		if got := c.Enabled(); got != tc.enabled {
			t.Errorf("%q: Enabled %v, want %v", tc.endpoint, got, tc.enabled)
		}
		if err := c.Validate(); (err != nil) != tc.bad {
			t.Errorf("%q: Validate %v, want error %v", tc.endpoint, err, tc.bad)
		}
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
	if !(Config{}).Enabled() {
		t.Error("OTEL_EXPORTER_OTLP_ENDPOINT did not turn tracing on")
	}
}

// The request joins its client's trace; the batch links every member and
// is a child of the first sampled one; upstream gets the batch's context.
func TestRequestsAndTheirBatch(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := NewSynced(exp, "test")
	defer tr.Shutdown(context.Background())

	var h fasthttp.RequestHeader
	h.Set("traceparent", traceparent)
	ctx1, s1 := tr.StartRequest(context.Background(), HeaderCarrier{&h}, "http", "ModelInfer", "m")
	md := metadata.MD{}
	ctx2, s2 := tr.StartRequest(context.Background(), MetadataCarrier(md), "grpc", "ModelInfer", "m")

	if got := s1.SpanContext().TraceID().String(); got != clientTrace {
		t.Fatalf("request span in trace %s, want the client's %s", got, clientTrace)
	}
	if s2.SpanContext().TraceID().String() == clientTrace {
		t.Fatal("a request without traceparent joined another's trace")
	}

	bctx, bs := tr.StartBatch([]context.Context{ctx1, ctx2}, "m", 3)
	var up fasthttp.RequestHeader
	tr.Inject(bctx, HeaderCarrier{&up})
	want := "00-" + clientTrace + "-" + bs.SpanContext().SpanID().String() + "-01"
	if got := string(up.Peek("traceparent")); got != want {
		t.Fatalf("upstream traceparent %q, want %q", got, want)
	}
	Batched(s1, 2*time.Millisecond, 3, 2, "budget", bs.SpanContext())
	Batched(s2, time.Millisecond, 3, 2, "budget", bs.SpanContext())
	EndBatch(bs, 4*time.Millisecond, nil)
	End(s1, 200, "")
	End(s2, 503, "overloaded")

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	byName := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.SpanContext.SpanID()] = s
	}
	batch := byName[bs.SpanContext().SpanID()]
	if batch.Parent.SpanID() != s1.SpanContext().SpanID() {
		t.Errorf("batch parent %s, want the first sampled member %s", batch.Parent.SpanID(), s1.SpanContext().SpanID())
	}
	if batch.SpanKind != trace.SpanKindClient {
		t.Errorf("batch kind %v", batch.SpanKind)
	}
	linked := map[trace.SpanID]bool{}
	for _, l := range batch.Links {
		linked[l.SpanContext.SpanID()] = true
	}
	if !linked[s1.SpanContext().SpanID()] || !linked[s2.SpanContext().SpanID()] {
		t.Errorf("batch links %v, want both members", batch.Links)
	}
	r1 := byName[s1.SpanContext().SpanID()]
	if r1.Parent.SpanID().String() != clientParent || r1.SpanKind != trace.SpanKindServer {
		t.Errorf("request parent %s kind %v, want the client's %s, server", r1.Parent.SpanID(), r1.SpanKind, clientParent)
	}
	attrs := map[string]any{}
	for _, a := range r1.Attributes {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	for k, v := range map[string]any{"ratebatch.batch.rows": int64(3), "ratebatch.batch.calls": int64(2),
		"ratebatch.policy": "budget", "ratebatch.queue_wait_ms": 2.0, "ratebatch.model": "m", "http.response.status_code": int64(200)} {
		if attrs[k] != v {
			t.Errorf("request attribute %s = %v, want %v", k, attrs[k], v)
		}
	}
	if r2 := byName[s2.SpanContext().SpanID()]; r2.Status.Code.String() != "Error" {
		t.Errorf("a 503's span status %v, want Error", r2.Status.Code)
	}
}

// An unsampled client trace is followed as unsampled (parent-based); the
// batch takes a sampled member as parent when one exists.
func TestParentBasedSampling(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := NewSynced(exp, "test")
	var h fasthttp.RequestHeader
	h.Set("traceparent", "00-"+clientTrace+"-"+clientParent+"-00")
	ctx1, s1 := tr.StartRequest(context.Background(), HeaderCarrier{&h}, "http", "infer", "m")
	if s1.SpanContext().IsSampled() {
		t.Fatal("an unsampled client trace was sampled")
	}
	ctx2, s2 := tr.StartRequest(context.Background(), nil, "http", "infer", "m")
	_, bs := tr.StartBatch([]context.Context{ctx1, ctx2}, "m", 2)
	if bs.SpanContext().TraceID() != s2.SpanContext().TraceID() || !bs.SpanContext().IsSampled() {
		t.Fatal("the batch did not follow its sampled member")
	}
	EndBatch(bs, 0, nil)
	End(s1, 200, "")
	End(s2, 200, "")
	if n := len(exp.GetSpans()); n != 2 {
		t.Fatalf("%d spans exported, want 2 (the unsampled request's is not)", n)
	}
}

// A real OTLP/HTTP receiver gets the spans the tracer exports.
func TestExportsOverOTLPHTTP(t *testing.T) {
	rcv := tracingtest.Start(t)
	for _, k := range EndpointEnv {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "")
	tr, err := New(context.Background(), Config{Endpoint: rcv.URL, Version: "t"})
	if err != nil || tr == nil {
		t.Fatalf("New: %v, %v", tr, err)
	}
	ctx, s := tr.StartRequest(context.Background(), nil, "http", "ModelInfer", "m")
	_, b := tr.StartBatch([]context.Context{ctx}, "m", 1)
	EndBatch(b, time.Millisecond, nil)
	End(s, 200, "")
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := rcv.Spans()
	if len(got) != 2 || got[0].Service != "ratebatch" {
		t.Fatalf("receiver got spans %+v, want ModelInfer and batch m from ratebatch", got)
	}
}

func TestOffWithoutEndpoint(t *testing.T) {
	for _, k := range EndpointEnv {
		t.Setenv(k, "")
	}
	tr, err := New(context.Background(), Config{})
	if tr != nil || err != nil {
		t.Fatalf("New without endpoint: %v, %v; want nil, nil", tr, err)
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)
