package proxy

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The front doors, as the value of the metrics' protocol label.
const (
	ProtocolHTTP = "http"
	ProtocolGRPC = "grpc"
)

// Metrics are the front doors' Prometheus series. Both doors (HTTP here,
// gRPC in package grpcproxy) count in the same series under their
// protocol label, so a dashboard sums them or tells them apart.
type Metrics struct {
	Latency  *prometheus.HistogramVec // model, protocol
	Errors   *prometheus.CounterVec   // model, protocol, status
	Rejected *prometheus.CounterVec
	// PassthroughBy and PassthroughErrorsBy count per protocol;
	// Passthrough and PassthroughErrors are their HTTP children.
	PassthroughBy, PassthroughErrorsBy *prometheus.CounterVec
	Passthrough                        prometheus.Counter
	PassthroughErrors                  prometheus.Counter

	latency sync.Map // model -> prometheus.Observer (HTTP), bound once per model
}

// latencyOf returns the model's HTTP latency observer without a label
// lookup per request. Only batched models reach it, so the map stays small.
func (m *Metrics) latencyOf(model string) prometheus.Observer {
	if o, ok := m.latency.Load(model); ok {
		return o.(prometheus.Observer)
	}
	o, _ := m.latency.LoadOrStore(model, m.Latency.WithLabelValues(model, ProtocolHTTP))
	return o.(prometheus.Observer)
}

// Answered records a batched request answered through a door.
func (m *Metrics) Answered(model, protocol string, d time.Duration) {
	m.Latency.WithLabelValues(model, protocol).Observe(d.Seconds())
}

// Failed records a batched request answered with an error; status is the
// door's own: an HTTP status or a gRPC code name.
func (m *Metrics) Failed(model, protocol, status string) {
	m.Errors.WithLabelValues(model, protocol, status).Inc()
}

// Refused counts a request refused at a door before a queue, by reason.
func (m *Metrics) Refused(reason string) { m.Rejected.WithLabelValues(reason).Inc() }

// Passed records a pass-through call and whether it failed to reach the
// upstream.
func (m *Metrics) Passed(protocol string, failed bool) {
	m.PassthroughBy.WithLabelValues(protocol).Inc()
	if failed {
		m.PassthroughErrorsBy.WithLabelValues(protocol).Inc()
	}
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
	out := map[string]DoorCounts{ProtocolHTTP: {}, ProtocolGRPC: {}}
	sum(m.Latency, func(p string, v uint64) { c := out[p]; c.Batched += v; out[p] = c })
	sum(m.Errors, func(p string, v uint64) { c := out[p]; c.Errors += v; out[p] = c })
	sum(m.PassthroughBy, func(p string, v uint64) { c := out[p]; c.Passthrough += v; out[p] = c })
	sum(m.PassthroughErrorsBy, func(p string, v uint64) { c := out[p]; c.PassthroughErrors += v; out[p] = c })
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
		PassthroughBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_passthrough_requests_total",
			Help: "Requests passed to the upstream unchanged (non-inference endpoints, models not batched), by front door.",
		}, []string{"protocol"}),
		PassthroughErrorsBy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_passthrough_errors_total",
			Help: "Passthrough requests that failed to reach the upstream, by front door.",
		}, []string{"protocol"}),
	}
	m.Passthrough = m.PassthroughBy.WithLabelValues(ProtocolHTTP)
	m.PassthroughErrors = m.PassthroughErrorsBy.WithLabelValues(ProtocolHTTP)
	if reg != nil {
		reg.MustRegister(m.Latency, m.Errors, m.Rejected, m.PassthroughBy, m.PassthroughErrorsBy)
	}
	return m
}
