package dispatcher

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the dispatcher's Prometheus series. Accepted calls always end
// in answered{outcome="ok"|"error"}, so
// ratebatch_requests_accepted_total == sum(ratebatch_requests_answered_total)
// once the queues are empty.
type Metrics struct {
	Accepted         *prometheus.CounterVec
	Answered         *prometheus.CounterVec
	Rejected         *prometheus.CounterVec
	BatchSize        *prometheus.HistogramVec
	QueueWait        *prometheus.HistogramVec
	UpstreamDuration *prometheus.HistogramVec
	UpstreamErrors   *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_requests_accepted_total",
			Help: "Inference requests admitted to a batching queue.",
		}, []string{"model"}),
		Answered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_requests_answered_total",
			Help: "Admitted requests answered, by outcome (ok or error; a client gone counts as error).",
		}, []string{"model", "outcome"}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_requests_rejected_total",
			Help: "Requests refused or dropped from the queue, by reason (queue_full, batch_size, timeout, shutdown, client_gone).",
		}, []string{"model", "reason"}),
		BatchSize: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratebatch_batch_size",
			Help:    "Rows per batch sent upstream.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}, []string{"model"}),
		QueueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratebatch_queue_wait_seconds",
			Help:    "Time a request waited in the proxy before its batch was sent.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"model"}),
		UpstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratebatch_upstream_duration_seconds",
			Help:    "Round trip of one batch to the upstream (the observed tau(b)).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"model"}),
		UpstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_upstream_errors_total",
			Help: "Failed upstream calls, by kind (connection, connection_retry, timeout, status_4xx, status_5xx, bad_response, bad_member_retry).",
		}, []string{"model", "kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.Accepted, m.Answered, m.Rejected, m.BatchSize, m.QueueWait, m.UpstreamDuration, m.UpstreamErrors)
	}
	return m
}

func (m *Metrics) accepted(model string) { m.Accepted.WithLabelValues(model).Inc() }

func (m *Metrics) answered(model, outcome string) {
	m.Answered.WithLabelValues(model, outcome).Inc()
}

func (m *Metrics) rejected(model, reason string) { m.Rejected.WithLabelValues(model, reason).Inc() }
