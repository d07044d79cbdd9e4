// Package regression fits the batch latency line tau(b) = alpha*b + tau0 from
// observed (batch size, latency) samples.
//
// The fit is a weighted least-squares line made robust and safe for use in a
// control loop:
//
//   - recent samples weigh more: a sliding window of the last Window samples,
//     each weighted Forget^age (age 0 for the newest);
//   - outliers (a GC pause, a cold start) are rejected: the fit starts from
//     the per-batch-size medians and is refined by Tukey-bisquare iteratively
//     reweighted least squares with a MAD scale;
//   - few distinct batch sizes are fine once a prior line is seeded (from a
//     profile): the prior pulls the slope like PriorWeight samples spread over
//     1..MaxBatch, so with a single batch size the slope is the prior's and
//     the intercept follows the data;
//   - the answer is always usable: alpha > 0 (at least MinAlphaMs) and
//     tau0 >= 0, found as a constrained least-squares optimum, not by
//     clipping.
package regression

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Sample is one observed batch: its size and how long it took; or, with
// Weight, the mean latency of that many batches of that size, which weighs
// as much as that many samples (a server's statistics report sums per batch
// size; a decayed count is fractional).
type Sample struct {
	Batch     int
	LatencyMs float64
	Weight    float64 // batches LatencyMs is the mean of; 0 counts as 1
}

// weight is how many batches the sample stands for.
func (s Sample) weight() float64 {
	if s.Weight == 0 {
		return 1
	}
	return s.Weight
}

func (s Sample) validate() error {
	switch {
	case !(s.Weight >= 0) || math.IsInf(s.Weight, 0):
		return fmt.Errorf("weight must be a finite number >= 0, got %v", s.Weight)
	case s.Batch < 1:
		return fmt.Errorf("batch size must be >= 1, got %d", s.Batch)
	case math.IsNaN(s.LatencyMs) || math.IsInf(s.LatencyMs, 0) || s.LatencyMs < 0:
		return fmt.Errorf("latency must be a finite number >= 0 ms, got %v", s.LatencyMs)
	}
	return nil
}

// Line is the line a fit returns, tau(b) = AlphaMs*b + Tau0Ms. It is
// batchcost.Latency itself (an alias, not a second type): the fitting code
// reads best speaking of a line, and every package that plans with the fit
// takes the very same type.
type Line = batchcost.Latency

// Fit is a fitted line and how much to trust it.
type Fit struct {
	Line
	// R2 is the weighted coefficient of determination over the samples kept
	// (outliers excluded): 1 is a perfect line, 0 no better than the mean.
	// It is 0 when no samples were fitted.
	R2       float64
	N        int // samples in the fit, outliers included
	Sizes    int // distinct batch sizes among them
	Outliers int // samples rejected (robust weight zero)
	// KeptSizes is the number of distinct batch sizes among the samples
	// kept: below 2 only a prior gives the slope.
	KeptSizes int
	// Rejected lists the rejected samples by index: into the samples given
	// to FitSamples, or into the window (oldest first) for an Estimator.
	Rejected []int
	// Seeded reports that a prior line took part, as the whole answer when
	// there were no samples, or as a pull on the slope.
	Seeded bool
	// SEAlphaMs and SETau0Ms are the standard errors of the line's two
	// coefficients (weighted least squares, residual scale from the samples
	// kept, the prior's pull counted as information). They are +Inf when
	// the samples cannot tell: fewer than three kept, or one batch size
	// without a prior. A caller trusts the line only once they are small
	// against the coefficients. A fit of the prior alone has zero errors:
	// the prior is taken as given.
	SEAlphaMs, SETau0Ms float64
}

// RelErr is the larger of the two coefficients' standard errors relative
// to their values (tau0's relative to max(tau0, alpha), as a tau0 near zero
// is known well enough once it is small against a row's cost).
func (f Fit) RelErr() float64 {
	ra := f.SEAlphaMs / f.AlphaMs
	rt := f.SETau0Ms / math.Max(f.Tau0Ms, f.AlphaMs)
	if math.IsNaN(ra) || math.IsNaN(rt) {
		return math.Inf(1)
	}
	return math.Max(ra, rt)
}

// Errors returned when the samples do not determine a line.
var (
	ErrNoSamples  = errors.New("no samples to fit")
	ErrOneSize    = errors.New("all samples have the same batch size, so the slope is unknown: add samples of a second batch size or seed a prior line")
	errBadOptions = errors.New("invalid regression options")
)

