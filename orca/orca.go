// Package orca reports the proxy's own load in the ORCA form (Open Request
// Cost Aggregation, xds.data.orca.v3.OrcaLoadReport): the report the load
// balancers in front of a fleet of ratebatch replicas read (Envoy's
// client-side weighted round robin and its ORCA header parser, Envoy
// Gateway's backend utilization, grpc-go's weighted_round_robin).
//
// The report says what only the proxy knows of its GPU:
//
//   - application_utilization is rho, the load against the GPU's capacity
//     under the line the proxy learnt: the arrival rate over mu(B_max) =
//     B_max * instances / tau(B_max), summed over the batched models
//     sharing the GPU. It is not the busy fraction: a GPU that batches
//     adaptively is busy most of the time long before it is full (it sends
//     small batches when little waits), so the busy fraction says nothing of
//     the headroom left, while rho does. And rps_fractional / rho is then
//     mu(B_max), the replica's capacity: the weight a weighted round robin
//     gives each replica is its capacity, whatever its speed.
//   - rps_fractional is the arrival rate in rows per second (requests per
//     second for single-row requests), as the monitors measure it.
//   - named metrics: queue_rows (rows waiting in the proxy, which Triton's
//     own pending count never sees), batch_size (the batch size the
//     policies chose, rate-weighted over models), capacity_rps (mu(B_max))
//     and joules_per_request (the power meter's shortest window) when known.
//
// The HTTP door sends it in the endpoint-load-metrics header (Header), the
// gRPC door in the endpoint-load-metrics-bin trailer and on the
// out-of-band xds.service.orca.v3.OpenRcaService stream, both through
// grpc-go's orca package, which takes a Reporter as its
// ServerMetricsProvider.
package orca

