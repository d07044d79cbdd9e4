// Package tracingtest runs an OTLP/HTTP trace receiver for tests, as
// net/http/httptest runs a server: the spans an exporter sends it, decoded
// with OpenTelemetry's own protobuf messages.
package tracingtest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, its ids in hex.
type Span struct {
	Service, Name     string
	Trace, ID, Parent string
	Links             [][2]string // (trace, span) of each link
	Attrs             map[string]any
	Kind              int32
	StatusCode        int32
}

// Receiver collects the spans exported to it.
type Receiver struct {
	URL string // base URL: the exporter posts to URL + "/v1/traces"
	mu  sync.Mutex
	got []Span
}

// Start runs a receiver until the test ends.
func Start(tb testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	tb.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost {
		http.NotFound(w, req)
		return
	}
	b, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var spans []Span
	for _, rs := range msg.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{Service: service, Name: s.Name, Trace: hex.EncodeToString(s.TraceId),
					ID: hex.EncodeToString(s.SpanId), Parent: hex.EncodeToString(s.ParentSpanId),
					Attrs: map[string]any{}, Kind: int32(s.Kind), StatusCode: int32(s.GetStatus().GetCode())}
				for _, l := range s.Links {
					sp.Links = append(sp.Links, [2]string{hex.EncodeToString(l.TraceId), hex.EncodeToString(l.SpanId)})
				}
				for _, a := range s.Attributes {
					sp.Attrs[a.Key] = attrValue(a.GetValue())
				}
				spans = append(spans, sp)
			}
		}
	}
	r.mu.Lock()
	r.got = append(r.got, spans...)
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Write(out)
}

// attrValue is an attribute's value as Go's: string, int64, float64, bool.
func attrValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	}
	return nil
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.got...)
}

// Wait returns the spans once ok holds of them, or fails the test after
// timeout.
func (r *Receiver) Wait(tb testing.TB, timeout time.Duration, ok func([]Span) bool) []Span {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans := r.Spans()
		if ok(spans) {
			return spans
		}
		if time.Now().After(deadline) {
			tb.Fatalf("spans not received within %v; have %d: %+v", timeout, len(spans), spans)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
