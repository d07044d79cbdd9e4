package ui

import (
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/power"
)

// The page's sources, as the page reads them: the registry's monitors, the
// dispatcher's queues and the energy meter. serve wires its own in with
// StatesOf.

// Monitors lists the batched models' monitors (registry.Models does).
type Monitors interface {
	Monitors() []*monitor.Monitor
}

// Queues reports each model queue's counters (dispatcher.Dispatcher does).
type Queues interface {
	Snapshots() []dispatcher.Snapshot
}

// Meter reports the energy figures (power.Meter does).
type Meter interface {
	Snapshot() power.Snapshot
}

// StatesOf returns the Options.States function of a live proxy: per batched
// model the rule, the fit, where the fit comes from and its recent round
// trips, the energy line, the batches sent, its callers, and requests per joule over the
// meter's shortest window (the model's share where the meter attributes
// energy to models). meter may be nil (no energy source).
func StatesOf(models Monitors, queues Queues, meter Meter) func() []State {
	return func() []State {
		byModel := map[string]dispatcher.Snapshot{}
		for _, q := range queues.Snapshots() {
			byModel[q.Model] = q
		}
		energy := power.Snapshot{Unavailable: "no energy source"}
		if meter != nil {
			energy = meter.Snapshot()
		}
		var out []State
		for _, m := range models.Monitors() {
			snap := m.Snapshot()
			s := State{Model: snap.Model, Policy: snap.Policy, RateRPS: snap.RatePerSec, BatchSize: snap.BatchSize,
				MaxBatch: snap.MaxBatch, Instances: snap.Instances, AlphaMs: snap.AlphaMs, Tau0Ms: snap.Tau0Ms, R2: snap.R2,
				FitSource: snap.FitSource, OverheadMs: snap.OverheadMs, Energy: m.Energy(), Batches: m.Samples(),
				PlannedP99Ms: snap.PlannedP99Ms, Objective: snap.Objective, EnergyUnavailable: energy.Unavailable,
				Phase: snap.Phase, PhaseReason: snap.PhaseReason}
			if q, ok := byModel[snap.Model]; ok {
				s.BatchesSent, s.RowsSent, s.Sources = q.BatchesSent, q.RowsSent, q.Sources
				s.Health = Health{Failing: q.Failing, Reason: q.FailingReason, LastProbe: q.LastProbe}
			}
			if len(energy.Models) == 0 {
				s.RequestsPerJoule = shortestWindow(energy.Windows)
			}
			for _, me := range energy.Models {
				if me.Model == snap.Model {
					s.RequestsPerJoule = shortestWindow(me.Windows)
				}
			}
			out = append(out, s)
		}
		return out
	}
}

// shortestWindow is requests per joule over the shortest sliding window.
func shortestWindow(ws map[string]power.Figures) *float64 {
	best := ""
	for k, w := range ws {
		if k != power.TotalWindow && (best == "" || w.Seconds < ws[best].Seconds) {
			best = k
		}
	}
	if best == "" {
		return nil
	}
	return ws[best].RequestsPerJoule
}