// Options tune a fit; the zero value selects every default.
type Options struct {
	// Window is how many recent samples an Estimator keeps (default 256).
	Window int
	// Forget is the weight factor per sample of age, in (0, 1]: the newest
	// sample weighs 1, the one before Forget, and so on. Default 0.98, a
	// half-life of about 34 samples; 1 weighs the whole window equally.
	// FitSamples ignores it: a batch of samples has no order.
	Forget float64
	// Prior, when set, is the line the fit starts from (a profile run); see
	// PriorWeight.
	Prior *Line
	// PriorWeight is how many samples the prior slope counts as, spread
	// evenly over batch sizes 1..MaxBatch (default 4). Negative is invalid.
	// Whatever the weight, the prior never outweighs what was observed: its
	// pull on the slope is capped at MaxPriorShare of the samples' own
	// information on it (their weighted spread of batch sizes), so it only
	// decides the slope while the samples cannot (a single batch size).
	PriorWeight float64
	// MaxBatch spans the prior's pseudo-samples (default 32).
	MaxBatch int
	// MinAlphaMs is the smallest slope returned (default 1e-6 ms).
	MinAlphaMs float64
	// OutlierCut is the Tukey bisquare constant in robust standard
	// deviations (default 4.685, 95% efficient for Gaussian noise). A
	// residual beyond it gets weight zero. Negative disables rejection.
	OutlierCut float64
}

// Defaults of Options.
const (
	DefaultWindow      = 256
	DefaultForget      = 0.98
	DefaultPriorWeight = 4
	DefaultMaxBatch    = 32
	DefaultMinAlphaMs  = 1e-6
	DefaultOutlierCut  = 4.685
)

// MaxPriorShare caps the prior's information on the slope against the
// samples': with a cap of a tenth, a prior moves a slope the samples
// determine by at most a tenth of the way towards itself.
const MaxPriorShare = 0.1

// robustIterations bounds the reweighting passes; the fit settles in a few.
const robustIterations = 5

// minRobustSamples is the fewest samples outliers are rejected from: below
// it a robust scale says nothing and every sample is kept.
const minRobustSamples = 6

func (o Options) withDefaults() (Options, error) {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Forget == 0 {
		o.Forget = DefaultForget
	}
	if o.PriorWeight == 0 {
		o.PriorWeight = DefaultPriorWeight
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.MinAlphaMs == 0 {
		o.MinAlphaMs = DefaultMinAlphaMs
	}
	if o.OutlierCut == 0 {
		o.OutlierCut = DefaultOutlierCut
	}
	switch {
	case o.Window < 2:
		return o, fmt.Errorf("%w: window must be >= 2 samples, got %d", errBadOptions, o.Window)
	case !(o.Forget > 0 && o.Forget <= 1):
		return o, fmt.Errorf("%w: forget factor must be in (0, 1], got %v", errBadOptions, o.Forget)
	case !(o.PriorWeight >= 0) || math.IsInf(o.PriorWeight, 0):
		return o, fmt.Errorf("%w: prior weight must be >= 0, got %v", errBadOptions, o.PriorWeight)
	case o.MaxBatch < 1:
		return o, fmt.Errorf("%w: max batch must be >= 1, got %d", errBadOptions, o.MaxBatch)
	case !(o.MinAlphaMs > 0) || math.IsInf(o.MinAlphaMs, 0):
		return o, fmt.Errorf("%w: min alpha must be > 0 ms, got %v", errBadOptions, o.MinAlphaMs)
	case math.IsNaN(o.OutlierCut):
		return o, fmt.Errorf("%w: outlier cut must be a number", errBadOptions)
	}
	if o.Prior != nil {
		if err := o.Prior.Validate(); err != nil {
			return o, fmt.Errorf("%w: prior line: %w", errBadOptions, err)
		}
	}
	return o, nil
}

// FitSamples fits a line to samples weighted equally (a profile run, a CSV
// file). Options.Window and Forget do not apply.
func FitSamples(samples []Sample, o Options) (Fit, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Fit{}, err
	}
	for i, s := range samples {
		if err := s.validate(); err != nil {
			return Fit{}, fmt.Errorf("sample %d: %w", i+1, err)
		}
	}
	w := make([]float64, len(samples))
	for i, s := range samples {
		w[i] = s.weight()
	}
	return fit(samples, w, o)
}

// Estimator is an online fit: callers Observe batches as they complete and
// ask for the current Fit when they plan. It is safe for concurrent use;
// Observe is O(1) under a mutex, so the dispatcher can call it on every
// completion while the monitor fits.
type Estimator struct {
	mu    sync.Mutex
	o     Options
	ring  []Sample
	next  int // slot the next sample goes to
	count int // samples in the ring
	total int // samples ever observed
}

