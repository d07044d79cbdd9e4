package monitor

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/regression"
)

// serverHalfLife is the half-life of the per-size batch counts of the
// server's statistics: long, because a model's line does not drift, and the
// memory of sizes seen earlier is what keeps the line identified.
const serverHalfLife = time.Minute

// sizeMean is the decayed batch count and summed time of one batch size,
// and the mean time of its batches in each of the last recentWindows reads
// that ran any (a ring, next is where the next one goes).
type sizeMean struct {
	n, ms  float64
	recent []float64
	next   int
}

// recentWindows is how many per-read means of a size its typical time is
// the median of: enough for a stable median, few enough to follow a change.
const recentWindows = 64

// add records n batches that took ms in all since the last read.
func (a *sizeMean) add(n int64, ms float64) {
	a.n += float64(n)
	a.ms += ms
	mean := ms / float64(n)
	if len(a.recent) < recentWindows {
		a.recent = append(a.recent, mean)
		return
	}
	a.recent[a.next] = mean
	a.next = (a.next + 1) % recentWindows
}

// typical is the median of the size's recent per-read means.
func (a *sizeMean) typical() float64 {
	v := slices.Clone(a.recent)
	slices.Sort(v)
	k := len(v)
	if k%2 == 1 {
		return v[k/2]
	}
	return (v[k/2-1] + v[k/2]) / 2
}

// BatchTotal is a server's cumulative account of one batch size: how many
// batches of that size ran and their summed compute time (Triton's
// batch_stats: compute_input + compute_infer + compute_output).
type BatchTotal struct {
	Batch int
	Count int64
	Time  time.Duration
}

// ObserveServer takes the server's cumulative per-batch-size statistics.
// The first call only sets the baseline. Each later one adds the batches
// run since the call before to a mean per batch size, whose weight (the
// batch count) halves every serverHalfLife: the fit then runs on one
// point per size, each as sure as the batches behind it. A size the traffic
// has not formed lately keeps its mean, with a fading weight, so the line
// stays anchored when load concentrates on a few sizes (at high load nearly
// every batch is B_max, and the intercept would otherwise be a guess). A
// count that went down (the server restarted) starts a new baseline for
// that size.
func (m *Monitor) ObserveServer(totals []BatchTotal) {
	m.serverMu.Lock()
	defer m.serverMu.Unlock()
	first := m.lastTotals == nil
	if first {
		m.lastTotals = make(map[int]BatchTotal, len(totals))
		m.perSize = map[int]*sizeMean{}
	}
	now := m.now()
	since := float64(now.Sub(m.lastRead))
	decay := math.Exp2(-since / float64(serverHalfLife))
	m.lastRead = now
	for _, a := range m.perSize {
		a.n *= decay
		a.ms *= decay
	}
	reads := make(map[int]serverRead, len(totals))
	for _, t := range totals {
		if t.Batch < 1 || t.Count < 0 {
			continue
		}
		prev, seen := m.lastTotals[t.Batch]
		m.lastTotals[t.Batch] = t
		if first || t.Count < prev.Count || t.Time < prev.Time {
			continue
		}
		if !seen || prev.Count == 0 {
			// The first executions of a size on this server include its
			// warm-up (a Python backend's first call takes hundreds of
			// ms; caches, autotuning): they set the baseline, they are
			// not learnt.
			continue
		}
		n := t.Count - prev.Count
		ms := float64(t.Time-prev.Time) / float64(time.Millisecond)
		reads[t.Batch] = serverRead{n: n, ms: ms}
		if n == 0 {
			continue
		}
		a := m.perSize[t.Batch]
		if a == nil {
			a = &sizeMean{}
			m.perSize[t.Batch] = a
		}
		a.add(n, ms)
		m.serverBatches.Add(n)
		m.serverFed.Store(true)
	}
	m.readGaps(math.Exp2(-since/float64(gapHalfLife)), reads)
}

// serverRead is one batch size's executions between two reads of the
// server's statistics: n batches that took ms in all.
type serverRead struct {
	n  int64
	ms float64
}

