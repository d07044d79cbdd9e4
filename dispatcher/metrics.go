package dispatcher

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

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
	// Ejections counts models marked failing by the outlier detector.
	Ejections *prometheus.CounterVec
	// Upstream counts the inference requests the upstream answered, and
	// UpstreamRows their rows, by outcome: what Triton's statistics count
	// for the model (its request counts, inference_count), beside the
	// callers' counts (Answered), so that a dashboard reconciles the two
	// (docs/RELIABILITY.md).
	Upstream, UpstreamRows *prometheus.CounterVec
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
			Help: "Requests refused or dropped from the queue, by reason (queue_full, batch_size, timeout, shutdown, client_gone, model_failing).",
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
			Help: "Failed upstream calls, by kind (connection, connection_retry, timeout, status_4xx, status_5xx, bad_response, bad_member_retry: a merged batch failed with an error that may be one member's, split to find it; held: a refused connection while the batch waits for the upstream; marked_down: the upstream taken for down).",
		}, []string{"model", "kind"}),
		Ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_model_failing_total",
			Help: "Models marked failing by passive outlier detection, by reason (errors: consecutive server errors or timeouts; hung: a batch far past its predicted tau(b)).",
		}, []string{"model", "reason"}),
		Upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_upstream_requests_total",
			Help: "Inference requests the upstream answered for the model (batches, a lone caller's request as it came, the parts of a split batch, probes), by outcome (ok: 200, error: another status): what Triton counts in its statistics' success.count and failure.count, where ratebatch_requests_answered_total counts the callers.",
		}, []string{"model", "outcome"}),
		UpstreamRows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratebatch_upstream_rows_total",
			Help: "Rows of the callers' inference requests the upstream answered (probes not counted), by outcome (ok: 200, error: another status): Triton's inference_count counts the rows of every request it executed, those its backend answered with an error among them.",
		}, []string{"model", "outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.Accepted, m.Answered, m.Rejected, m.BatchSize, m.QueueWait, m.UpstreamDuration, m.UpstreamErrors, m.Ejections,
			m.Upstream, m.UpstreamRows)
	}
	return m
}

// series are one model's hot-path series, bound once so that a request
// costs no label lookup.
type series struct {
	accepted, answeredOK, answeredErr prometheus.Counter
	upOK, upErr, upRowsOK, upRowsErr  prometheus.Counter
	queueWait, batchSize, upstream    prometheus.Observer
}

func (m *Metrics) bind(model string) *series {
	return &series{
		accepted:    m.Accepted.WithLabelValues(model),
		answeredOK:  m.Answered.WithLabelValues(model, "ok"),
		answeredErr: m.Answered.WithLabelValues(model, "error"),
		upOK:        m.Upstream.WithLabelValues(model, "ok"),
		upErr:       m.Upstream.WithLabelValues(model, "error"),
		upRowsOK:    m.UpstreamRows.WithLabelValues(model, "ok"),
		upRowsErr:   m.UpstreamRows.WithLabelValues(model, "error"),
		queueWait:   m.QueueWait.WithLabelValues(model),
		batchSize:   m.BatchSize.WithLabelValues(model),
		upstream:    m.UpstreamDuration.WithLabelValues(model),
	}
}

func (m *Metrics) rejected(model, reason string) { m.Rejected.WithLabelValues(model, reason).Inc() }

// Counts are one model's callers and what the upstream saw of them since
// the start, for /status: Triton's statistics count requests as it
// received them, merged (docs/RELIABILITY.md).
type Counts struct {
	// CallersOK and CallersFailed are the callers answered
	// (ratebatch_requests_answered_total).
	CallersOK     int64 `json:"callers_ok"`
	CallersFailed int64 `json:"callers_failed"`
	// UpstreamOK and UpstreamFailed are the requests the upstream
	// answered, 200 or not, and UpstreamRows and UpstreamFailedRows their
	// rows: what Triton's request counts and inference_count count of
	// the model, less what was passed through (docs/RELIABILITY.md).
	UpstreamOK         int64 `json:"upstream_ok"`
	UpstreamFailed     int64 `json:"upstream_failed"`
	UpstreamRows       int64 `json:"upstream_rows"`
	UpstreamFailedRows int64 `json:"upstream_failed_rows"`
}

