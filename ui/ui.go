// Package ui serves the live page of the admin listener (/ui): per model,
// most active first, a headline row (requests per joule and what batching
// gains over ad-hoc, p50 and p99 latency, batch size, load), then the
// arrival rate and the batch size over the last minutes, latency
// percentiles, requests per joule, the callers by kind (closed-loop with
// their think time, open-loop), and the tau(b) fit beside the round
// trips the proxy measured, so that a person watching the proxy adapt sees
// what it buys and whether the fit is right.
//
// The page is plain HTML, JavaScript and SVG embedded in the binary: no
// build step, nothing fetched from elsewhere. It polls /ui/history.json,
// which a Recorder fills with one point per model per second, kept in a
// bounded ring.
package ui

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"math"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
	"github.com/ratebatch/ratebatch/regression"
)

//go:embed static
var static embed.FS

// LatencyMetric is the histogram the Recorder reads latency percentiles
// from: end-to-end latency of batched requests, by model (and front door).
const LatencyMetric = "ratebatch_request_duration_seconds"

// State is one model's state at a sampling instant, as the proxy knows it.
type State struct {
	Model     string
	Policy    string
	RateRPS   float64 // the monitor's arrival rate over its last window
	BatchSize int     // the batch size the rule aims for
	MaxBatch  int
	Instances int
	// The current fit tau(b) = AlphaMs*b + Tau0Ms and its R^2.
	AlphaMs, Tau0Ms, R2 float64
	// FitSource is what the fit was made from (monitor.Snapshot's: "server
	// statistics" or "round trip"); OverheadMs the mean round trip beyond
	// the server's tau(b), nil without server statistics.
	FitSource  string
	OverheadMs *float64
	// PlannedP99Ms is the p99 the rule's plan predicts (the budget
	// policy's tail model); 0 when it predicts none.
	PlannedP99Ms float64
	// Phase and PhaseReason are where a policy that earns its holds
	// stands (monitor.Snapshot's: learning, holding, adhoc) and why.
	Phase, PhaseReason string
	// Energy is the batch energy line zeta(b) in mJ; nil when unknown.
	Energy *batchcost.Energy
	// EnergyUnavailable is why the meter measures nothing ("" when it
	// measures: power.Snapshot's Unavailable).
	EnergyUnavailable string
	// Objective is what the policy's plan optimises (monitor.Snapshot's),
	// "" for a policy that weighs no energy.
	Objective string
	// Cumulative batches and rows sent; differences give rows per batch.
	BatchesSent, RowsSent int64
	// RequestsPerJoule over the meter's shortest window; nil when unknown.
	RequestsPerJoule *float64
	// Batches are recent (batch size, round trip) observations the proxy
	// measured: the monitor's round-trip samples.
	Batches []regression.Sample
	// Sources are the model's callers as the dispatcher has learnt them.
	Sources dispatcher.SourceStats
	// Health is the model's state upstream: failing or not, and the last
	// active probe.
	Health Health
}

// Health is a model's state as the outlier detector and the active probes
// see it.
type Health struct {
	Failing   bool                    `json:"failing"`
	Reason    string                  `json:"reason,omitempty"`
	LastProbe *dispatcher.ProbeReport `json:"last_probe,omitempty"`
}

// Mode is what the proxy does with one model's inference calls (batched
// or passed through), and why, as the page lists every model it knows.
type Mode struct {
	Model  string `json:"model"`
	Mode   string `json:"mode"`
	Reason string `json:"reason,omitempty"`
}

