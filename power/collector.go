package power

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric descriptors, in base units. A series whose figure is unknown is
// left out of the scrape rather than exported as 0.
var (
	descGPUEnergy = prometheus.NewDesc("ratebatch_gpu_energy_joules_total",
		"Energy the GPU used since the proxy started measuring, in joules.", []string{"gpu"}, nil)
	descGPUPower = prometheus.NewDesc("ratebatch_gpu_power_watts",
		"Board power of the GPU at the newest reading, in watts.", []string{"gpu"}, nil)
	descGPUIdlePower = prometheus.NewDesc("ratebatch_gpu_idle_power_watts",
		"Mean GPU power while no batch was in flight, in watts.", []string{"gpu"}, nil)
	descGPUBusyPower = prometheus.NewDesc("ratebatch_gpu_busy_power_watts",
		"Mean GPU power while a batch was in flight, in watts (energy not explained by idle power per busy second).", []string{"gpu"}, nil)
	descGPUBusy = prometheus.NewDesc("ratebatch_gpu_busy_seconds_total",
		"Time with at least one batch in flight on the GPU, in seconds.", []string{"gpu"}, nil)
	descGPUReadErrors = prometheus.NewDesc("ratebatch_gpu_energy_read_errors_total",
		"Failed energy or power readings of the GPU.", []string{"gpu"}, nil)
	descGPUAvgPower = prometheus.NewDesc("ratebatch_gpu_average_power_watts",
		"Mean GPU power over the window, in watts.", []string{"gpu", "window"}, nil)
	descGPURPJ = prometheus.NewDesc("ratebatch_gpu_requests_per_joule",
		"Requests served per joule the GPU used over the window.", []string{"gpu", "window"}, nil)
	descAvailable = prometheus.NewDesc("ratebatch_power_available",
		"1 while the energy source yields figures, else 0 (no source, or it reads nothing: /status energy.unavailable says why; energy-aware policies then optimise GPU busy time).", nil, nil)
	descSourceErrors = prometheus.NewDesc("ratebatch_energy_source_errors_total",
		"Polls of the energy source that failed as a whole.", nil, nil)
	descRPJ = prometheus.NewDesc("ratebatch_requests_per_joule",
		"Requests served per joule used by all measured GPUs over the window.", []string{"window"}, nil)
	descJPR = prometheus.NewDesc("ratebatch_joules_per_request",
		"Joules used by all measured GPUs per request served over the window.", []string{"window"}, nil)
	descModelRPJ = prometheus.NewDesc("ratebatch_model_requests_per_joule",
		"Requests of the model served per joule attributed to it (by batch time) over the window.", []string{"model", "window"}, nil)
	descModelJPR = prometheus.NewDesc("ratebatch_model_joules_per_request",
		"Joules attributed to the model (by batch time) per request of it served over the window.", []string{"model", "window"}, nil)
)

var _ prometheus.Collector = (*Meter)(nil)

// Describe sends every descriptor the Meter may export.
func (m *Meter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descGPUEnergy, descGPUPower, descGPUIdlePower, descGPUBusyPower, descGPUBusy,
		descGPUReadErrors, descGPUAvgPower, descGPURPJ, descSourceErrors, descAvailable,
		descRPJ, descJPR, descModelRPJ, descModelJPR,
	} {
		ch <- d
	}
}

// Collect exports the figures of Snapshot. Without an energy source it
// exports only that it measures nothing.
func (m *Meter) Collect(ch chan<- prometheus.Metric) {
	s := m.Snapshot()
	var on float64
	if s.Available {
		on = 1
	}
	emit(ch, descAvailable, prometheus.GaugeValue, on)
	if !m.hasSource {
		return
	}
	emit(ch, descSourceErrors, prometheus.CounterValue, float64(s.SourceErrors))
	for _, g := range s.GPUs {
		emit(ch, descGPUReadErrors, prometheus.CounterValue, float64(g.ReadErrors), g.GPU)
		emit(ch, descGPUBusy, prometheus.CounterValue, g.BusySeconds, g.GPU)
		if f := g.Windows[TotalWindow]; f.EnergyJ != nil {
			emit(ch, descGPUEnergy, prometheus.CounterValue, *f.EnergyJ, g.GPU)
		}
		gauge(ch, descGPUPower, g.PowerW, g.GPU)
		gauge(ch, descGPUIdlePower, g.IdlePowerW, g.GPU)
		gauge(ch, descGPUBusyPower, g.BusyPowerW, g.GPU)
		for w, f := range g.Windows {
			gauge(ch, descGPUAvgPower, f.AvgPowerW, g.GPU, w)
			gauge(ch, descGPURPJ, f.RequestsPerJoule, g.GPU, w)
		}
	}
	for w, f := range s.Windows {
		gauge(ch, descRPJ, f.RequestsPerJoule, w)
		gauge(ch, descJPR, f.JoulesPerRequest, w)
	}
	for _, ms := range s.Models {
		for w, f := range ms.Windows {
			gauge(ch, descModelRPJ, f.RequestsPerJoule, ms.Model, w)
			gauge(ch, descModelJPR, f.JoulesPerRequest, ms.Model, w)
		}
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v *float64, labels ...string) {
	if v != nil {
		emit(ch, d, prometheus.GaugeValue, *v, labels...)
	}
}

// emit sends one sample. Label values come from the network (model names,
// GPU ids), so invalid UTF-8 is replaced rather than allowed to fail the
// whole scrape.
func emit(ch chan<- prometheus.Metric, d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
	for i, l := range labels {
		labels[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	m, err := prometheus.NewConstMetric(d, t, v, labels...)
	if err != nil {
		m = prometheus.NewInvalidMetric(d, err)
	}
	ch <- m
}
