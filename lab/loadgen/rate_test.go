package loadgen

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/trace"
)

// A *trace.Series is a Rate as it is: the command passes traces straight in.
var _ Rate = (*trace.Series)(nil)

// draw returns the arrival offsets before end.
func draw(t *testing.T, rate Rate, seed uint64, end time.Duration) []time.Duration {
	t.Helper()
	a, err := newArrivals(rate, seed, end)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for {
		d, ok := a.next()
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// The gaps of a homogeneous Poisson process are exponential: their mean is
// 1/rate and their coefficient of variation 1; the Kolmogorov-Smirnov
// distance to the exponential law stays small.
func TestPoissonInterArrivals(t *testing.T) {
	const n = 200_000
	for _, rate := range []float64{2, 150, 20_000} {
		t.Run("", func(t *testing.T) {
			end := time.Duration(float64(n) / rate * float64(time.Second))
			arr := draw(t, ConstantRate(rate), 42, end)
			if len(arr) < n*95/100 {
				t.Fatalf("rate %v: %d arrivals in %v, want about %d", rate, len(arr), end, n)
			}
			gaps := make([]float64, len(arr))
			prev := time.Duration(0)
			var sum, sumSq float64
			for i, d := range arr {
				g := (d - prev).Seconds()
				prev = d
				gaps[i] = g
				sum += g
				sumSq += g * g
			}
			m := float64(len(gaps))
			mean := sum / m
			sd := math.Sqrt(sumSq/m - mean*mean)
			// The mean of n exponential gaps has relative standard
			// error 1/sqrt(n) = 0.22%; allow 4 of them.
			if rel := math.Abs(mean*rate - 1); rel > 4/math.Sqrt(m) {
				t.Errorf("rate %v: mean gap %.6gs, want %.6gs (off by %.2f%%)", rate, mean, 1/rate, 100*rel)
			}
			if cv := sd / mean; math.Abs(cv-1) > 0.02 {
				t.Errorf("rate %v: gap coefficient of variation %.4f, want 1 (exponential)", rate, cv)
			}
			if d := ksExponential(gaps, rate); d > 1.63/math.Sqrt(m) { // 1% critical value
				t.Errorf("rate %v: Kolmogorov-Smirnov distance to Exp(%v) = %.5f, over the 1%% critical value %.5f",
					rate, rate, d, 1.63/math.Sqrt(m))
			}
		})
	}
}

// ksExponential is the Kolmogorov-Smirnov statistic of xs against Exp(rate).
func ksExponential(xs []float64, rate float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	var d float64
	n := float64(len(s))
	for i, x := range s {
		f := 1 - math.Exp(-rate*x)
		d = math.Max(d, math.Max(math.Abs(f-float64(i)/n), math.Abs(float64(i+1)/n-f)))
	}
	return d
}

// stepRate is a piecewise-constant test series.
type stepRate struct {
	every time.Duration
	rates []float64
}

func (s stepRate) RateAt(t time.Duration) float64 {
	return s.rates[min(int(t/s.every), len(s.rates)-1)]
}

func (s stepRate) MaxRate() float64 {
	m := 0.0
	for _, r := range s.rates {
		m = math.Max(m, r)
	}
	return m
}

// Thinning follows a series: the arrivals in each segment match the
// integral of the rate over it, within four standard deviations (Poisson:
// sd = sqrt(mean)).
func TestArrivalsFollowRate(t *testing.T) {
	paper, err := trace.Lookup(trace.Paper300)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := paper.Compress(5)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		rate    Rate
		end     time.Duration
		segment time.Duration
	}{
		{"steps", stepRate{every: 20 * time.Second, rates: []float64{50, 400, 0, 100}}, 80 * time.Second, 20 * time.Second},
		{"paper300", paper, paper.Duration(), 30 * time.Second},
		{"paper300 compressed 5x", fast, fast.Duration(), 6 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			arr := draw(t, tt.rate, 7, tt.end)
			segs := int(tt.end / tt.segment)
			got := make([]int, segs)
			for _, d := range arr {
				got[min(int(d/tt.segment), segs-1)]++
			}
			for i := range segs {
				want := integrate(tt.rate, time.Duration(i)*tt.segment, time.Duration(i+1)*tt.segment)
				if tol := 4*math.Sqrt(want) + 1; math.Abs(float64(got[i])-want) > tol {
					t.Errorf("segment %d: %d arrivals, want %.1f +- %.1f", i, got[i], want, tol)
				}
			}
		})
	}
}

