package door

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Protocol names a front door, as the value of the metrics' protocol label
// and of the spans' door attribute.
type Protocol string

// The two doors.
const (
	HTTP Protocol = "http"
	GRPC Protocol = "grpc"
)

// Metrics are the front doors' Prometheus series. Both doors count in the
// same series under their protocol label, so a dashboard sums them or
// tells them apart; a door counts through its Door (Answered, Failed,
// Passed, Refused), which binds the label.
type Metrics struct {
	Latency  *prometheus.HistogramVec // model, protocol
	Errors   *prometheus.CounterVec   // model, protocol, status
	Rejected *prometheus.CounterVec   // reason
	// Passthrough and PassthroughErrors count per protocol.
	Passthrough, PassthroughErrors *prometheus.CounterVec
	// PassedWhole counts the inference calls of a batched model passed to
	// the upstream as they came (shared memory, sequences): Triton counts
	// them beside the batches (docs/RELIABILITY.md). model, protocol.
	PassedWhole *prometheus.CounterVec
}

// DoorCounts is one door's traffic since the start, for /status.
type DoorCounts struct {
	Batched           uint64 `json:"batched_answered"`
	Errors            uint64 `json:"batched_errors"`
	Passthrough       uint64 `json:"passthrough"`
	PassthroughErrors uint64 `json:"passthrough_errors"`
}

// Doors sums the series by protocol.
func (m *Metrics) Doors() map[string]DoorCounts {
	out := map[string]DoorCounts{string(HTTP): {}, string(GRPC): {}}
	sum(m.Latency, func(p string, v uint64) { c := out[p]; c.Batched += v; out[p] = c })
	sum(m.Errors, func(p string, v uint64) { c := out[p]; c.Errors += v; out[p] = c })
	sum(m.Passthrough, func(p string, v uint64) { c := out[p]; c.Passthrough += v; out[p] = c })
	sum(m.PassthroughErrors, func(p string, v uint64) { c := out[p]; c.PassthroughErrors += v; out[p] = c })
	return out
}

// sum calls add with the protocol and count of every series of c.
func sum(c prometheus.Collector, add func(protocol string, v uint64)) {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		var protocol string
		for _, l := range d.GetLabel() {
			if l.GetName() == "protocol" {
				protocol = l.GetValue()
			}
		}
		switch {
		case d.Counter != nil:
			add(protocol, uint64(d.Counter.GetValue()))
		case d.Histogram != nil:
			add(protocol, d.Histogram.GetSampleCount())
		}
	}
}

// NewMetrics creates the series and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratebatch_request_duration_seconds",
			Help:    "End-to-end latency of batched inference requests, from arrival to the answer written, by front door (protocol http or grpc).",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18),
		}, []string{"model", "protocol"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_request_errors_total",
			Help: "Batched inference requests answered with an error, by front door and status (an HTTP status, or a gRPC code name).",
		}, []string{"model", "protocol", "status"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_front_rejected_total",
			Help: "Requests refused at the front door before reaching a queue, by reason.",
		}, []string{"reason"}),
		Passthrough: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_passthrough_requests_total",
			Help: "Requests passed to the upstream unchanged (non-inference endpoints, models not batched), by front door.",
		}, []string{"protocol"}),
		PassthroughErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_passthrough_errors_total",
			Help: "Passthrough requests that failed to reach the upstream, by front door.",
		}, []string{"protocol"}),
		PassedWhole: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_passthrough_inferences_total",
			Help: "Inference calls of a batched model passed to the upstream as they came (shared memory, sequences, ...), by front door: Triton counts each as a request of the model, beside ratebatch_upstream_requests_total.",
		}, []string{"model", "protocol"}),
	}
	if reg != nil {
		reg.MustRegister(m.Latency, m.Errors, m.Rejected, m.Passthrough, m.PassthroughErrors, m.PassedWhole)
	}
	return m
}