// Options configure a Recorder.
type Options struct {
	// States reads every batched model's state; required.
	States func() []State
	// Modes lists every model the proxy knows with its mode and the
	// reason; nil: the page lists none.
	Modes func() []Mode
	// Gatherer holds LatencyMetric; nil leaves latency out.
	Gatherer prometheus.Gatherer
	// Interval between samples (default 1s) and points kept per model
	// (default 600: ten minutes at 1s).
	Interval time.Duration
	Keep     int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Point is one model over one interval.
type Point struct {
	T         float64 `json:"t"` // Unix seconds at the end of the interval
	RateRPS   float64 `json:"rate_rps"`
	BatchSize int     `json:"batch_size"`
	// SentBatch is the mean rows per batch sent during the interval; nil
	// when no batch was sent.
	SentBatch        *float64 `json:"sent_batch"`
	P50Ms            *float64 `json:"p50_ms"`
	P90Ms            *float64 `json:"p90_ms"`
	P99Ms            *float64 `json:"p99_ms"`
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	// The callers at the sample, by kind (dispatcher.SourceStats), and
	// the closed-loop ones' mean think time (nil without one).
	ClosedLoop     int      `json:"closed_loop"`
	OpenLoop       int      `json:"open_loop"`
	UnknownSources int      `json:"unknown_sources"`
	ThinkMs        *float64 `json:"think_ms"`
}

// BatchPoint is one observed batch: its rows and its upstream latency.
type BatchPoint struct {
	Rows      int     `json:"rows"`
	LatencyMs float64 `json:"latency_ms"`
}

// ModelHistory is what the page draws for one model.
type ModelHistory struct {
	Model      string   `json:"model"`
	Policy     string   `json:"policy"`
	MaxBatch   int      `json:"max_batch_size"`
	Instances  int      `json:"instances"`
	AlphaMs    float64  `json:"alpha_ms"`
	Tau0Ms     float64  `json:"tau0_ms"`
	R2         float64  `json:"r2"`
	FitSource  string   `json:"fit_source"`
	OverheadMs *float64 `json:"overhead_ms"`
	// PlannedP99Ms is the p99 the plan predicts; null when none.
	PlannedP99Ms *float64 `json:"planned_p99_ms"`
	BetaMJ       *float64 `json:"beta_mj"`  // energy line zeta(b) = beta*b + zeta0; null when unknown
	Zeta0MJ      *float64 `json:"zeta0_mj"` //
	// EnergyUnavailable is why the meter measures nothing, absent when it
	// measures; Objective what the policy optimises (State's).
	EnergyUnavailable string       `json:"energy_unavailable,omitempty"`
	Objective         string       `json:"objective,omitempty"`
	Headline          Headline     `json:"headline"`
	Points            []Point      `json:"points"`
	Batches           []BatchPoint `json:"batches"`
	// Phase and PhaseReason: State's.
	Phase       string `json:"phase,omitempty"`
	PhaseReason string `json:"phase_reason,omitempty"`

	// Sources are the callers now (dispatcher.SourceStats).
	Sources dispatcher.SourceStats `json:"sources"`
	Health  Health                 `json:"health"`
}

// Headline is a model's last minute (or less, since the first sample) in
// the figures a person came for. Measured figures are the proxy's and the
// meter's; the gain over ad-hoc is modelled from the energy line.
type Headline struct {
	// Seconds is the span the figures cover.
	Seconds float64 `json:"seconds"`
	// SentRPS is the rows sent upstream per second: the model's activity,
	// which orders the page.
	SentRPS float64 `json:"sent_rps"`
	// SentBatch is the mean rows per batch sent; nil without a batch.
	SentBatch *float64 `json:"sent_batch"`
	// P50Ms and P99Ms are end-to-end latency percentiles of the span.
	P50Ms *float64 `json:"p50_ms"`
	P99Ms *float64 `json:"p99_ms"`
	// Rho is the device's load at the batches sent: sent rate times
	// tau(b)/b per instance (1 is saturation).
	Rho *float64 `json:"rho"`
	// RequestsPerJoule is the meter's figure over its shortest window.
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	// AdhocBatch is the mean batch ad-hoc would send at the rate sent:
	// everything waiting whenever the device is free, on the fitted line
	// (smdp.AdHocMeanBatch: the exact chain, B_max at saturation). AdhocMJ is its
	// energy per request, zeta(b)/b at that batch; BatchedMJ is zeta(b)/b
	// at the mean batch sent; Gain is AdhocMJ/BatchedMJ, the requests per
	// joule batching yields over ad-hoc's. Nil without the energy line.
	AdhocBatch *float64 `json:"adhoc_batch"`
	AdhocMJ    *float64 `json:"adhoc_mj_per_request"`
	BatchedMJ  *float64 `json:"batched_mj_per_request"`
	Gain       *float64 `json:"gain_vs_adhoc"`
}

// HeadlineWindow is the span the headline figures cover.
const HeadlineWindow = time.Minute

// History is the document /ui/history.json serves.
type History struct {
	Now             float64        `json:"now"`
	IntervalSeconds float64        `json:"interval_seconds"`
	Models          []ModelHistory `json:"models"`
	// Modes are every model the proxy knows, batched or not, as read
	// when the document is served.
	Modes []Mode `json:"modes"`
}

// Recorder samples the proxy once per interval and keeps a bounded history.
type Recorder struct {
	o Options

	mu     sync.Mutex
	models map[string]*track
}

type track struct {
	last    State
	hist    []uint64 // cumulative latency bucket counts at the last sample
	bounds  []float64
	points  []Point
	current ModelHistory
	// cums are the cumulative counters at the last samples, oldest first,
	// enough to span HeadlineWindow.
	cums []cumulative
	// adhoc is the last ad-hoc batch modelled and what it was modelled
	// for: evaluating the chain takes milliseconds, so it is redone only
	// when the line or the rate moved.
	adhoc adhocModel
}

type adhocModel struct {
	lat      batchcost.Latency
	maxBatch int
	lambda   float64
	batch    float64
}

// adhocBatchTolerance is the relative change of the rate that asks for a
// new evaluation of ad-hoc's batch; within it the batch barely moves.
const adhocBatchTolerance = 0.01

// adhocBatch is smdp.AdHocMeanBatch, kept while the model stays the same.
func (tr *track) adhocBatch(lat batchcost.Latency, maxBatch int, lambdaPerMs float64) float64 {
	a := tr.adhoc
	if a.batch > 0 && a.lat == lat && a.maxBatch == maxBatch && math.Abs(lambdaPerMs-a.lambda) <= adhocBatchTolerance*a.lambda {
		return a.batch
	}
	tr.adhoc = adhocModel{lat: lat, maxBatch: maxBatch, lambda: lambdaPerMs, batch: smdp.AdHocMeanBatch(lat, maxBatch, lambdaPerMs)}
	return tr.adhoc.batch
}

// cumulative is a model's counters at one sample.
type cumulative struct {
	t             float64
	batches, rows int64
	hist          []uint64
}

// NewRecorder returns a Recorder; call Run to start sampling.
func NewRecorder(o Options) *Recorder {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Keep <= 0 {
		o.Keep = 600
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Recorder{o: o, models: map[string]*track{}}
}

// Run samples every interval until ctx ends. A panic of a sample (a
// state reader's, the histogram's) is recovered, counted in
// ratebatch_panics_total{site="ui"}, and sampling starts again after a
// pause (guard.Loop), as the proxy's other background loops do: the live
// page must not take the proxy down with it.
func (r *Recorder) Run(ctx context.Context) { guard.Loop(ctx, nil, "ui", r.run) }

func (r *Recorder) run(ctx context.Context) {
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Sample()
		}
	}
}