// NewEstimator returns an empty estimator; seed it through Options.Prior or
// Seed.
func NewEstimator(o Options) (*Estimator, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.Prior != nil {
		p := *o.Prior
		o.Prior = &p
	}
	return &Estimator{o: o, ring: make([]Sample, o.Window)}, nil
}

// Seed sets the prior line, e.g. from a profile.
func (e *Estimator) Seed(l Line) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("seed line: %w", err)
	}
	e.mu.Lock()
	e.o.Prior = &l
	e.mu.Unlock()
	return nil
}

// Observe records one completed batch of the given size and latency.
func (e *Estimator) Observe(batch int, latencyMs float64) error {
	return e.ObserveSample(Sample{Batch: batch, LatencyMs: latencyMs})
}

// ObserveSample records a sample, e.g. the mean of count batches of one
// size that a server's statistics reported since the last look.
func (e *Estimator) ObserveSample(s Sample) error {
	if err := s.validate(); err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	e.mu.Lock()
	e.ring[e.next] = s
	e.next = (e.next + 1) % len(e.ring)
	e.count = min(e.count+1, len(e.ring))
	e.total++
	e.mu.Unlock()
	return nil
}

// Observed returns how many samples were ever observed.
func (e *Estimator) Observed() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.total
}

// Samples returns the window's samples, oldest first: the points the next
// Fit will see (the live page draws them beside the fitted line).
func (e *Estimator) Samples() []Sample {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Sample, 0, e.count)
	start := (e.next - e.count + len(e.ring)) % len(e.ring)
	for i := range e.count {
		out = append(out, e.ring[(start+i)%len(e.ring)])
	}
	return out
}

// Fit fits the window. With no samples it returns the prior, if seeded, and
// ErrNoSamples otherwise.
func (e *Estimator) Fit() (Fit, error) {
	e.mu.Lock()
	o := e.o
	samples := make([]Sample, e.count)
	// oldest first
	start := (e.next - e.count + len(e.ring)) % len(e.ring)
	for i := range samples {
		samples[i] = e.ring[(start+i)%len(e.ring)]
	}
	e.mu.Unlock()

	w := make([]float64, len(samples))
	wt := 1.0
	for i := len(w) - 1; i >= 0; i-- {
		w[i] = wt * samples[i].weight()
		wt *= o.Forget
	}
	return fit(samples, w, o)
}

// fit is the robust, constrained, prior-regularised weighted fit.
func fit(samples []Sample, base []float64, o Options) (Fit, error) {
	if len(samples) == 0 {
		if o.Prior != nil {
			return Fit{Line: *o.Prior, Seeded: true}, nil
		}
		return Fit{}, ErrNoSamples
	}
	sizes := distinctSizes(samples)
	if sizes < 2 && o.Prior == nil {
		return Fit{N: len(samples), Sizes: sizes}, ErrOneSize
	}
	kappa, alpha0 := priorRidge(samples, base, o)

	xs := make([]float64, len(samples))
	ys := make([]float64, len(samples))
	for i, s := range samples {
		xs[i], ys[i] = float64(s.Batch), s.LatencyMs
	}

	// A robust start: the line through the per-size weighted medians.
	line := medianStart(samples, base, kappa, alpha0, o.MinAlphaMs)

	robust := bisquare(xs, ys, base, line, kappa, alpha0, o)
	w := make([]float64, len(samples))

	// The robust weights only choose which samples to reject: the answer
	// is the least-squares line through the samples kept, each with its
	// base weight. Bisquare weights below 1 would otherwise tilt the line
	// even when they reject nothing, and a fit that rejects nothing must be
	// the plain least-squares fit a reader can check by hand.
	f := Fit{N: len(samples), Sizes: sizes, Seeded: o.Prior != nil}
	for i, r := range robust {
		if r == 0 {
			f.Rejected = append(f.Rejected, i)
			w[i] = 0
		} else {
			w[i] = base[i]
		}
	}
	f.Outliers = len(f.Rejected)
	f.KeptSizes = weightedSizes(xs, w)
	if kappa > 0 || weightedSizes(xs, w) >= 2 {
		line = constrainedLS(xs, ys, w, kappa, alpha0, o.MinAlphaMs)
	}
	f.Line = line
	f.SEAlphaMs, f.SETau0Ms = stdErrors(xs, ys, w, kappa, line)
	f.R2 = r2(xs, ys, w, line)
	return f, nil
}