// serverSamples is the typical time of each batch size in the server's
// statistics (see serverFit), weighted by its decayed batch count, and the
// decayed counts and summed times behind them.
func (m *Monitor) serverSamples() (typical []regression.Sample, counts map[int]float64, totalMs float64) {
	m.serverMu.Lock()
	defer m.serverMu.Unlock()
	typical = make([]regression.Sample, 0, len(m.perSize))
	counts = make(map[int]float64, len(m.perSize))
	for b, a := range m.perSize {
		if a.n > 0 && a.ms > 0 && len(a.recent) > 0 {
			typical = append(typical, regression.Sample{Batch: b, LatencyMs: a.typical(), Weight: a.n})
			counts[b] = a.n
			totalMs += a.ms
		}
	}
	slices.SortFunc(typical, func(x, y regression.Sample) int { return x.Batch - y.Batch })
	return typical, counts, totalMs
}

// serverFit fits the line to the server's statistics in two steps.
//
// The line that matters is the mean one: throughput b/tau(b) and Triton's
// summed statistics both include the rare slow batches (a GC pause, a
// clock drop, a page fault storm). But a size's mean is a poor point to
// fit when sizes are seen at very different rates, as at high load, where
// nearly every batch is B_max and the sizes below it are formed a few dozen
// times: a 1-in-100 slow batch is in B_max's mean and missing from most
// small sizes' samples, so those read low, the slope steepens and tau0,
// extrapolated across the sizes, reads low (docs/LEARNING.md, "Learning
// tau(b) from the right signal").
//
// So the shape comes from each size's typical time (the median of its
// per-read means), which does not depend on how often the size was seen,
// and the level from all batches pooled: the line is scaled so that it
// accounts for the time the server really spent on the batches it ran.
// The scale is known as well as the busiest size's mean, the best-measured
// figure there is.
func (m *Monitor) serverFit() (regression.Fit, error) {
	typical, counts, totalMs := m.serverSamples()
	// One point per size, each over many batches: a size's point is no
	// outlier to reject, and a robust scale over a few unequally weighted
	// points would reject all but the heaviest.
	o := m.fitOpts
	o.OutlierCut = -1
	f, err := regression.FitSamples(typical, o)
	if err != nil || f.N == 0 {
		return f, err
	}
	var predicted float64
	for b, n := range counts {
		predicted += n * f.TauMs(b)
	}
	if predicted <= 0 || totalMs <= 0 {
		return f, nil
	}
	c := totalMs / predicted
	f.AlphaMs *= c
	f.Tau0Ms *= c
	f.SEAlphaMs *= c
	f.SETau0Ms *= c
	return f, nil
}

// fit is the current tau(b) fit: of the server's statistics once they
// arrive, else of the round trips.
func (m *Monitor) fit() (regression.Fit, error) {
	if m.serverFed.Load() {
		return m.serverFit()
	}
	return m.est.Fit()
}

// Samples returns the recent (batch size, latency) observations the tau(b)
// fit is made from, oldest first.
func (m *Monitor) Samples() []regression.Sample { return m.est.Samples() }

// doubt says why the fit is not to be trusted yet, "" when it is.
func (m *Monitor) doubt(f regression.Fit) string {
	switch {
	case f.N == 0 && m.guessed:
		return "no batch measured yet"
	case f.N == 0:
		return "" // a measured seed (profile, server statistics) and nothing newer
	case !m.guessed && f.N-f.Outliers < 3:
		return "" // a measured seed, and too few samples yet to judge it by
	case m.guessed && f.KeptSizes < 2:
		return fmt.Sprintf("one batch size among %d samples kept: the slope is unknown", f.N-f.Outliers)
	case f.RelErr() > MaxRelErr:
		return fmt.Sprintf("tau(b) fit uncertain: alpha %.3g ± %.2g ms, tau0 %.3g ± %.2g ms", f.AlphaMs, f.SEAlphaMs, f.Tau0Ms, f.SETau0Ms)
	}
	return ""
}
