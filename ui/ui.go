// Package ui serves the live page of the admin listener (/ui): per model,
// the arrival rate and the batch size over the last minutes, latency
// percentiles, requests per joule, and the tau(b) fit drawn through the
// (batch size, latency) points it was fitted on, so that a person watching
// the proxy adapt sees whether the fit is right.
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
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
	// The current fit tau(b) = AlphaMs*b + Tau0Ms and its R^2.
	AlphaMs, Tau0Ms, R2 float64
	// Cumulative batches and rows sent; differences give rows per batch.
	BatchesSent, RowsSent int64
	// RequestsPerJoule over the meter's shortest window; nil when unknown.
	RequestsPerJoule *float64
	// Batches are recent (batch size, latency) observations.
	Batches []regression.Sample
}

// Options configure a Recorder.
type Options struct {
	// States reads every batched model's state; required.
	States func() []State
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
}

// BatchPoint is one observed batch: its rows and its upstream latency.
type BatchPoint struct {
	Rows      int     `json:"rows"`
	LatencyMs float64 `json:"latency_ms"`
}

// ModelHistory is what the page draws for one model.
type ModelHistory struct {
	Model    string       `json:"model"`
	Policy   string       `json:"policy"`
	MaxBatch int          `json:"max_batch_size"`
	AlphaMs  float64      `json:"alpha_ms"`
	Tau0Ms   float64      `json:"tau0_ms"`
	R2       float64      `json:"r2"`
	Points   []Point      `json:"points"`
	Batches  []BatchPoint `json:"batches"`
}

// History is the document /ui/history.json serves.
type History struct {
	Now             float64        `json:"now"`
	IntervalSeconds float64        `json:"interval_seconds"`
	Models          []ModelHistory `json:"models"`
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

// Run samples every interval until ctx ends.
func (r *Recorder) Run(ctx context.Context) {
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
			tr = &track{last: State{BatchesSent: s.BatchesSent, RowsSent: s.RowsSent}}
			r.models[s.Model] = tr
		}
		p := Point{T: float64(now.UnixMilli()) / 1000, RateRPS: s.RateRPS, BatchSize: s.BatchSize, RequestsPerJoule: s.RequestsPerJoule}
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
		batches := make([]BatchPoint, len(s.Batches))
		for i, b := range s.Batches {
			batches[i] = BatchPoint{Rows: b.Batch, LatencyMs: b.LatencyMs}
		}
		tr.current = ModelHistory{Model: s.Model, Policy: s.Policy, MaxBatch: s.MaxBatch, AlphaMs: s.AlphaMs, Tau0Ms: s.Tau0Ms, R2: s.R2, Batches: batches}
	}
	for name := range r.models {
		if !seen[name] {
			delete(r.models, name) // unloaded upstream
		}
	}
}

// History returns the recorded history, models sorted by name.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := History{Now: float64(r.o.Now().UnixMilli()) / 1000, IntervalSeconds: r.o.Interval.Seconds(), Models: []ModelHistory{}}
	for _, tr := range r.models {
		m := tr.current
		m.Points = append([]Point(nil), tr.points...)
		h.Models = append(h.Models, m)
	}
	sort.Slice(h.Models, func(i, j int) bool { return h.Models[i].Model < h.Models[j].Model })
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
