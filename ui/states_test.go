package ui

import (
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/power"
)

type fakeMonitors []*monitor.Monitor

func (f fakeMonitors) Monitors() []*monitor.Monitor { return f }

type fakeQueues []dispatcher.Snapshot

func (f fakeQueues) Snapshots() []dispatcher.Snapshot { return f }

type fakeMeter power.Snapshot

func (f fakeMeter) Snapshot() power.Snapshot { return power.Snapshot(f) }

func figures(seconds, rpj float64) power.Figures {
	return power.Figures{Seconds: seconds, RequestsPerJoule: &rpj}
}

// StatesOf reads each batched model's rule, fit, energy line and round
// trips from its monitor, its counters from its queue, and requests per
// joule from the meter's shortest window: the model's own where the meter
// splits energy by model, else the whole device's.
func TestStatesOf(t *testing.T) {
	mon := func(name string, energy *batchcost.Energy) *monitor.Monitor {
		pol, err := policy.New("adhoc", policy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := monitor.New(monitor.Config{Model: name, Policy: pol, Window: time.Second, MaxBatch: 8, Instances: 2, Energy: energy})
		if err != nil {
			t.Fatal(err)
		}
		m.BatchEnded(&dispatcher.Batch{}, dispatcher.BatchEnd{Rows: 4, Calls: 4, OK: true, RoundTrip: 6 * time.Millisecond})
		return m
	}
	line := &batchcost.Energy{BetaMJ: 10, Zeta0MJ: 30}
	models := fakeMonitors{mon("simple", line), mon("image", nil)}
	probe := &dispatcher.ProbeReport{Outcome: "error", Detail: "500 CUDA error"}
	queues := fakeQueues{{Model: "simple", BatchesSent: 10, RowsSent: 40, Sources: dispatcher.SourceStats{Known: true, Population: 2, ClosedLoop: 2},
		Failing: true, FailingReason: "5 batches in a row failed", LastProbe: probe}}
	total := map[string]power.Figures{power.TotalWindow: figures(100, 1), "10s": figures(10, 5), "1m": figures(60, 3)}

	for _, tt := range []struct {
		name        string
		meter       Meter
		simple, img float64 // requests per joule; 0: none
	}{
		{"device only", fakeMeter{Windows: total}, 5, 5},
		{"per model", fakeMeter{Windows: total, Models: []power.ModelSnapshot{
			{Model: "simple", Windows: map[string]power.Figures{"10s": figures(10, 7), "1m": figures(60, 6)}}}}, 7, 0},
		{"no meter", nil, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			states := StatesOf(models, queues, tt.meter)()
			if len(states) != 2 || states[0].Model != "simple" || states[1].Model != "image" {
				t.Fatalf("states %+v", states)
			}
			s := states[0]
			if s.Policy != "adhoc" || s.MaxBatch != 8 || s.Instances != 2 || s.BatchesSent != 10 || s.RowsSent != 40 ||
				s.Energy == nil || *s.Energy != *line || len(s.Batches) != 1 || s.Batches[0].Batch != 4 || s.FitSource != "round trip" ||
				s.Sources.Population != 2 || s.Sources.ClosedLoop != 2 ||
				!s.Health.Failing || s.Health.Reason != "5 batches in a row failed" || s.Health.LastProbe != probe {
				t.Errorf("simple's state %+v", s)
			}
			if states[1].Energy != nil || states[1].BatchesSent != 0 {
				t.Errorf("image's state %+v: no energy line, no batches", states[1])
			}
			for i, want := range []float64{tt.simple, tt.img} {
				got := states[i].RequestsPerJoule
				if (want == 0) != (got == nil) || (got != nil && *got != want) {
					t.Errorf("%s: requests per joule %v, want %v", states[i].Model, deref(got), want)
				}
			}
		})
	}
}
