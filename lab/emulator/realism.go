package emulator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Realism makes the emulator as rough as a real server, so that figures
// about fitting tau(b), latency and policies are not flattered by an exact
// line. The zero value is exact: every batch takes tau(b) to the
// nanosecond and nothing else costs time.
//
// The batch's own time stays tau(b) at its median, so the line a fit should
// find is known: the profile's (times TimeScale). What Realism adds comes in
// two kinds, as on a real server:
//
//   - inside the batch (counted in compute_infer of the statistics): a
//     multiplicative log-normal spread, a heavy tail (a small share of
//     batches several times slower: a GC pause, a clock drop, a
//     co-tenant), and stalls that hold the instance for a fixed time;
//   - outside it (in the round trip only, never in the batch statistics):
//     a fixed per-request overhead (HTTP handling, the framework's Python
//     around the model) and a per-byte transfer cost of the request and
//     the answer.
//
// Requests that find every instance busy wait in Triton's FIFO queue
// whatever the realism; its wait shows in the queue statistics.
type Realism struct {
	// Sigma is the log-normal spread of the batch time: tau(b)*exp(Sigma*Z),
	// Z standard normal, so the median is tau(b). 0 <= Sigma < 1.
	Sigma float64 `json:"sigma"`
	// TailShare of batches take TailMin..TailMax (uniform) times longer.
	TailShare float64 `json:"tail_share"`
	TailMin   float64 `json:"tail_min"`
	TailMax   float64 `json:"tail_max"`
	// StallShare of batches first stall for Stall while holding the
	// instance.
	StallShare float64       `json:"stall_share"`
	Stall      time.Duration `json:"stall_ns"`
	// Overhead is spent by every request outside the batch, half before
	// it waits for an instance and half after its batch ran.
	Overhead time.Duration `json:"overhead_ns"`
	// PerMiB is the transfer cost of each MiB of request body (before the
	// batch) and of answer body (after it).
	PerMiB time.Duration `json:"per_mib_ns"`
}

// Realism presets, by name. They are meant to look like a framework-served
// model on one GPU: "rough" like Triton with a compiled backend, "noisy"
// like a Python backend (PyTriton) on a shared machine.
var realismPresets = map[string]Realism{
	"exact": {},
	"rough": {
		Sigma: 0.05, TailShare: 0.01, TailMin: 3, TailMax: 10,
		StallShare: 0.002, Stall: 20 * time.Millisecond,
		Overhead: 300 * time.Microsecond, PerMiB: 1 * time.Millisecond,
	},
	"noisy": {
		Sigma: 0.12, TailShare: 0.03, TailMin: 3, TailMax: 10,
		StallShare: 0.005, Stall: 30 * time.Millisecond,
		Overhead: 1500 * time.Microsecond, PerMiB: 4 * time.Millisecond,
	},
}

// DefaultRealism is the preset the tools mean by "realistic".
const DefaultRealism = "rough"