// counts reads the model's counters.
func (s *series) counts() Counts {
	return Counts{CallersOK: value(s.answeredOK), CallersFailed: value(s.answeredErr),
		UpstreamOK: value(s.upOK), UpstreamFailed: value(s.upErr), UpstreamRows: value(s.upRowsOK), UpstreamFailedRows: value(s.upRowsErr)}
}

// value is a counter's value.
func value(c prometheus.Counter) int64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0
	}
	return int64(m.GetCounter().GetValue())
}

var (
	descQueued = prometheus.NewDesc("ratebatch_queue_rows",
		"Rows waiting in the model's queue.", []string{"model"}, nil)
	descInFlight = prometheus.NewDesc("ratebatch_in_flight_batches",
		"Batches sent upstream and not yet answered.", []string{"model"}, nil)
	descInFlightRows = prometheus.NewDesc("ratebatch_in_flight_rows",
		"Rows in the batches in flight.", []string{"model"}, nil)
	descFailing = prometheus.NewDesc("ratebatch_model_failing",
		"1 while the model is marked failing by passive outlier detection (not ready; one probe batch at a time), else 0.", []string{"model"}, nil)
	descSources = prometheus.NewDesc("ratebatch_sources",
		"Callers' connections active within the last second, by kind (closed_loop: its next request follows its answer after a think time; open_loop: its calls overlap or keep their own schedule, or it is one of a pool whose arrivals do not follow the answers (ratebatch_source_feedback below 0.25); unknown: not learnt yet).", []string{"model", "kind"}, nil)
	descSourcesBusy = prometheus.NewDesc("ratebatch_sources_busy",
		"Callers' connections with a call in the proxy now.", []string{"model"}, nil)
	descSourceThink = prometheus.NewDesc("ratebatch_source_think_seconds",
		"Mean estimated think time of the closed-loop connections (answer to next request, as the proxy sees it); absent without one.", []string{"model"}, nil)
	descSourceFeedback = prometheus.NewDesc("ratebatch_source_feedback",
		"How much the arrivals follow the answers: about 1 for a closed loop, about 0 for open arrivals over a pool of connections; below 0.25 the connections are planned as open. Absent until enough arrivals were seen.", []string{"model"}, nil)
)

type collector struct{ d *Dispatcher }

// Collector exports, at scrape time, the queues, the batches in flight, the
// callers learnt, the active probes and the upstream's state.
func (d *Dispatcher) Collector() prometheus.Collector { return collector{d} }

// queueDescs are the series of each model's snapshot.
var queueDescs = []*prometheus.Desc{descQueued, descInFlight, descInFlightRows, descFailing,
	descSources, descSourcesBusy, descSourceThink, descSourceFeedback}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range slices.Concat(queueDescs, probeDescs, checkDescs) {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.d.Snapshots() {
		ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(s.QueuedRows), s.Model)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight), s.Model)
		ch <- prometheus.MustNewConstMetric(descInFlightRows, prometheus.GaugeValue, float64(s.InFlightRows), s.Model)
		ch <- prometheus.MustNewConstMetric(descFailing, prometheus.GaugeValue, gauge01(s.Failing), s.Model)
		collectSources(ch, s.Model, s.Sources)
	}
	c.d.collectProbes(ch)
	c.d.collectChecks(ch)
}

// gauge01 is a yes/no state as a gauge: 1 or 0.
func gauge01(on bool) float64 {
	if on {
		return 1
	}
	return 0
}

// collectSources exports what is learnt of a model's callers.
func collectSources(ch chan<- prometheus.Metric, model string, src SourceStats) {
	for kind, n := range map[string]int{KindClosedLoop: src.ClosedLoop, KindOpenLoop: src.OpenLoop, KindUnknown: src.Unknown} {
		ch <- prometheus.MustNewConstMetric(descSources, prometheus.GaugeValue, float64(n), model, kind)
	}
	ch <- prometheus.MustNewConstMetric(descSourcesBusy, prometheus.GaugeValue, float64(src.Busy), model)
	if src.ThinkMs != nil {
		ch <- prometheus.MustNewConstMetric(descSourceThink, prometheus.GaugeValue, *src.ThinkMs/1000, model)
	}
	if src.Feedback != nil {
		ch <- prometheus.MustNewConstMetric(descSourceFeedback, prometheus.GaugeValue, *src.Feedback, model)
	}
}
