// Package energyfit learns each batched model's batch energy line zeta(b)
// from the power meter while the proxy runs, and hands it to the model's
// monitor, so that energy-aware policies (budget, smdp's w2) plan with the
// GPU's own figures rather than a preset's.
package energyfit

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/power"
)

// Fitter gives each batched model's monitor the batch energy line
// zeta(b) the power meter measures (power.ZetaFit: window energy, idle
// power apart, against the batches and rows sent in the window), so that
// energy-aware policies (budget, smdp's w2) plan with the GPU's real
// figures. Windows in which more than one model sent batches are skipped:
// the GPU's energy cannot be split between them by this fit. While the
// meter measures nothing, nothing is set, and the budget policy takes
// energy proportional to busy time (its objective in /status says so).
type Fitter struct {
	meter     *power.Meter
	snapshots func() []dispatcher.Snapshot
	monitors  func() []*monitor.Monitor

	mu     sync.Mutex
	fits   map[string]*power.ZetaFit
	status map[string]string
	prevE  float64
	prevT  float64
	prevB  map[string][2]int64 // batches, rows sent per model
	busy   float64             // busy seconds at the previous step
	primed bool
}

// New returns a fitter reading m, the dispatcher's batch counters
// (snapshots) and the batched models' monitors; Run drives it.
func New(m *power.Meter, snapshots func() []dispatcher.Snapshot, monitors func() []*monitor.Monitor) *Fitter {
	return &Fitter{meter: m, snapshots: snapshots, monitors: monitors,
		fits: map[string]*power.ZetaFit{}, status: map[string]string{}, prevB: map[string][2]int64{}}
}

// Run takes one window every interval until ctx ends.
func (f *Fitter) Run(ctx context.Context, every time.Duration) {
	// A panic of a step restarts the loop after a pause (guard.Loop).
	guard.Loop(ctx, nil, "energy_fit", func(ctx context.Context) { f.run(ctx, every) })
}

func (f *Fitter) run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.Step()
		}
	}
}

// Step takes one window from the meter and the dispatcher's counters. Run
// calls it; tests may too.
func (f *Fitter) Step() {
	snap := f.meter.Snapshot()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !snap.Available {
		f.status["*"] = "energy not measured (" + snap.Unavailable + "): a model without a line learnt before takes batch energy proportional to GPU busy time"
		return
	}
	delete(f.status, "*")
	total := snap.Windows[power.TotalWindow]
	if total.EnergyJ == nil {
		return
	}
	var idleW, busyS float64
	for _, g := range snap.GPUs {
		if g.IdlePowerW != nil {
			idleW += *g.IdlePowerW
		}
		busyS += g.BusySeconds
	}
	e, sec := *total.EnergyJ, total.Seconds
	sent := map[string][2]int64{}
	for _, s := range f.snapshots() {
		sent[s.Model] = [2]int64{s.BatchesSent, s.RowsSent}
	}
	if f.primed {
		var active []string
		for m, c := range sent {
			if c[0] > f.prevB[m][0] {
				active = append(active, m)
			}
		}
		if len(active) == 1 && sec > f.prevT {
			m := active[0]
			fit := f.fits[m]
			if fit == nil {
				fit = &power.ZetaFit{}
				f.fits[m] = fit
			}
			fit.Add(power.ZetaWindow{Seconds: sec - f.prevT, EnergyJ: e - f.prevE, IdleW: idleW,
				BusyS: busyS - f.busy, Batches: sent[m][0] - f.prevB[m][0], Rows: sent[m][1] - f.prevB[m][1]})
			f.apply(m, fit)
		}
	}
	f.prevE, f.prevT, f.prevB, f.busy, f.primed = e, sec, sent, busyS, true
}

// apply hands the fit's line to the model's monitor.
func (f *Fitter) apply(model string, fit *power.ZetaFit) {
	beta, zeta0, busyW, fitted, err := fit.Line()
	if err != nil {
		f.status[model] = err.Error()
		return
	}
	for _, mon := range f.monitors() {
		snap := mon.Snapshot()
		if snap.Model != model {
			continue
		}
		line := &batchcost.Energy{BetaMJ: beta, Zeta0MJ: zeta0}
		f.status[model] = fmt.Sprintf("meter fit: zeta(b) = %.4g*b + %.4g mJ", beta, zeta0)
		if !fitted {
			// zeta(b) = busy power above idle x tau(b).
			line = &batchcost.Energy{BetaMJ: busyW * snap.AlphaMs, Zeta0MJ: busyW * snap.Tau0Ms}
			f.status[model] = fmt.Sprintf("meter: %.4g W above idle while busy, zeta(b) taken as that x tau(b) (batch sizes too steady to split the line)", busyW)
		}
		mon.SetEnergy(line)
	}
}

// Status is the fit's state per model for /status.
func (f *Fitter) Status() map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]string, len(f.status))
	for k, v := range f.status {
		out[k] = v
	}
	return out
}