// Sample takes one sample now. Run calls it; tests may too.
func (r *Recorder) Sample() {
	now := r.o.Now()
	states := r.o.States()
	lat := latencyBuckets(r.o.Gatherer)
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range states {
		seen[s.Model] = true
		tr := r.models[s.Model]
		if tr == nil {
			// The per-second points start from this sample's counters. The
			// headline starts from zero an interval earlier when the model
			// sent rows before its first sample (its counters start at
			// zero when it is registered, its histogram at its first
			// request), so that they count in its first minute.
			tr = &track{last: State{BatchesSent: s.BatchesSent, RowsSent: s.RowsSent}}
			if s.RowsSent > 0 || s.BatchesSent > 0 {
				tr.cums = []cumulative{{t: float64(now.Add(-r.o.Interval).UnixMilli()) / 1000}}
			}
			r.models[s.Model] = tr
		}
		p := Point{T: float64(now.UnixMilli()) / 1000, RateRPS: s.RateRPS, BatchSize: s.BatchSize, RequestsPerJoule: s.RequestsPerJoule,
			ClosedLoop: s.Sources.ClosedLoop, OpenLoop: s.Sources.OpenLoop, UnknownSources: s.Sources.Unknown, ThinkMs: s.Sources.ThinkMs}
		if db := s.BatchesSent - tr.last.BatchesSent; db > 0 {
			v := float64(s.RowsSent-tr.last.RowsSent) / float64(db)
			p.SentBatch = &v
		}
		if h, ok := lat[s.Model]; ok {
			if len(tr.hist) == len(h.counts) {
				delta := make([]uint64, len(h.counts))
				for i := range delta {
					delta[i] = h.counts[i] - min(tr.hist[i], h.counts[i])
				}
				p.P50Ms, p.P90Ms, p.P99Ms = quantileMs(h.bounds, delta, 0.5), quantileMs(h.bounds, delta, 0.9), quantileMs(h.bounds, delta, 0.99)
			}
			tr.hist, tr.bounds = h.counts, h.bounds
		}
		tr.last = s
		tr.points = append(tr.points, p)
		if len(tr.points) > r.o.Keep {
			tr.points = append(tr.points[:0], tr.points[len(tr.points)-r.o.Keep:]...)
		}
		tr.cums = append(tr.cums, cumulative{t: p.T, batches: s.BatchesSent, rows: s.RowsSent, hist: tr.hist})
		if keep := max(2, int(HeadlineWindow/r.o.Interval)+1); len(tr.cums) > keep {
			tr.cums = append(tr.cums[:0], tr.cums[len(tr.cums)-keep:]...)
		}
		tr.current = current(s, tr)
	}
	for name := range r.models {
		if !seen[name] {
			delete(r.models, name) // unloaded upstream
		}
	}
}

