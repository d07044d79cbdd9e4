package models

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
)

// Collector exports every monitor's state at scrape time, so the request
// path never touches a gauge.
type Collector struct{ r *Registry }

// NewCollector returns a collector over r's monitors.
func NewCollector(r *Registry) *Collector { return &Collector{r: r} }

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRate, descArrivals, descBatch, descMaxWait, descAlpha, descTau0, descR2} {
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
	}
}
