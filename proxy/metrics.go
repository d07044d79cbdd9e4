package proxy

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the front door's Prometheus series.
type Metrics struct {
	Latency           *prometheus.HistogramVec
	Errors            *prometheus.CounterVec
	Rejected          *prometheus.CounterVec
	Passthrough       prometheus.Counter
	PassthroughErrors prometheus.Counter

	latency sync.Map // model -> prometheus.Observer, bound once per model
}

// latencyOf returns the model's latency observer without a label lookup per
// request. Only batched models reach it, so the map stays small.
func (m *Metrics) latencyOf(model string) prometheus.Observer {
	if o, ok := m.latency.Load(model); ok {
		return o.(prometheus.Observer)
	}
	o, _ := m.latency.LoadOrStore(model, m.Latency.WithLabelValues(model))
	return o.(prometheus.Observer)
}

// NewMetrics creates the series and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratebatch_request_duration_seconds",
			Help:    "End-to-end latency of batched inference requests, from arrival to the answer written.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18),
		}, []string{"model"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_request_errors_total",
			Help: "Inference requests answered with a KServe v2 error, by HTTP status.",
		}, []string{"model", "status"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_front_rejected_total",
			Help: "Requests refused at the front door before reaching a queue, by reason.",
		}, []string{"reason"}),
		Passthrough: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratebatch_passthrough_requests_total",
			Help: "Requests passed to the upstream unchanged (non-inference endpoints, models not batched).",
		}),
		PassthroughErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratebatch_passthrough_errors_total",
			Help: "Passthrough requests that failed to reach the upstream.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Latency, m.Errors, m.Rejected, m.Passthrough, m.PassthroughErrors)
	}
	return m
}
