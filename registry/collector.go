package registry

import "github.com/prometheus/client_golang/prometheus"

var (
	descRate = prometheus.NewDesc("ratebatch_arrival_rate_per_second",
		"Arrival rate counted by the monitor over its last window.", []string{"model"}, nil)
	descArrivals = prometheus.NewDesc("ratebatch_arrivals_total",
		"Rows that arrived at the model's queue.", []string{"model"}, nil)
	descBatch = prometheus.NewDesc("ratebatch_chosen_batch_size",
		"Batch size the current rule aims for (batchmonitor's pbs).", []string{"model", "policy"}, nil)
	descMaxWait = prometheus.NewDesc("ratebatch_rule_max_wait_seconds",
		"Longest the current rule holds a partial batch.", []string{"model"}, nil)
	descAlpha = prometheus.NewDesc("ratebatch_regression_alpha_seconds",
		"Fitted slope of tau(b) = alpha*b + tau0, per row.", []string{"model"}, nil)
	descTau0 = prometheus.NewDesc("ratebatch_regression_tau0_seconds",
		"Fitted intercept of tau(b) = alpha*b + tau0.", []string{"model"}, nil)
	descR2 = prometheus.NewDesc("ratebatch_regression_r2",
		"Coefficient of determination of the tau(b) fit.", []string{"model"}, nil)
	descSEAlpha = prometheus.NewDesc("ratebatch_regression_alpha_stderr_seconds",
		"Standard error of the fitted slope alpha (absent while the samples cannot tell).", []string{"model"}, nil)
	descTrusted = prometheus.NewDesc("ratebatch_regression_trusted",
		"1 when the tau(b) fit is trusted, 0 while the rule stays work-conserving for want of it.", []string{"model"}, nil)
	descOverhead = prometheus.NewDesc("ratebatch_upstream_overhead_seconds",
		"Mean round trip of a batch beyond the server's own compute time for it (network, HTTP, queueing); absent without server statistics.", []string{"model"}, nil)
)

// Collector exports every monitor's state at scrape time, so the request
// path never touches a gauge.
type Collector struct{ r *Models }

// NewCollector returns a collector over r's monitors.
func NewCollector(r *Models) *Collector { return &Collector{r: r} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRate, descArrivals, descBatch, descMaxWait, descAlpha, descTau0, descR2, descSEAlpha, descTrusted, descOverhead} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.r.Monitors() {
		s := m.Snapshot()
		ch <- prometheus.MustNewConstMetric(descRate, prometheus.GaugeValue, s.RatePerSec, s.Model)
		ch <- prometheus.MustNewConstMetric(descArrivals, prometheus.CounterValue, float64(s.Arrivals), s.Model)
		ch <- prometheus.MustNewConstMetric(descBatch, prometheus.GaugeValue, float64(s.BatchSize), s.Model, s.Policy)
		ch <- prometheus.MustNewConstMetric(descMaxWait, prometheus.GaugeValue, s.MaxWait.Seconds(), s.Model)
		ch <- prometheus.MustNewConstMetric(descAlpha, prometheus.GaugeValue, s.AlphaMs/1000, s.Model)
		ch <- prometheus.MustNewConstMetric(descTau0, prometheus.GaugeValue, s.Tau0Ms/1000, s.Model)
		ch <- prometheus.MustNewConstMetric(descR2, prometheus.GaugeValue, s.R2, s.Model)
		if s.SEAlphaMs != nil {
			ch <- prometheus.MustNewConstMetric(descSEAlpha, prometheus.GaugeValue, *s.SEAlphaMs/1000, s.Model)
		}
		trusted := 1.0
		if s.FitDoubt != "" {
			trusted = 0
		}
		ch <- prometheus.MustNewConstMetric(descTrusted, prometheus.GaugeValue, trusted, s.Model)
		if s.OverheadMs != nil {
			ch <- prometheus.MustNewConstMetric(descOverhead, prometheus.GaugeValue, *s.OverheadMs/1000, s.Model)
		}
	}
}
