package capacity

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/lab/loadgen"
)

// The measured capacity under a tail bound, as MLPerf's server scenario
// reports it: the highest Poisson rate whose 99th percentile latency stays
// under a bound. The bounds above answer for the mean of a model; this
// answers for any KServe v2 target, by measuring.
//
// The search brackets (doubling or halving the rate until one step meets
// the bound and one misses it), then bisects the bracket geometrically
// until its ends are within Resolution of each other, then runs the
// answer again Confirm times with other seeds: a rate that misses once is
// not the answer, and the search steps below it. Each step is one bounded
// run (loadgen.Run). A request that failed or was not sent counts as later
// than any bound: the percentile is over every scheduled request, so a
// target that sheds load does not pass by shedding it.

// Probe runs one step: Poisson arrivals at ratePerSec, seeded by seed.
type Probe func(ctx context.Context, ratePerSec float64, seed uint64) (loadgen.Result, error)

// Search is the rate search's setting.
type Search struct {
	// Bound is the p99 latency a rate must keep to pass.
	Bound time.Duration
	// Start is the first rate tried, requests per second.
	Start float64
	// Resolution is how close the bracket's ends get before the search
	// confirms its lower end: hi <= lo*(1+Resolution). 0 means 0.05.
	Resolution float64
	// Confirm is how many runs with other seeds the answer must pass
	// beside the one that found it. 0 means 1; a negative value none.
	Confirm int
	// MaxSteps bounds the runs of the whole search. 0 means 40.
	MaxSteps int
	// Seed is the first step's seed; each later step takes the next.
	Seed uint64
	// Step, when set, is told of each step as it ends (a table's line).
	Step func(Step)
}

// Step is one run of the search.
type Step struct {
	Phase      string  // "bracket", "bisect" or "confirm"
	RatePerSec float64 // the rate offered
	// P99Ms is the 99th percentile latency over every scheduled request,
	// a failed or unsent one counted as infinitely late.
	P99Ms   float64
	Summary loadgen.Summary
	Pass    bool
}

// Capacity is a search's answer.
type Capacity struct {
	// RatePerSec is the highest rate that passed every run of it; 0 when
	// no rate tried passed.
	RatePerSec float64
	// Above is the lowest rate that missed the bound (0 if none did).
	Above float64
	Steps []Step
}

// ErrNoRate is returned when even the lowest rate the search may try misses the bound.
var ErrNoRate = errors.New("no rate tried meets the bound")

// minRate is the lowest rate a search tries, and floorShare the lowest
// share of its starting rate: a target that misses the bound at a
// sixty-fourth of the rate it was expected to carry has no capacity worth
// the runs (each at least minRequests arrivals long) it would take to
// find.
const (
	minRate    = 0.5
	floorShare = 1.0 / 64
)

// Run searches with probe.
func (s Search) Run(ctx context.Context, probe Probe) (Capacity, error) {
	if !(s.Bound > 0) || !(s.Start > 0) || math.IsInf(s.Start, 0) {
		return Capacity{}, fmt.Errorf("capacity search: need a bound > 0 and a starting rate > 0, got %v and %v", s.Bound, s.Start)
	}
	res := s.Resolution
	if res <= 0 {
		res = 0.05
	}
	confirm := s.Confirm
	if confirm == 0 {
		confirm = 1
	}
	steps := s.MaxSteps
	if steps <= 0 {
		steps = 40
	}
	var c Capacity
	seed := s.Seed
	lo, hi := 0.0, 0.0 // the bracket: lo passes, hi misses (0: none yet)
	try := func(phase string, rate float64) (bool, error) {
		if len(c.Steps) >= steps {
			return false, fmt.Errorf("capacity search: %d runs without an answer (bracket %.4g-%.4g req/s)", steps, lo, hi)
		}
		r, err := probe(ctx, rate, seed)
		seed++
		if err != nil && r.Records == nil {
			return false, fmt.Errorf("capacity search at %.4g req/s: %w", rate, err)
		}
		st := Step{Phase: phase, RatePerSec: rate, P99Ms: p99Scheduled(r.Records), Summary: r.Summary}
		st.Pass = st.P99Ms <= float64(s.Bound)/float64(time.Millisecond)
		c.Steps = append(c.Steps, st)
		if s.Step != nil {
			s.Step(st)
		}
		return st.Pass, ctx.Err()
	}
	// Bracket from rate: up while it passes (no miss yet), down while it
	// misses.
	floor := max(minRate, s.Start*floorShare)
	bracket := func(rate float64) error {
		for lo == 0 || hi == 0 {
			if rate < floor {
				c.Above = hi
				return fmt.Errorf("capacity search: %w (%v at %.4g req/s)", ErrNoRate, s.Bound, hi)
			}
			pass, err := try("bracket", rate)
			if err != nil {
				return err
			}
			if pass {
				lo, rate = rate, rate*2
			} else {
				hi, rate = rate, rate/2
			}
		}
		return nil
	}
	if err := bracket(s.Start); err != nil {
		return c, err
	}
	for {
		for hi > lo*(1+res) {
			mid := math.Sqrt(lo * hi)
			pass, err := try("bisect", mid)
			if err != nil {
				return c, err
			}
			if pass {
				lo = mid
			} else {
				hi = mid
			}
		}
		ok := true
		for range max(confirm, 0) {
			pass, err := try("confirm", lo)
			if err != nil {
				return c, err
			}
			if !pass {
				ok = false
				break
			}
		}
		if ok {
			c.RatePerSec, c.Above = lo, hi
			return c, nil
		}
		// The answer missed with another seed: it is above the
		// capacity, and the search goes on below it.
		hi, lo = lo, 0
		if err := bracket(hi / (1 + res)); err != nil {
			return c, err
		}
	}
}

