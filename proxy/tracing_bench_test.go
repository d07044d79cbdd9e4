package proxy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/proxy"
	"github.com/ratebatch/ratebatch/tracing"
)

// discard is a span exporter that drops what it is given: the benchmark
// measures making and batching spans, not a receiver.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkHandlerTracing is BenchmarkHandler's batched cases with tracing
// off, and on with 1% and all of the requests sampled (the SDK's
// traceidratio sampler; the requests carry no traceparent). Compare "off"
// with BenchmarkHandler for the cost of the seam, and the others with
// "off" for the cost of tracing.
func BenchmarkHandlerTracing(b *testing.B) {
	samplings := []struct{ name, sampler, arg string }{
		{"off", "", ""}, {"sampled=1%", "traceidratio", "0.01"}, {"sampled=100%", "always_on", ""},
	}
	for _, c := range []benchCase{{"batching", benchSimpleJSON, 64}, {"batching", benchSimpleJSON, 1}} {
		for _, s := range samplings {
			b.Run(fmt.Sprintf("%s/%s", c, s.name), func(b *testing.B) {
				var tr *tracing.Tracer
				if s.sampler != "" {
					b.Setenv("OTEL_TRACES_SAMPLER", s.sampler)
					b.Setenv("OTEL_TRACES_SAMPLER_ARG", s.arg)
					tr = tracing.NewWithExporter(discard{}, "bench")
					b.Cleanup(func() { tr.Shutdown(context.Background()) })
				}
				body, hl := c.m.reply(b, 1, c.m.binary)
				fw := &benchForward{body: body, headerLen: hl, ctype: "application/json"}
				var obs dispatcher.Observer
				if tr != nil {
					obs = &tracing.Batches{T: tr}
				}
				d := dispatcher.New(dispatcher.Options{Upstream: newBenchUpstream(b, c.m), Retries: 1, Metrics: dispatcher.NewMetrics(nil), Observer: obs})
				if err := d.SetModel(dispatcher.ModelSpec{Name: c.m.name, MaxBatch: c.m.maxBatch, Instances: 1, QueueRows: 1 << 16, Planner: benchPlanner{}}); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					d.Drain(ctx)
				})
				h := proxy.New(proxy.Options{Backend: door.Backend{Batcher: d, Tracer: tr}, Upstream: mustURL("http://upstream.invalid:8000"),
					MaxBodyBytes: 64 << 20, RetryAfter: time.Second, Forward: fw})
				measureHandler(b, h, d, c)
			})
		}
	}
}
