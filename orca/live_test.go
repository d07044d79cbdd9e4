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
				{Model: "m", Batched: true, Rule: &monitor.Snapshot{RatePerSec: 250, BatchSize: 5, MaxBatch: 10, Instances: 1,
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
	if len(ms) != 1 || ms[0].Name != "m" || ms[0].QueuedRows != 7 || ms[0].CapacityRPS() != 500 {
		t.Fatalf("models %+v", ms)
	}
	if j, ok := o.JoulesPerRequest(); !ok || j != 3 {
		t.Errorf("joules per request %v %v, want 3 from the shortest window that has it", j, ok)
	}
	if got := New(o).Report().ApplicationUtilization; got != 0.5 {
		t.Errorf("utilization %v, want 0.5", got)
	}
}