// p99Scheduled is the 99th percentile latency (ms, nearest rank) over
// every scheduled request, failed and unsent ones as +Inf.
func p99Scheduled(records []loadgen.Record) float64 {
	if len(records) == 0 {
		return math.Inf(1)
	}
	lat := make([]float64, 0, len(records))
	for _, r := range records {
		if r.Err != loadgen.KindNone {
			lat = append(lat, math.Inf(1))
			continue
		}
		lat = append(lat, float64(r.Latency)/float64(time.Millisecond))
	}
	slices.Sort(lat)
	rank := int(math.Ceil(0.99*float64(len(lat)))) - 1
	return lat[max(rank, 0)]
}

// WriteStepHeader and WriteStep print the table of tried rates as a
// markdown table, a line per step as it ends.
func WriteStepHeader(w io.Writer, bound time.Duration) {
	fmt.Fprintf(w, "| step | phase | rate req/s | p99 ms (bound %v) | mean ms | ok | errors | dropped | lag p99 ms | pass |\n", bound)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
}

// WriteStep prints step n of the table.
func WriteStep(w io.Writer, n int, st Step) {
	pass := "no"
	if st.Pass {
		pass = "yes"
	}
	fmt.Fprintf(w, "| %d | %s | %.4g | %.3f | %.3f | %d | %d | %d | %.3f | %s |\n", n, st.Phase, st.RatePerSec, st.P99Ms,
		st.Summary.MeanLatencyMs, st.Summary.OK, st.Summary.Errors, st.Summary.Dropped, st.Summary.LagP99Ms, pass)
}

// WriteAnswer prints the search's answer under its table.
func (c Capacity) WriteAnswer(w io.Writer, bound time.Duration) {
	if c.RatePerSec == 0 {
		fmt.Fprintf(w, "no rate tried keeps p99 under %v\n", bound)
		return
	}
	fmt.Fprintf(w, "capacity: %.4g req/s with p99 under %v (%.4g req/s missed it; %d runs)\n", c.RatePerSec, bound, c.Above, len(c.Steps))
}

// DefaultStepRequests is the fewest arrivals a step expects by default:
// a 99th percentile of far fewer is the largest latency or close to it.
const DefaultStepRequests = 200

// LoadProbe is a Probe that runs c (its target, model, payloads, pool)
// at each step's rate and seed, for c.Duration or as long as minRequests
// arrivals take at the rate, whichever is longer.
func LoadProbe(c loadgen.Config, minRequests int) Probe {
	return func(ctx context.Context, rate float64, seed uint64) (loadgen.Result, error) {
		step := c
		step.Rate, step.Seed = loadgen.ConstantRate(rate), seed
		step.Duration = max(c.Duration, time.Duration(float64(minRequests)/rate*float64(time.Second)))
		return loadgen.Run(ctx, step)
	}
}

// Find runs s against c (LoadProbe, each step at least minRequests
// arrivals; 0: DefaultStepRequests) and prints the table of tried rates
// to w as the steps end, then the answer.
func Find(ctx context.Context, c loadgen.Config, s Search, minRequests int, w io.Writer) (Capacity, error) {
	if minRequests <= 0 {
		minRequests = DefaultStepRequests
	}
	fmt.Fprintf(w, "highest Poisson rate with p99 under %v: %s at %s, steps of %v from %.4g req/s\n\n", s.Bound, c.Model, c.Target, c.Duration, s.Start)
	WriteStepHeader(w, s.Bound)
	n := 0
	s.Step = func(st Step) {
		n++
		WriteStep(w, n, st)
	}
	found, err := s.Run(ctx, LoadProbe(c, minRequests))
	fmt.Fprintln(w)
	found.WriteAnswer(w, s.Bound)
	return found, err
}
