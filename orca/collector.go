package orca

import "github.com/prometheus/client_golang/prometheus"

// The pod-level gauges: one series per proxy, no labels, so that whatever
// reads one number per model server (the Gateway API Inference
// Extension's endpoint picker, KEDA, prometheus-adapter) can name it as it
// is. Per-model figures stay in ratebatch_queue_rows{model} and friends.
var (
	descUtilization = prometheus.NewDesc("ratebatch_utilization",
		"Load of the GPU against its capacity under the learnt line, rho = sum over models of rate / mu(B_max); absent until the lines of the models with arrivals are learnt. The ORCA report's application_utilization.", nil, nil)
	descWaiting = prometheus.NewDesc("ratebatch_waiting_rows",
		"Rows waiting in all of the proxy's queues (Triton's nv_inference_pending_request_count never sees them): the endpoint picker's queue metric.", nil, nil)
	descRunning = prometheus.NewDesc("ratebatch_running_rows",
		"Rows in batches sent to the upstream and not yet answered, all models.", nil, nil)
	descCapacity = prometheus.NewDesc("ratebatch_capacity_rows_per_second",
		"Rows per second the GPU serves at most at the current mix of models, under the learnt lines.", nil, nil)
)

// Collector exports the report as the gauges above, at scrape time.
func (r *Reporter) Collector() prometheus.Collector { return collector{r} }

type collector struct{ r *Reporter }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUtilization
	ch <- descWaiting
	ch <- descRunning
	ch <- descCapacity
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	rep := c.r.load()
	if rep.rhoKnown {
		ch <- prometheus.MustNewConstMetric(descUtilization, prometheus.GaugeValue, rep.rho)
	}
	ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, rep.proto.NamedMetrics[MetricQueueRows])
	ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(rep.inFlightRows))
	if v, ok := rep.proto.NamedMetrics[MetricCapacityRPS]; ok {
		ch <- prometheus.MustNewConstMetric(descCapacity, prometheus.GaugeValue, v)
	}
}
