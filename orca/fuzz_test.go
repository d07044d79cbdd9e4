package orca

import (
	"math"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Whatever the models report and whatever form a client asks for, the
// header parses in its form with finite numbers, and the trailer's metrics
// are finite.
func FuzzHeaderValue(f *testing.F) {
	f.Add([]byte("JSON"), 10.0, 1.0, 2.0, 8, 1, 3, 0.5)
	f.Add([]byte("bin"), math.NaN(), math.Inf(1), -1.0, 0, -3, -1, math.Inf(-1))
	f.Add([]byte("TEXT\x00"), 1e308, 1e-308, 1e308, 1<<30, 1<<30, 1<<30, 1e308)
	f.Fuzz(func(t *testing.T, format []byte, rate, alpha, tau0 float64, maxBatch, instances, queued int, joules float64) {
		r := New(Options{
			Models: func() []Model {
				return []Model{{Name: "m", RatePerSec: rate, BatchSize: maxBatch, MaxBatch: maxBatch, Instances: instances,
					Latency: batchcost.Latency{AlphaMs: alpha, Tau0Ms: tau0}, LineKnown: true, QueuedRows: queued}}
			},
			JoulesPerRequest: func() (float64, bool) { return joules, true },
		})
		v := r.HeaderValue(format)
		if strings.ContainsAny(v, "\r\n\x00") {
			t.Fatalf("header value %q has a byte no header may carry", v)
		}
		pb := Parse(t, v)
		for k, x := range map[string]float64{"utilization": pb.ApplicationUtilization, "rps": pb.RpsFractional} {
			if !finite(x) {
				t.Fatalf("%s = %v in %q", k, x, v)
			}
		}
		for k, x := range pb.NamedMetrics {
			if !finite(x) {
				t.Fatalf("%s = %v in %q", k, x, v)
			}
		}
		sm := r.ServerMetrics()
		if !finite(sm.AppUtilization) || !finite(sm.QPS) {
			t.Fatalf("server metrics %+v", sm)
		}
	})
}
