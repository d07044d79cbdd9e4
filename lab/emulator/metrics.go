package emulator

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metric names and labels are Triton's (docs/user_guide/metrics.md): per
// model {model, version}, per GPU {gpu_uuid}. The values are read from the
// same state as the statistics endpoint at scrape time, so /metrics and
// /v2/models/stats never disagree.
var (
	modelLabels = []string{"model", "version"}
	gpuLabels   = []string{"gpu_uuid"}

	descRequestSuccess = prometheus.NewDesc("nv_inference_request_success",
		"Number of successful inference requests, all batch sizes", modelLabels, nil)
	descRequestFailure = prometheus.NewDesc("nv_inference_request_failure",
		"Number of failed inference requests, all batch sizes", modelLabels, nil)
	descInferenceCount = prometheus.NewDesc("nv_inference_count",
		"Number of inferences performed (does not include cached requests)", modelLabels, nil)
	descExecCount = prometheus.NewDesc("nv_inference_exec_count",
		"Number of model executions performed (does not include cached requests)", modelLabels, nil)
	descPending = prometheus.NewDesc("nv_inference_pending_request_count",
		"Instantaneous number of pending requests awaiting execution per-model.", modelLabels, nil)
	descRequestDuration = prometheus.NewDesc("nv_inference_request_duration_us",
		"Cumulative inference request duration in microseconds (includes cached requests)", modelLabels, nil)
	descQueueDuration = prometheus.NewDesc("nv_inference_queue_duration_us",
		"Cumulative inference queuing duration in microseconds (includes cached requests)", modelLabels, nil)
	descComputeInput = prometheus.NewDesc("nv_inference_compute_input_duration_us",
		"Cumulative compute input duration in microseconds (does not include cached requests)", modelLabels, nil)
	descComputeInfer = prometheus.NewDesc("nv_inference_compute_infer_duration_us",
		"Cumulative compute inference duration in microseconds (does not include cached requests)", modelLabels, nil)
	descComputeOutput = prometheus.NewDesc("nv_inference_compute_output_duration_us",
		"Cumulative inference compute output duration in microseconds (does not include cached requests)", modelLabels, nil)

	descGPUUtilization = prometheus.NewDesc("nv_gpu_utilization",
		"GPU utilization rate [0.0 - 1.0)", gpuLabels, nil)
	descGPUPowerUsage = prometheus.NewDesc("nv_gpu_power_usage",
		"GPU power usage in watts", gpuLabels, nil)
	descGPUPowerLimit = prometheus.NewDesc("nv_gpu_power_limit",
		"GPU power management limit in watts", gpuLabels, nil)
	descEnergy = prometheus.NewDesc("nv_energy_consumption",
		"GPU energy consumption in joules since the Triton Server started", gpuLabels, nil)
)

// collector reads the server's state at each scrape.
type collector struct{ s *Server }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descRequestSuccess, descRequestFailure, descInferenceCount, descExecCount, descPending,
		descRequestDuration, descQueueDuration, descComputeInput, descComputeInfer, descComputeOutput,
		descGPUUtilization, descGPUPowerUsage, descGPUPowerLimit, descEnergy,
	} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(d, t, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}
	us := func(d DurationStat) float64 { return float64(d.NS / 1000) }
	for _, m := range c.s.models {
		st := m.stats.snapshot()
		is := st.InferenceStats
		l := []string{m.name, modelVersion}
		emit(descRequestSuccess, prometheus.CounterValue, float64(is.Success.Count), l...)
		emit(descRequestFailure, prometheus.CounterValue, float64(is.Fail.Count), l...)
		emit(descInferenceCount, prometheus.CounterValue, float64(st.InferenceCount), l...)
		emit(descExecCount, prometheus.CounterValue, float64(st.ExecutionCount), l...)
		emit(descPending, prometheus.GaugeValue, float64(m.pool.queued()), l...)
		emit(descRequestDuration, prometheus.CounterValue, float64((is.Success.NS+is.Fail.NS)/1000), l...)
		emit(descQueueDuration, prometheus.CounterValue, us(is.Queue), l...)
		emit(descComputeInput, prometheus.CounterValue, us(is.ComputeInput), l...)
		emit(descComputeInfer, prometheus.CounterValue, us(is.ComputeInfer), l...)
		emit(descComputeOutput, prometheus.CounterValue, us(is.ComputeOutput), l...)
	}

	g := c.s.gpu.sample()
	uuid := c.s.opts.GPUUUID
	emit(descGPUUtilization, prometheus.GaugeValue, g.Utilization, uuid)
	if !c.s.opts.Profile.HasEnergy {
		return // no published energy figures: report none rather than invent them
	}
	emit(descGPUPowerUsage, prometheus.GaugeValue, g.PowerW, uuid)
	if lim := c.s.opts.PowerLimitWatts; lim > 0 {
		emit(descGPUPowerLimit, prometheus.GaugeValue, lim, uuid)
	}
	emit(descEnergy, prometheus.CounterValue, g.EnergyJ, uuid)
}
