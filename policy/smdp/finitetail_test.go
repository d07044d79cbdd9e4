package smdp

import (
	"context"
	"fmt"
	"math"
	"testing"
)

// The simulation of a closed loop's table gives the chain's mean and
// energy per request (exact batches, no time after a batch, as the chain
// counts them), for ad-hoc and for the budget's mixed tables, and a hold
// bound cuts the wait the table's p99 is made of.
func TestFiniteTailMeanMatchesTheChain(t *testing.T) {
	m := finiteModel(t, 8)
	for _, tc := range []struct {
		n     int
		think float64
	}{{4, 0.2}, {8, 3}, {16, 3}, {16, 12}} {
		t.Run(fmt.Sprintf("N=%d think %g", tc.n, tc.think), func(t *testing.T) {
			pop := Population{Clients: tc.n, ThinkMs: tc.think}
			c, err := SolveFiniteBudget(context.Background(), m, pop, Budget{Factor: 1.1})
			if err != nil {
				t.Fatal(err)
			}
			o := TailOptions{Requests: 200000, Seed: 3}
			table := FiniteTailRule{First: c.First.Policy, Second: c.Second.Policy, Share: c.Share, HoldMs: math.Inf(1)}
			adhoc := FiniteTailLatency(m, pop, FiniteTailRule{}, o)
			planned := FiniteTailLatency(m, pop, table, o)
			for _, x := range []struct {
				what      string
				got, want float64
			}{
				{"ad-hoc mean", adhoc.MeanMs, c.Adhoc.LatencyMs},
				{"ad-hoc energy", adhoc.EnergyMJ, c.Adhoc.EnergyPerRequestMJ},
				{"plan mean", planned.MeanMs, c.LatencyMs},
				{"plan energy", planned.EnergyMJ, c.EnergyPerRequestMJ},
			} {
				if !relClose(x.got, x.want, 0.02) {
					t.Errorf("%s: simulated %.4g, the chain's %.4g", x.what, x.got, x.want)
				}
			}
			t.Logf("p99 ad-hoc %.4g ms, plan %.4g ms (%s)", adhoc.P99Ms, planned.P99Ms, FinitePolicySummary(c.First.Policy))
			if !c.Binding || planned.P99Ms <= adhoc.P99Ms {
				return
			}
			// A hold bound of nothing is ad-hoc; one of a batch's time
			// lies between.
			zero, some := table, table
			zero.HoldMs, some.HoldMs = 0, m.ServiceMs(1)
			if got := FiniteTailLatency(m, pop, zero, o); got != adhoc {
				t.Errorf("hold bound 0: %+v, ad-hoc's %+v", got, adhoc)
			}
			cut := FiniteTailLatency(m, pop, some, o)
			if !(cut.P99Ms < planned.P99Ms) {
				t.Errorf("hold bound %.3g ms: p99 %.4g ms, not under the unbounded table's %.4g", some.HoldMs, cut.P99Ms, planned.P99Ms)
			}
		})
	}
}

// BenchmarkFiniteTailLatency is one simulation of the budget's tail search
// for a closed loop (policy.finiteTail runs a dozen a plan): 15 clients
// thinking 60 ms on PyTriton's line, the table waiting in state 1.
func BenchmarkFiniteTailLatency(b *testing.B) {
	m := Model{MaxBatch: 16}
	m.AlphaMs, m.Tau0Ms = 0.5, 7.1
	first := make([]int, 16)
	for s := 2; s < len(first); s++ {
		first[s] = s
	}
	pop := Population{Clients: 15, ThinkMs: 60}
	for b.Loop() {
		FiniteTailLatency(m, pop, FiniteTailRule{First: first, HoldMs: 12}, TailOptions{Requests: 10000, Seed: 1})
	}
}