// RealismNames lists the presets, sorted.
func RealismNames() []string {
	names := make([]string, 0, len(realismPresets))
	for n := range realismPresets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupRealism returns the named preset.
func LookupRealism(name string) (Realism, error) {
	r, ok := realismPresets[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return Realism{}, fmt.Errorf("unknown realism %q (known: %s)", name, strings.Join(RealismNames(), ", "))
	}
	return r, nil
}

// Exact reports whether r adds nothing to the profile's line.
func (r Realism) Exact() bool { return r == Realism{} }

func (r Realism) validate() error {
	switch {
	case !(r.Sigma >= 0 && r.Sigma < 1):
		return fmt.Errorf("realism: sigma must be in [0, 1), got %v", r.Sigma)
	case !(r.TailShare >= 0 && r.TailShare <= 1):
		return fmt.Errorf("realism: tail share must be in [0, 1], got %v", r.TailShare)
	case r.TailShare > 0 && !(r.TailMin >= 1 && r.TailMax >= r.TailMin && !math.IsInf(r.TailMax, 0)):
		return fmt.Errorf("realism: tail factors must satisfy 1 <= min <= max, got %v..%v", r.TailMin, r.TailMax)
	case !(r.StallShare >= 0 && r.StallShare <= 1):
		return fmt.Errorf("realism: stall share must be in [0, 1], got %v", r.StallShare)
	case r.Stall < 0 || r.Overhead < 0 || r.PerMiB < 0:
		return fmt.Errorf("realism: stall, overhead and per-MiB cost must be >= 0")
	}
	return nil
}

// batchFactor draws the factor a batch's median time is multiplied by and
// the stall before it. Called with rngMu held.
func (s *Server) batchFactor() (float64, time.Duration) {
	return s.opts.Realism.draw(s.rng)
}

// draw draws a batch's factor on its median time and its stall.
func (r Realism) draw(rng *rand.Rand) (float64, time.Duration) {
	f := 1.0
	if r.Sigma > 0 {
		f = math.Exp(r.Sigma * rng.NormFloat64())
	}
	if r.TailShare > 0 && rng.Float64() < r.TailShare {
		f *= r.TailMin + (r.TailMax-r.TailMin)*rng.Float64()
	}
	var stall time.Duration
	if r.StallShare > 0 && rng.Float64() < r.StallShare {
		stall = r.Stall
	}
	return f, stall
}

// BatchMs draws the time of a batch whose mean time is meanMs, spread as
// the emulator spreads its batches (log-normal, tail, stall), with the
// median scaled so that the draws' mean is meanMs. A fit of the emulator's
// statistics learns the mean line, so a simulation given that fit and the
// realism (ratebatch sim --realism) runs batches as rough as the
// emulator's: near saturation the wait grows with the batch time's second
// moment, which the mean alone leaves out.
func (r Realism) BatchMs(rng *rand.Rand, meanMs float64) float64 {
	f, stall := r.draw(rng)
	stallMs := float64(stall) / float64(time.Millisecond)
	median := max(meanMs-r.StallShare*float64(r.Stall)/float64(time.Millisecond), 0) / r.meanFactor()
	return median*f + stallMs
}

// transfer is the time outside the batch a request of in bytes spends
// before its batch (half the overhead and its body's transfer), and one
// answering out bytes after it.
func (r Realism) transfer(bytes int) time.Duration {
	return r.Overhead/2 + time.Duration(float64(r.PerMiB)*float64(bytes)/(1<<20))
}

// TrueLine is the batch time the emulator runs a model at. AlphaMs and
// Tau0Ms are the mean line, E[tau(b)] = AlphaMs*b + Tau0Ms, with the
// realism's spread, tail and stalls averaged in: what a fit of the mean
// batch times (Triton's batch_stats are sums) should find, and what a
// server's throughput b/E[tau(b)] depends on. MedianAlphaMs and
// MedianTau0Ms are the line a typical batch follows (the profile's, scaled).
type TrueLine struct {
	Model         string  `json:"model"`
	AlphaMs       float64 `json:"alpha_ms"`
	Tau0Ms        float64 `json:"tau0_ms"`
	MedianAlphaMs float64 `json:"median_alpha_ms"`
	MedianTau0Ms  float64 `json:"median_tau0_ms"`
	// Realism is what the emulator adds to the line.
	Realism Realism `json:"realism"`
}

// meanFactor is E[factor] of batchFactor: exp(sigma^2/2) for the
// log-normal, times the tail's mean stretch (uniform factors; Jitter's
// uniform factor has mean 1).
func (r Realism) meanFactor() float64 {
	f := math.Exp(r.Sigma * r.Sigma / 2)
	if r.TailShare > 0 {
		f *= 1 + r.TailShare*((r.TailMin+r.TailMax)/2-1)
	}
	return f
}

// Truth returns the lines a model's batches run at.
func (s *Server) Truth(model string) (TrueLine, bool) {
	m, ok := s.byName[model]
	if !ok {
		return TrueLine{}, false
	}
	r := s.opts.Realism
	a, t0 := m.timing.AlphaMs*s.opts.TimeScale, m.timing.Tau0Ms*s.opts.TimeScale
	line := TrueLine{Model: m.name, AlphaMs: a, Tau0Ms: t0, MedianAlphaMs: a, MedianTau0Ms: t0, Realism: r}
	if a > 0 || t0 > 0 { // instant batches (scale 0) stall no more than they run
		f := r.meanFactor()
		line.AlphaMs, line.Tau0Ms = a*f, t0*f+r.StallShare*float64(r.Stall)/float64(time.Millisecond)
	}
	return line, true
}

// handleTruth serves GET /emulator/models/{model}: the true line, so that
// a fit made through the proxy can be scored. Triton has no such endpoint;
// it lives outside /v2 so no KServe client mistakes it for one.
func (s *Server) handleTruth(w http.ResponseWriter, _ *http.Request, m *model) {
	t, _ := s.Truth(m.name)
	writeJSON(w, t)
}