// integrate is the expected number of arrivals in [from, to).
func integrate(r Rate, from, to time.Duration) float64 {
	const steps = 10_000
	h := (to - from).Seconds() / steps
	var sum float64
	for i := range steps {
		sum += r.RateAt(from + time.Duration((float64(i)+0.5)*h*float64(time.Second)))
	}
	return sum * h
}

func TestArrivalsDependOnSeedOnly(t *testing.T) {
	a := draw(t, ConstantRate(1000), 3, time.Second)
	b := draw(t, ConstantRate(1000), 3, time.Second)
	c := draw(t, ConstantRate(1000), 4, time.Second)
	if len(a) != len(b) {
		t.Fatalf("same seed: %d and %d arrivals", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed: arrival %d at %v and %v", i, a[i], b[i])
		}
	}
	if len(a) == len(c) && a[0] == c[0] && a[len(a)-1] == c[len(c)-1] {
		t.Fatalf("seeds 3 and 4 drew the same arrivals")
	}
}

func TestNewArrivalsRejectsBadRates(t *testing.T) {
	tests := []struct {
		name string
		rate Rate
		want string
	}{
		{"nil", nil, "no arrival rate"},
		{"zero", ConstantRate(0), "must be positive"},
		{"negative", ConstantRate(-1), "must be positive"},
		{"NaN", ConstantRate(math.NaN()), "must be positive"},
		{"infinite", ConstantRate(math.Inf(1)), "finite"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newArrivals(tt.rate, 1, time.Second)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("newArrivals(%v) error = %v, want one containing %q", tt.rate, err, tt.want)
			}
		})
	}
}

// A stretch of zero rate produces no arrivals and does not stall the
// sampler: the next arrival comes after the stretch, or none at all when
// it lasts to the end (draw would not return otherwise).
func TestArrivalsSkipZeroRate(t *testing.T) {
	if tail := draw(t, stepRate{every: time.Second, rates: []float64{100, 0}}, 1, time.Hour); len(tail) > 200 {
		t.Fatalf("%d arrivals, want about 100 (100/s for 1s, then 0 for an hour)", len(tail))
	}
	arr := draw(t, stepRate{every: 10 * time.Second, rates: []float64{0, 100}}, 1, 20*time.Second)
	if len(arr) < 500 {
		t.Fatalf("%d arrivals, want about 1000 (100/s for 10s)", len(arr))
	}
	if arr[0] < 10*time.Second {
		t.Fatalf("first arrival at %v, want none before 10s (rate 0 there)", arr[0])
	}
}

func BenchmarkArrivals(b *testing.B) {
	a, err := newArrivals(ConstantRate(20_000), 1, maxRunLength)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		a.next()
	}
}

// TestScheduleIsRunsArrivals: Schedule is the arrival sequence a run of the
// same rate and seed draws, so the simulator can replay a live load.
func TestScheduleIsRunsArrivals(t *testing.T) {
	const d = 10 * time.Second
	got, err := Schedule(ConstantRate(200), 7, d, 0)
	if err != nil {
		t.Fatal(err)
	}
	arr, err := newArrivals(ConstantRate(200), 7, d)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		want, more := arr.next()
		if !more {
			if i != len(got) {
				t.Fatalf("schedule has %d arrivals, the run draws %d", len(got), i)
			}
			break
		}
		if i >= len(got) || got[i] != want {
			t.Fatalf("arrival %d differs from the run's %v", i, want)
		}
	}
	if n := len(got); n < 1800 || n > 2200 {
		t.Fatalf("%d arrivals at 200/s over %v", n, d)
	}
	if capped, _ := Schedule(ConstantRate(200), 7, d, 10); len(capped) != 10 || capped[9] != got[9] {
		t.Fatalf("capped schedule %v", capped)
	}
	if _, err := Schedule(ConstantRate(200), 7, 0, 0); err == nil {
		t.Fatal("a zero duration was accepted")
	}
}
