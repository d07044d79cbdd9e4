package capacity

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/loadgen"
)

// fakeProbe answers a step with 200 requests whose latencies are
// latency(rate, seed): all alike, so the p99 is that latency.
func fakeProbe(latency func(rate float64, seed uint64) time.Duration) Probe {
	return func(_ context.Context, rate float64, seed uint64) (loadgen.Result, error) {
		recs := make([]loadgen.Record, 200)
		for i := range recs {
			recs[i].Latency = latency(rate, seed)
		}
		return loadgen.Result{Records: recs, Summary: loadgen.Summarize(recs, time.Second, time.Second)}, nil
	}
}

// The search finds the edge of a target whose p99 crosses the bound at a
// known rate, from below it or above it, within its resolution; a rate
// that misses on another seed is not the answer; a target that meets the
// bound at no rate is an error.
func TestSearchFindsTheEdge(t *testing.T) {
	const edge = 437.0
	step := func(rate float64, _ uint64) time.Duration {
		if rate <= edge {
			return 5 * time.Millisecond
		}
		return 50 * time.Millisecond
	}
	for _, start := range []float64{10, 437, 5000} {
		var lines strings.Builder
		s := Search{Bound: 15 * time.Millisecond, Start: start, Resolution: 0.02,
			Step: func(st Step) { WriteStep(&lines, 0, st) }}
		c, err := s.Run(context.Background(), fakeProbe(step))
		if err != nil {
			t.Fatalf("start %v: %v", start, err)
		}
		if c.RatePerSec > edge || c.RatePerSec*1.02 < edge || c.Above <= edge {
			t.Fatalf("start %v: found %.4g (above it %.4g), want within 2%% below %v", start, c.RatePerSec, c.Above, edge)
		}
		if got := strings.Count(lines.String(), "\n"); got != len(c.Steps) {
			t.Fatalf("start %v: %d table lines for %d steps", start, got, len(c.Steps))
		}
		if last := c.Steps[len(c.Steps)-1]; last.Phase != "confirm" || !last.Pass || last.RatePerSec != c.RatePerSec {
			t.Fatalf("start %v: last step %+v, want the answer confirmed", start, last)
		}
	}

	// Between 400 and the edge the target misses with odd seeds: the
	// confirmation catches it and the answer is at or below 400.
	flaky := func(rate float64, seed uint64) time.Duration {
		if rate > 400 && seed%2 == 1 {
			return step(edge+1, seed)
		}
		return step(rate, seed)
	}
	c, err := Search{Bound: 15 * time.Millisecond, Start: 100, Resolution: 0.02, Confirm: 3, Seed: 2}.Run(context.Background(), fakeProbe(flaky))
	if err != nil {
		t.Fatal(err)
	}
	if c.RatePerSec > 400 || c.RatePerSec < 400/1.1 {
		t.Fatalf("flaky above 400: found %.4g, want within 10%% below 400", c.RatePerSec)
	}

	// Failures count as later than any bound.
	failing := func(_ context.Context, rate float64, _ uint64) (loadgen.Result, error) {
		recs := make([]loadgen.Record, 100)
		for i := range recs {
			recs[i].Latency = time.Millisecond
			if rate > edge && i < 2 {
				recs[i].Err = loadgen.KindDropped
			}
		}
		return loadgen.Result{Records: recs}, nil
	}
	if c, err := (Search{Bound: 15 * time.Millisecond, Start: 100}).Run(context.Background(), failing); err != nil || c.RatePerSec > edge {
		t.Fatalf("2%% dropped above %v: found %.4g, %v; want at most %v", edge, c.RatePerSec, err, edge)
	}

	_, err = Search{Bound: time.Millisecond, Start: 100}.Run(context.Background(), fakeProbe(step))
	if !errors.Is(err, ErrNoRate) {
		t.Fatalf("a bound no rate meets: %v, want ErrNoRate", err)
	}
	if _, err := (Search{Bound: time.Millisecond}).Run(context.Background(), fakeProbe(step)); err == nil {
		t.Fatal("no starting rate: no error")
	}
}

func TestP99Scheduled(t *testing.T) {
	recs := make([]loadgen.Record, 100)
	for i := range recs {
		recs[i].Latency = time.Duration(i+1) * time.Millisecond
	}
	if got := p99Scheduled(recs); got != 99 {
		t.Fatalf("p99 of 1..100 ms: %v, want 99", got)
	}
	recs[0].Err = loadgen.KindTimeout
	recs[1].Err = loadgen.KindDropped
	if got := p99Scheduled(recs); !math.IsInf(got, 1) {
		t.Fatalf("p99 with two failed of 100: %v, want +Inf", got)
	}
}