// current is a model's page as of its newest sample.
func current(s State, tr *track) ModelHistory {
	batches := make([]BatchPoint, len(s.Batches))
	for i, b := range s.Batches {
		batches[i] = BatchPoint{Rows: b.Batch, LatencyMs: b.LatencyMs}
	}
	m := ModelHistory{Model: s.Model, Policy: s.Policy, MaxBatch: s.MaxBatch, Instances: max(s.Instances, 1),
		AlphaMs: s.AlphaMs, Tau0Ms: s.Tau0Ms, R2: s.R2, FitSource: s.FitSource, OverheadMs: s.OverheadMs, Batches: batches,
		Sources: s.Sources, Health: s.Health, EnergyUnavailable: s.EnergyUnavailable, Objective: s.Objective,
		Phase: s.Phase, PhaseReason: s.PhaseReason}
	if s.PlannedP99Ms > 0 {
		p99 := s.PlannedP99Ms
		m.PlannedP99Ms = &p99
	}
	if s.Energy != nil {
		beta, zeta0 := s.Energy.BetaMJ, s.Energy.Zeta0MJ
		m.BetaMJ, m.Zeta0MJ = &beta, &zeta0
	}
	m.Headline = headline(s, tr, m.Instances)
	return m
}

// headline sums up a model's last HeadlineWindow from the counters kept.
func headline(s State, tr *track, instances int) Headline {
	var h Headline
	if n := len(tr.points); n > 0 {
		h.RequestsPerJoule = tr.points[n-1].RequestsPerJoule
	}
	if len(tr.cums) < 2 {
		return h
	}
	first, last := tr.cums[0], tr.cums[len(tr.cums)-1]
	h.Seconds = last.t - first.t
	if h.Seconds <= 0 {
		return h
	}
	rows, batches := last.rows-first.rows, last.batches-first.batches
	h.SentRPS = float64(rows) / h.Seconds
	if len(last.hist) > 0 {
		// From the oldest sample: one without a histogram had no request
		// yet (a model's histogram appears with its first), so counts
		// from zero.
		delta := slices.Clone(last.hist)
		for _, c := range tr.cums {
			if len(c.hist) == 0 {
				break
			}
			if len(c.hist) == len(last.hist) {
				for i := range delta {
					delta[i] -= min(c.hist[i], last.hist[i])
				}
				break
			}
		}
		h.P50Ms, h.P99Ms = quantileMs(tr.bounds, delta, 0.5), quantileMs(tr.bounds, delta, 0.99)
	}
	if batches <= 0 {
		return h
	}
	b := float64(rows) / float64(batches)
	h.SentBatch = &b
	if tau := s.AlphaMs*b + s.Tau0Ms; tau > 0 {
		rho := h.SentRPS * tau / 1000 / b / float64(instances)
		h.Rho = &rho
	}
	if e := s.Energy; e != nil && e.ZetaMJ(1) > 0 && e.BetaMJ*b+e.Zeta0MJ > 0 {
		// Ad-hoc at this load on each instance: what waits whenever the
		// device is free (smdp.AdHocMeanBatch).
		ab := tr.adhocBatch(batchcost.Latency{AlphaMs: s.AlphaMs, Tau0Ms: s.Tau0Ms}, s.MaxBatch, h.SentRPS/1000/float64(instances))
		adhoc, batched := (e.BetaMJ*ab+e.Zeta0MJ)/ab, (e.BetaMJ*b+e.Zeta0MJ)/b
		gain := adhoc / batched
		h.AdhocBatch, h.AdhocMJ, h.BatchedMJ, h.Gain = &ab, &adhoc, &batched, &gain
	}
	return h
}