// priorRidge is the prior as a ridge term on the slope:
// kappa*(alpha - alpha0)^2 with kappa = PriorWeight * (variance of a
// uniform spread over 1..MaxBatch), scaled to the data's mean weight per
// batch observed; 0 without a prior.
func priorRidge(samples []Sample, base []float64, o Options) (kappa, alpha0 float64) {
	if o.Prior == nil {
		return 0, 0
	}
	alpha0 = o.Prior.AlphaMs
	// The weight per batch observed: below 1 where older samples fade
	// out, exactly 1 for means of Weight batches.
	var sw, batches float64
	for i, w := range base {
		sw += w
		batches += samples[i].weight()
	}
	m := float64(o.MaxBatch)
	spread := (m*m - 1) / 12
	if spread == 0 {
		spread = 1
	}
	kappa = o.PriorWeight * spread * sw / batches
	if sxx := spreadOf(samples, base); sxx > 0 {
		kappa = math.Min(kappa, MaxPriorShare*sxx)
	}
	return kappa, alpha0
}

// bisquare is each sample's robust weight (Tukey's bisquare, 0: rejected)
// after robustIterations re-fits from line, each cutting at OutlierCut
// times the residuals' MAD scale; all 1 when the fit is not robust
// (OutlierCut <= 0, or fewer than minRobustSamples samples).
func bisquare(xs, ys, base []float64, line Line, kappa, alpha0 float64, o Options) []float64 {
	robust := make([]float64, len(xs))
	for i := range robust {
		robust[i] = 1
	}
	if o.OutlierCut <= 0 || len(xs) < minRobustSamples {
		return robust
	}
	w := slices.Clone(base)
	abs := make([]weighted, 0, len(xs))
	for range robustIterations {
		abs = abs[:0]
		for i := range xs {
			if base[i] > 0 {
				abs = append(abs, weighted{math.Abs(ys[i] - line.TauMs(int(xs[i]))), base[i]})
			}
		}
		// The MAD scale, weighted like the samples so that a regime the
		// forgetting factor has faded out does not set it.
		scale := 1.4826 * weightedMedian(abs)
		if floor := 1e-9 * math.Max(1, meanAbs(ys)); scale < floor {
			scale = floor
		}
		cut := o.OutlierCut * scale
		for i := range xs {
			u := (ys[i] - (line.AlphaMs*xs[i] + line.Tau0Ms)) / cut
			if math.Abs(u) >= 1 {
				robust[i] = 0
			} else {
				robust[i] = (1 - u*u) * (1 - u*u)
			}
			w[i] = base[i] * robust[i]
		}
		if kappa == 0 && weightedSizes(xs, w) < 2 {
			// Rejection left one size and there is no prior: keep
			// the last determined line.
			break
		}
		line = constrainedLS(xs, ys, w, kappa, alpha0, o.MinAlphaMs)
	}
	return robust
}

// constrainedLS minimises sum w*(y - a*x - c)^2 + kappa*(a - a0)^2 subject to
// a >= minA, c >= 0. The problem is convex, so when the free optimum is
// infeasible the answer is the better of the two faces' optima.
func constrainedLS(xs, ys, w []float64, kappa, a0, minA float64) Line {
	var sw, sx, sy float64
	for i := range xs {
		sw += w[i]
		sx += w[i] * xs[i]
		sy += w[i] * ys[i]
	}
	if sw == 0 {
		return Line{AlphaMs: math.Max(a0, minA)}
	}
	mx, my := sx/sw, sy/sw
	var sxx, sxy, s2x, s1xy float64 // centred, and raw for the c=0 face
	for i := range xs {
		dx := xs[i] - mx
		sxx += w[i] * dx * dx
		sxy += w[i] * dx * (ys[i] - my)
		s2x += w[i] * xs[i] * xs[i]
		s1xy += w[i] * xs[i] * ys[i]
	}
	var free Line
	if sxx+kappa > 0 {
		free.AlphaMs = (sxy + kappa*a0) / (sxx + kappa)
	} else {
		free.AlphaMs = minA // one size and no prior: callers avoid this
	}
	free.Tau0Ms = my - free.AlphaMs*mx
	if free.AlphaMs >= minA && free.Tau0Ms >= 0 {
		return free
	}
	// Face c = 0.
	faceC := Line{AlphaMs: math.Max(minA, (s1xy+kappa*a0)/(s2x+kappa))}
	// Face a = minA.
	faceA := Line{AlphaMs: minA, Tau0Ms: math.Max(0, my-minA*mx)}
	if objective(xs, ys, w, kappa, a0, faceC) <= objective(xs, ys, w, kappa, a0, faceA) {
		return faceC
	}
	return faceA
}

func objective(xs, ys, w []float64, kappa, a0 float64, l Line) float64 {
	var s float64
	for i := range xs {
		r := ys[i] - l.AlphaMs*xs[i] - l.Tau0Ms
		s += w[i] * r * r
	}
	d := l.AlphaMs - a0
	return s + kappa*d*d
}

