package policy

import (
	"math"
	"time"
)

// Hist is a histogram of latencies in logarithmic buckets, histPerOctave
// to a doubling from histMin: a streaming quantile of the calls (the
// monitor fills one per slice of its window, Live.Hist) whose quantiles
// are within a few per cent of the exact ones, in fixed memory, and which
// adds and merges by its counts.
type Hist [HistBuckets]float64

// Bounds of Hist: from 10 µs up, 8 buckets a doubling, 24 doublings
// (about 168 s); latencies outside fall in the end buckets.
const (
	histPerOctave = 8
	HistBuckets   = 24 * histPerOctave
	histMin       = 10 * time.Microsecond
)

// HistBucket is the bucket of latency d.
func HistBucket(d time.Duration) int {
	if d <= histMin {
		return 0
	}
	i := int(math.Log2(float64(d)/float64(histMin)) * histPerOctave)
	return min(max(i, 0), HistBuckets-1)
}

// Add counts n calls in bucket i.
func (h *Hist) Add(i int, n float64) { h[i] += n }

// Merge adds o's counts times w.
func (h *Hist) Merge(o *Hist, w float64) {
	for i, c := range o {
		h[i] += w * c
	}
}

// Scale multiplies every count by f (a decay).
func (h *Hist) Scale(f float64) {
	for i := range h {
		h[i] *= f
	}
}

// Count is the number of calls counted.
func (h *Hist) Count() float64 {
	n := 0.0
	for _, c := range h {
		n += c
	}
	return n
}

// QuantileMs is the q-quantile in ms, interpolated geometrically within its
// bucket; 0 when empty.
func (h *Hist) QuantileMs(q float64) float64 {
	n := h.Count()
	if !(n > 0) {
		return 0
	}
	target, cum := q*n, 0.0
	for i, c := range h {
		if c > 0 && cum+c >= target {
			f := (target - cum) / c
			lo := float64(histMin) * math.Exp2(float64(i)/histPerOctave)
			return lo * math.Exp2(f/histPerOctave) / float64(time.Millisecond)
		}
		cum += c
	}
	return float64(histMin) * math.Exp2(float64(HistBuckets)/histPerOctave) / float64(time.Millisecond)
}

// CountAbove is the number of calls above ms, the bucket holding ms split
// geometrically.
func (h *Hist) CountAbove(ms float64) float64 {
	d := time.Duration(ms * float64(time.Millisecond))
	i := HistBucket(d)
	n := 0.0
	for _, c := range h[i+1:] {
		n += c
	}
	lo := float64(histMin) * math.Exp2(float64(i)/histPerOctave)
	f := math.Log2(float64(d)/lo) * histPerOctave // share of bucket i below ms
	return n + h[i]*(1-min(max(f, 0), 1))
}

// MergeScaled adds o's counts with every latency divided by f > 0: a
// histogram in units of f (the budget's tail trim keeps the calls in units
// of each slice's own bound, so that slices of different rates add up). A
// bucket's count moves by log2(1/f) doublings, split between the two
// buckets its range then straddles in proportion to the overlap.
func (h *Hist) MergeScaled(o *Hist, f float64) {
	if !(f > 0) || math.IsInf(f, 0) {
		return
	}
	shift := -math.Log2(f) * histPerOctave
	whole := math.Floor(shift)
	frac := shift - whole
	at := func(i int) int { return min(max(i, 0), HistBuckets-1) }
	for i, c := range o {
		if c == 0 {
			continue
		}
		j := i + int(whole)
		h[at(j)] += c * (1 - frac)
		h[at(j+1)] += c * frac
	}
}