// History returns the recorded history, the most active model first (rows
// sent over the headline window), then by name: an idle model must not
// fill the first screen.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{Now: float64(r.o.Now().UnixMilli()) / 1000, IntervalSeconds: r.o.Interval.Seconds(), Models: []ModelHistory{},
		Modes: []Mode{}}
	if r.o.Modes != nil {
		h.Modes = append(h.Modes, r.o.Modes()...)
	}
	for _, tr := range r.models {
		m := tr.current
		m.Points = append([]Point(nil), tr.points...)
		h.Models = append(h.Models, m)
	}
	sort.Slice(h.Models, func(i, j int) bool {
		a, b := h.Models[i], h.Models[j]
		if a.Headline.SentRPS != b.Headline.SentRPS {
			return a.Headline.SentRPS > b.Headline.SentRPS
		}
		return a.Model < b.Model
	})
	return h
}

// Handler serves the page at prefix (e.g. /ui), its script and
// prefix/history.json.
func (r *Recorder) Handler(prefix string) http.Handler {
	files, _ := fs.Sub(static, "static")
	fileServer := http.StripPrefix(prefix, http.FileServer(http.FS(files)))
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch rest := strings.TrimPrefix(req.URL.Path, prefix); rest {
		case "":
			http.Redirect(w, req, prefix+"/", http.StatusMovedPermanently)
		case "/history.json":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			json.NewEncoder(w).Encode(r.History())
		default:
			fileServer.ServeHTTP(w, req)
		}
	})
}

// histogram is one model's latency histogram summed over its label sets.
type histogram struct {
	bounds []float64 // upper bounds in seconds, ascending, without +Inf
	counts []uint64  // cumulative counts per bound, then the total
}

func latencyBuckets(g prometheus.Gatherer) map[string]histogram {
	out := map[string]histogram{}
	if g == nil {
		return out
	}
	families, err := g.Gather()
	if err != nil && len(families) == 0 {
		return out
	}
	for _, f := range families {
		if f.GetName() != LatencyMetric || f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.GetMetric() {
			model := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "model" {
					model = l.GetValue()
				}
			}
			hg := m.GetHistogram()
			h := out[model]
			if h.bounds == nil {
				for _, b := range hg.GetBucket() {
					h.bounds = append(h.bounds, b.GetUpperBound())
				}
				h.counts = make([]uint64, len(h.bounds)+1)
			}
			if len(hg.GetBucket()) != len(h.bounds) {
				continue
			}
			for i, b := range hg.GetBucket() {
				h.counts[i] += b.GetCumulativeCount()
			}
			h.counts[len(h.bounds)] += hg.GetSampleCount()
			out[model] = h
		}
	}
	return out
}

// quantileMs estimates quantile q in ms from cumulative bucket counts as
// Prometheus's histogram_quantile does: linear within the bucket. nil when
// the interval saw no request.
func quantileMs(bounds []float64, cum []uint64, q float64) *float64 {
	total := cum[len(cum)-1]
	if total == 0 {
		return nil
	}
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for i, b := range bounds {
		if float64(cum[i]) >= rank {
			in := float64(cum[i] - below)
			v := lower
			if in > 0 {
				v += (b - lower) * (rank - float64(below)) / in
			}
			v *= 1000
			return &v
		}
		lower, below = b, cum[i]
	}
	v := bounds[len(bounds)-1] * 1000 // beyond the last bound: its value, as Prometheus does
	if math.IsInf(v, 0) {
		return nil
	}
	return &v
}