// medianStart fits the line through each batch size's weighted median
// latency, weighted by the size's total weight: outliers cannot move a
// median unless they are half of a size's weight.
func medianStart(samples []Sample, w []float64, kappa, a0, minA float64) Line {
	groups := map[int][]weighted{}
	for i, s := range samples {
		if w[i] > 0 {
			groups[s.Batch] = append(groups[s.Batch], weighted{s.LatencyMs, w[i]})
		}
	}
	var xs, ys, ws []float64
	// Sorted keys keep the sums in one order, so fits are reproducible.
	for _, b := range slices.Sorted(maps.Keys(groups)) {
		pts := groups[b]
		var total float64
		for _, p := range pts {
			total += p.w
		}
		xs = append(xs, float64(b))
		ys = append(ys, weightedMedian(pts))
		ws = append(ws, total)
	}
	return constrainedLS(xs, ys, ws, kappa, a0, minA)
}

type weighted struct{ v, w float64 }

// weightedMedian sorts v and returns the smallest value at which half of the
// total weight is reached.
func weightedMedian(v []weighted) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.SortFunc(v, func(a, b weighted) int {
		switch {
		case a.v < b.v:
			return -1
		case a.v > b.v:
			return 1
		}
		return 0
	})
	var total float64
	for _, p := range v {
		total += p.w
	}
	var acc float64
	for _, p := range v {
		acc += p.w
		if acc >= total/2 {
			return p.v
		}
	}
	return v[len(v)-1].v
}

// r2 is the weighted coefficient of determination.
func r2(xs, ys, w []float64, l Line) float64 {
	var sw, sy float64
	for i := range ys {
		sw += w[i]
		sy += w[i] * ys[i]
	}
	if sw == 0 {
		return 0
	}
	my := sy / sw
	var res, tot float64
	for i := range ys {
		r := ys[i] - l.AlphaMs*xs[i] - l.Tau0Ms
		res += w[i] * r * r
		d := ys[i] - my
		tot += w[i] * d * d
	}
	if tot <= 1e-18*math.Max(1, my*my)*sw {
		// Every kept latency is the same: a perfect fit explains it all.
		if res <= 1e-18*math.Max(1, my*my)*sw {
			return 1
		}
		return 0
	}
	return 1 - res/tot
}

// spreadOf is the samples' weighted sum of squared deviations of the batch
// size from its mean: their information on the slope.
func spreadOf(samples []Sample, w []float64) float64 {
	var sw, sx float64
	for i, s := range samples {
		sw += w[i]
		sx += w[i] * float64(s.Batch)
	}
	if sw == 0 {
		return 0
	}
	mx := sx / sw
	var sxx float64
	for i, s := range samples {
		d := float64(s.Batch) - mx
		sxx += w[i] * d * d
	}
	return sxx
}

// stdErrors are the standard errors of alpha and tau0: s^2 times the
// diagonal of (X'WX + K)^-1, where K adds the prior's kappa to the slope
// and s^2 = sum w r^2 / (kept - 2) is the residual scale per unit weight.
// Both are +Inf when the samples cannot tell.
func stdErrors(xs, ys, w []float64, kappa float64, l Line) (seAlpha, seTau0 float64) {
	var sw, sx, sxx, rss float64
	kept := 0
	for i := range xs {
		if w[i] <= 0 {
			continue
		}
		kept++
		sw += w[i]
		sx += w[i] * xs[i]
		sxx += w[i] * xs[i] * xs[i]
		r := ys[i] - l.TauMs(int(xs[i]))
		rss += w[i] * r * r
	}
	inf := math.Inf(1)
	if kept < 3 {
		return inf, inf
	}
	a := sxx + kappa
	det := a*sw - sx*sx
	if !(det > 1e-12*a*sw) {
		return inf, inf
	}
	s2 := rss / float64(kept-2)
	return math.Sqrt(s2 * sw / det), math.Sqrt(s2 * a / det)
}

func distinctSizes(samples []Sample) int {
	seen := map[int]struct{}{}
	for _, s := range samples {
		seen[s.Batch] = struct{}{}
	}
	return len(seen)
}

func weightedSizes(xs, w []float64) int {
	seen := map[float64]struct{}{}
	for i, x := range xs {
		if w[i] > 0 {
			seen[x] = struct{}{}
		}
	}
	return len(seen)
}

func meanAbs(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var s float64
	for _, x := range v {
		s += math.Abs(x)
	}
	return s / float64(len(v))
}