import (
	"encoding/base64"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	v3 "github.com/cncf/xds/go/xds/data/orca/v3"
	grpcorca "google.golang.org/grpc/orca"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Header is the HTTP response header carrying the report; FormatHeader is
// the request header that chooses its form (TEXT, JSON or BIN; TEXT when
// absent or unknown), as Triton and vLLM read it.
const (
	Header       = "endpoint-load-metrics"
	FormatHeader = "endpoint-load-metrics-format"
)

// Names of the named metrics.
const (
	MetricQueueRows        = "queue_rows"
	MetricBatchSize        = "batch_size"
	MetricCapacityRPS      = "capacity_rps"
	MetricJoulesPerRequest = "joules_per_request"
)

// Model is one batched model's state as the report needs it.
type Model struct {
	Name string
	// RatePerSec is the measured arrival rate in rows per second.
	RatePerSec float64
	// BatchSize is the batch size the model's policy chose.
	BatchSize int
	// MaxBatch and Instances bound the capacity: Instances batches of at
	// most MaxBatch rows run at once.
	MaxBatch, Instances int
	// Latency is the fitted tau(b), used when LineKnown: the line a
	// monitor starts with before any batch or seed is a placeholder.
	Latency   batchcost.Latency
	LineKnown bool
	// QueuedRows are the rows waiting in the proxy, InFlightRows those in
	// batches sent and not yet answered.
	QueuedRows, InFlightRows int
}

// CapacityRPS is mu(B_max), the rows per second the model's GPU serves at
// most, or 0 while the line is unknown.
func (m Model) CapacityRPS() float64 {
	tau := m.Latency.TauMs(m.MaxBatch)
	if !m.LineKnown || m.MaxBatch <= 0 || !(tau > 0) {
		return 0
	}
	return 1000 * float64(m.MaxBatch) * float64(max(m.Instances, 1)) / tau
}

// Options configure a Reporter.
type Options struct {
	// Models returns the batched models' state; required.
	Models func() []Model
	// JoulesPerRequest returns the energy per request, ok false while
	// unknown; nil: never known.
	JoulesPerRequest func() (j float64, ok bool)
	// MaxAge is how old a report may be before the next caller recomputes
	// it; zero: 100 ms. Computing one takes locks of the registry and the
	// dispatcher, so answers share a recent one instead.
	MaxAge time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Reporter computes the load report, at most once per MaxAge, and hands it
// out in every form. It is safe for concurrent use.
type Reporter struct {
	o   Options
	cur atomic.Pointer[report]
	mu  sync.Mutex // held while one caller recomputes
}

type report struct {
	at              time.Time
	sm              grpcorca.ServerMetrics
	text, json, bin string
	proto           *v3.OrcaLoadReport
	// For the gauges (Collector): rho when known, rows in flight.
	rho          float64
	rhoKnown     bool
	inFlightRows int
}

// New returns a Reporter.
func New(o Options) *Reporter {
	if o.MaxAge <= 0 {
		o.MaxAge = 100 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Reporter{o: o}
}

// load returns a report no older than MaxAge, or the previous one while
// another caller computes it.
func (r *Reporter) load() *report {
	now := r.o.Now()
	cur := r.cur.Load()
	if cur != nil && now.Sub(cur.at) < r.o.MaxAge {
		return cur
	}
	if cur != nil && !r.mu.TryLock() {
		return cur
	}
	if cur == nil {
		r.mu.Lock()
		if c := r.cur.Load(); c != nil {
			r.mu.Unlock()
			return c
		}
	}
	defer r.mu.Unlock()
	next := r.compute(now)
	r.cur.Store(next)
	return next
}

// Report returns the current load report as the published proto; the
// caller must not change it.
func (r *Reporter) Report() *v3.OrcaLoadReport { return r.load().proto }

// compute builds the report from the sources.
//
// It stays one function: the sums over the models and the report's three
// forms are one snapshot, taken at once.
func (r *Reporter) compute(now time.Time) *report {
	// rho sums the models' loads: they share the GPU. Utilization is
	// known when every model with arrivals has a line; with none, it is 0.
	// The capacity is the rows per second the GPU serves at the current
	// mix of models (an even mix without arrivals): 1 / sum(w_m / mu_m).
	var rate, rho, weighted, perRow, share float64
	queued, running, lines := 0, 0, 0
	known := true
	models := slices.Clone(r.o.Models()) // corrected below, not the caller's
	for i, m := range models {
		// A figure that is not a finite count is not reported as one:
		// Envoy refuses a header with NaN or infinity.
		if !finite(m.RatePerSec) || m.RatePerSec < 0 {
			models[i].RatePerSec = 0
		}
		if !finite(m.Latency.AlphaMs) || !finite(m.Latency.Tau0Ms) {
			models[i].LineKnown = false
		}
		rate += models[i].RatePerSec
	}
	for _, m := range models {
		queued += m.QueuedRows
		running += m.InFlightRows
		weighted += m.RatePerSec * float64(m.BatchSize)
		mu := m.CapacityRPS()
		if mu <= 0 {
			known = known && !(m.RatePerSec > 0)
			continue
		}
		rho += m.RatePerSec / mu
		w := 1.0
		if rate > 0 {
			w = m.RatePerSec / rate
		}
		perRow += w / mu
		share += w
		lines++
	}
	// Only finite figures are reported (sums of extreme inputs overflow).
	named := map[string]float64{}
	put := func(k string, v float64) {
		if finite(v) {
			named[k] = v
		}
	}
	put(MetricQueueRows, float64(queued))
	if rate > 0 {
		put(MetricBatchSize, weighted/rate)
	}
	if lines > 0 && perRow > 0 {
		put(MetricCapacityRPS, share/perRow)
	}
	if r.o.JoulesPerRequest != nil {
		if j, ok := r.o.JoulesPerRequest(); ok && j >= 0 {
			put(MetricJoulesPerRequest, j)
		}
	}
	if !finite(rate) {
		rate = 0
	}
	known = known && finite(rho)
	sm := grpcorca.ServerMetrics{CPUUtilization: -1, MemUtilization: -1, AppUtilization: -1, QPS: rate, EPS: -1,
		Utilization: map[string]float64{}, RequestCost: map[string]float64{}, NamedMetrics: named}
	if known {
		sm.AppUtilization = rho
	}
	pb := &v3.OrcaLoadReport{RpsFractional: rate, NamedMetrics: named}
	if known {
		pb.ApplicationUtilization = rho
	}
	rep := &report{at: now, sm: sm, proto: pb, rho: rho, rhoKnown: known, inFlightRows: running}
	rep.text = textForm(pb, known)
	if b, err := protojson.Marshal(pb); err == nil {
		rep.json = "JSON " + string(b)
	}
	if b, err := proto.Marshal(pb); err == nil {
		rep.bin = "BIN " + base64.StdEncoding.EncodeToString(b)
	}
	return rep
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// textForm is Envoy's native form: "TEXT k=v, k=v", named metrics as
// named_metrics.NAME, in a fixed order.
func textForm(pb *v3.OrcaLoadReport, utilization bool) string {
	var b strings.Builder
	b.WriteString("TEXT ")
	sep := ""
	put := func(k string, v float64) {
		b.WriteString(sep)
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strconv.FormatFloat(v, 'g', 6, 64))
		sep = ", "
	}
	if utilization {
		put("application_utilization", pb.ApplicationUtilization)
	}
	put("rps_fractional", pb.RpsFractional)
	for _, k := range []string{MetricQueueRows, MetricBatchSize, MetricCapacityRPS, MetricJoulesPerRequest} {
		if v, ok := pb.NamedMetrics[k]; ok {
			put("named_metrics."+k, v)
		}
	}
	return b.String()
}

// HeaderValue is the endpoint-load-metrics header's value in the form the
// request's endpoint-load-metrics-format header asks for: "JSON", "BIN" (or
// "binary"), else TEXT.
func (r *Reporter) HeaderValue(format []byte) string {
	rep := r.load()
	switch {
	case strings.EqualFold(string(format), "json"):
		return rep.json
	case strings.EqualFold(string(format), "bin"), strings.EqualFold(string(format), "binary"):
		return rep.bin
	}
	return rep.text
}

// ServerMetrics implements grpc-go's orca.ServerMetricsProvider: the
// report of the endpoint-load-metrics-bin trailer and of the out-of-band
// stream. It returns a copy the caller may change.
func (r *Reporter) ServerMetrics() *grpcorca.ServerMetrics {
	sm := r.load().sm
	sm.Utilization = map[string]float64{}
	sm.RequestCost = map[string]float64{}
	named := make(map[string]float64, len(sm.NamedMetrics))
	for k, v := range sm.NamedMetrics {
		named[k] = v
	}
	sm.NamedMetrics = named
	return &sm
}
