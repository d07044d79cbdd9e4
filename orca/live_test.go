package orca

import (
	"testing"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/registry"
)

func TestLive(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	o := Live(
		func() []registry.Status {
			return []registry.Status{
				{Model: "pass", Batched: false},
				// The placeholder line of a monitor that saw nothing yet.
				{Model: "new", Batched: true, Rule: &monitor.Snapshot{MaxBatch: 32, Instances: 1, Latency: batchcost.Latency{AlphaMs: 0.1, Tau0Ms: 1}}},
				{Model: "m", Batched: true, Rule: &monitor.Snapshot{Samples: 3, RatePerSec: 250, BatchSize: 5, MaxBatch: 10, Instances: 1,
					Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: 10}}},
			}
		},
		func() []dispatcher.Snapshot { return []dispatcher.Snapshot{{Model: "m", QueuedRows: 7}} },
		func() power.Snapshot {
			return power.Snapshot{Windows: map[string]power.Figures{
				power.TotalWindow: {Seconds: 1, JoulesPerRequest: f(9)},
				"1m":              {Seconds: 60, JoulesPerRequest: f(2)},
				"10s":             {Seconds: 10, JoulesPerRequest: f(3)},
				"1s":              {Seconds: 1},
			}}
		})
	ms := o.Models()
	if len(ms) != 2 || ms[1].Name != "m" || ms[1].QueuedRows != 7 || ms[1].CapacityRPS() != 500 || ms[0].CapacityRPS() != 0 {
		t.Fatalf("models %+v", ms)
	}
	if j, ok := o.JoulesPerRequest(); !ok || j != 3 {
		t.Errorf("joules per request %v %v, want 3 from the shortest window that has it", j, ok)
	}
	rep := New(o).Report()
	if got := rep.ApplicationUtilization; got != 0.5 {
		t.Errorf("utilization %v, want 0.5", got)
	}
	if got := rep.NamedMetrics[MetricCapacityRPS]; got != 500 {
		t.Errorf("capacity %v, want 500: the model without a line and without arrivals is left out", got)
	}
}
