package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy"
)

// pkLatencyMs is the mean time in system of an M/G/1 queue (Pollaczek-
// Khinchine) with Poisson arrivals at rate per ms and a service time that
// takes each of the given values (ms) equally often.
func pkLatencyMs(rate float64, service []float64) float64 {
	var m1, m2 float64
	for _, s := range service {
		m1 += s / float64(len(service))
		m2 += s * s / float64(len(service))
	}
	return m1 + rate*m2/(2*(1-rate*m1))
}

// oneAtATime is googlenet-p4 with B_max 1: adhoc then sends each request
// alone as soon as the instance is free, a plain M/G/1 queue whose mean
// latency the Pollaczek-Khinchine formula gives.
func oneAtATime(t *testing.T) preset.Profile {
	p := lookupPreset(t, "googlenet-p4")
	p.MaxBatch = 1
	return p
}

// TestOverheadSamples: a constant set of samples is Overhead exactly, and
// near saturation a heavy-tailed overhead with the same mean queues as
// Pollaczek-Khinchine says, well above the constant.
func TestOverheadSamples(t *testing.T) {
	p := oneAtATime(t)
	const o = 500 * time.Microsecond
	tau := p.TauMs(1)
	rate := 0.8 / (tau + 0.5) // per ms: rho 0.8
	run := func(c Config) Result {
		t.Helper()
		c.Profile, c.Policy, c.RatePerSec, c.Requests, c.Seed = p, policy.Adhoc{}, 1000*rate, 200_000, 7
		r, err := Run(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	constant := run(Config{Overhead: o})
	if same := run(Config{OverheadSamples: []time.Duration{o, o, o}}); !reflect.DeepEqual(same, constant) {
		t.Errorf("samples all equal to the overhead:\n%+v\nthe constant overhead:\n%+v", same, constant)
	}
	// Nine batches with no overhead and one with 5 ms: the same mean.
	tail := make([]time.Duration, 10)
	tail[9] = 10 * o
	heavy := run(Config{OverheadSamples: tail})
	for _, tt := range []struct {
		name string
		got  float64
		want float64
	}{
		{"constant", constant.MeanLatencyMs, pkLatencyMs(rate, []float64{tau + 0.5})},
		{"heavy tail", heavy.MeanLatencyMs, pkLatencyMs(rate, []float64{tau, tau, tau, tau, tau, tau, tau, tau, tau, tau + 5})},
	} {
		t.Logf("%s: mean latency %.3f ms, M/G/1 %.3f ms", tt.name, tt.got, tt.want)
		if math.Abs(tt.got/tt.want-1) > 0.08 {
			t.Errorf("%s overhead: mean latency %.3f ms, Pollaczek-Khinchine %.3f ms", tt.name, tt.got, tt.want)
		}
	}
	if heavy.MeanLatencyMs < 1.3*constant.MeanLatencyMs {
		t.Errorf("a heavy-tailed overhead of the same mean: %.3f ms, the constant %.3f ms", heavy.MeanLatencyMs, constant.MeanLatencyMs)
	}
	var ie *InvalidError
	for _, bad := range []Config{
		{OverheadSamples: []time.Duration{}},
		{OverheadSamples: []time.Duration{o}, Overhead: o},
	} {
		bad.Profile, bad.Policy, bad.RatePerSec = p, policy.Adhoc{}, 1
		if err := bad.Validate(); !errors.As(err, &ie) || ie.Field != "OverheadSamples" {
			t.Errorf("%+v: Validate() = %v, want an InvalidError for OverheadSamples", bad.OverheadSamples, err)
		}
	}
}

// estimates is a policy that remembers the last estimate it planned from.
type estimates struct {
	policy.Policy
	last *policy.Estimate
}

func (e estimates) Plan(est policy.Estimate) policy.Rule {
	*e.last = est
	return e.Policy.Plan(est)
}

// TestTurnaround: the proxy's turnaround holds the instance (the queue is
// that of the service time compute + overhead + turnaround) but is neither
// in the rows' latency nor in what the monitor plans with.
func TestTurnaround(t *testing.T) {
	p := oneAtATime(t)
	const o, ta = 500 * time.Microsecond, 300 * time.Microsecond
	tau := p.TauMs(1)
	rate := 0.8 / (tau + 0.8) // per ms: rho 0.8 with the turnaround
	for _, tt := range []struct {
		name       string
		turnaround time.Duration
		want       float64
	}{
		{"none", 0, pkLatencyMs(rate, []float64{tau + 0.5})},
		{"0.3 ms", ta, pkLatencyMs(rate, []float64{tau + 0.8}) - 0.3},
	} {
		var est policy.Estimate
		r, err := Run(context.Background(), Config{Profile: p, Policy: estimates{policy.Adhoc{}, &est},
			RatePerSec: 1000 * rate, Requests: 200_000, Seed: 7, Overhead: o, Turnaround: tt.turnaround})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("turnaround %s: mean latency %.3f ms, M/G/1 %.3f ms; planned tau0 %.4f ms", tt.name, r.MeanLatencyMs, tt.want, est.Latency.Tau0Ms)
		if math.Abs(r.MeanLatencyMs/tt.want-1) > 0.08 {
			t.Errorf("turnaround %s: mean latency %.3f ms, want %.3f ms (M/G/1 less the turnaround)", tt.name, r.MeanLatencyMs, tt.want)
		}
		if want := p.Tau0Ms + 0.5; math.Abs(est.Latency.Tau0Ms-want) > 1e-6 {
			t.Errorf("turnaround %s: the monitor planned with tau0 %.6f ms, want compute and overhead, %.6f ms", tt.name, est.Latency.Tau0Ms, want)
		}
		// Little's law holds with the rows leaving at their answer.
		if l := r.ThroughputRPS * r.MeanLatencyMs / 1000; math.Abs(r.MeanInSystem/l-1) > 0.01 {
			t.Errorf("turnaround %s: mean in system %.4f, throughput x latency %.4f", tt.name, r.MeanInSystem, l)
		}
	}
	// Requests far apart never queue: each takes compute and overhead.
	r, err := Run(context.Background(), Config{Profile: p, Policy: policy.Adhoc{}, Overhead: o, Turnaround: ta,
		Arrivals: []time.Duration{0, 10 * time.Millisecond, 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if want := tau + 0.5; math.Abs(r.MaxLatencyMs-want) > 1e-6 || math.Abs(r.MeanLatencyMs-want) > 1e-6 {
		t.Errorf("lone requests: mean %.6f, max %.6f ms, want %.6f ms", r.MeanLatencyMs, r.MaxLatencyMs, want)
	}
}

// TestOverheadInOrder: the n-th batch takes the n-th sample, from the first
// again after the last; lone requests show each.
func TestOverheadInOrder(t *testing.T) {
	p := oneAtATime(t)
	samples := []time.Duration{100 * time.Microsecond, 2 * time.Millisecond, 700 * time.Microsecond}
	var arrivals []time.Duration
	for i := range 7 {
		arrivals = append(arrivals, time.Duration(i)*20*time.Millisecond)
	}
	r, err := Run(context.Background(), Config{Profile: p, Policy: policy.Adhoc{}, Arrivals: arrivals,
		OverheadSamples: samples, OverheadInOrder: true})
	if err != nil {
		t.Fatal(err)
	}
	var want float64 // the mean of 0.1, 2, 0.7, 0.1, 2, 0.7, 0.1 ms beyond tau(1)
	for i := range arrivals {
		want += p.TauMs(1) + ms(samples[i%len(samples)])
	}
	want /= float64(len(arrivals))
	if math.Abs(r.MeanLatencyMs-want) > 1e-6 || math.Abs(r.MaxLatencyMs-(p.TauMs(1)+2)) > 1e-6 {
		t.Errorf("mean %.6f, max %.6f ms; want %.6f, %.6f ms", r.MeanLatencyMs, r.MaxLatencyMs, want, p.TauMs(1)+2)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
