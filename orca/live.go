package orca

import (
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/registry"
)

// Live returns the Options of `ratebatch serve`'s Reporter: the models'
// rules and fits from the registry, their queues from the dispatcher and
// the energy per request from the meter's shortest window.
func Live(statuses func() []registry.Status, queues func() []dispatcher.Snapshot, energy func() power.Snapshot) Options {
	return Options{
		Models: func() []Model {
			q := map[string]dispatcher.Snapshot{}
			for _, s := range queues() {
				q[s.Model] = s
			}
			var out []Model
			for _, st := range statuses() {
				if !st.Batched || st.Rule == nil {
					continue
				}
				r := st.Rule
				out = append(out, Model{Name: st.Model, RatePerSec: r.RatePerSec, BatchSize: r.BatchSize,
					MaxBatch: r.MaxBatch, Instances: r.Instances, Latency: r.Latency, QueuedRows: q[st.Model].QueuedRows, InFlightRows: q[st.Model].InFlightRows,
					// The monitor's line before any batch or seed is its
					// placeholder, not the GPU's.
					LineKnown: r.Samples > 0 || st.Seed != ""})
			}
			return out
		},
		JoulesPerRequest: func() (float64, bool) { return shortestJoulesPerRequest(energy()) },
	}
}

// shortestJoulesPerRequest is the energy per request over the meter's
// shortest sliding window: the most recent figure it has.
func shortestJoulesPerRequest(s power.Snapshot) (float64, bool) {
	best := ""
	for k, w := range s.Windows {
		if k != power.TotalWindow && w.JoulesPerRequest != nil && (best == "" || w.Seconds < s.Windows[best].Seconds) {
			best = k
		}
	}
	if best == "" {
		return 0, false
	}
	return *s.Windows[best].JoulesPerRequest, true
}
