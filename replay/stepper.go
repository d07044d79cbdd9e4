package replay

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ratebatch/ratebatch/monitor"
)

// Stepper is a run whose arrivals its caller hands in one at a time, as
// a fleet's balancer hands each arrival to one replica: the caller
// advances it to each arrival's time and reads its state in between.
type Stepper struct{ r *run }

// NewStepper starts a run at time 0 whose arrivals come from Arrive; c
// gives no arrivals of its own (no rate, trace, arrival times or
// clients).
func NewStepper(c Config) (*Stepper, error) {
	if c.RatePerSec != 0 || c.Trace != nil || c.Arrivals != nil || c.Clients != 0 {
		return nil, fmt.Errorf("sim: %w", invalid("Arrivals", "a stepped run's arrivals are handed in, not given"))
	}
	c.Arrivals = []time.Duration{}
	r, err := newRun(c)
	if err != nil {
		return nil, err
	}
	r.external, r.open = true, true
	return &Stepper{r}, nil
}

// Until handles the run's events before t (at t too when inclusive).
func (s *Stepper) Until(ctx context.Context, t time.Duration, inclusive bool) error {
	r := s.r
	for {
		stop, err := r.step(ctx, t, inclusive)
		if err != nil {
			return fmt.Errorf("sim %s: %w", r.c.Policy.Name(), err)
		}
		if stop {
			return nil
		}
	}
}

// Arrive hands in a request arriving at t, no earlier than the last, and
// runs the run up to and including it.
func (s *Stepper) Arrive(ctx context.Context, t time.Duration) error {
	s.r.nextArrival, s.r.haveArrival = t, true
	return s.Until(ctx, t, true)
}

// Close says no more arrivals come and runs the run to its end.
func (s *Stepper) Close(ctx context.Context) error {
	s.r.open = false
	return s.Until(ctx, math.MaxInt64, true)
}

// Unanswered is the requests the run holds: queued, or in a batch whose
// answer has not come.
func (s *Stepper) Unanswered() int { r := s.r; return len(r.queue) - r.head + r.flyRow - r.ansRow }

// Monitor is the run's monitor, as the replica's proxy would report it.
func (s *Stepper) Monitor() *monitor.Monitor { return s.r.mon }

// Totals are what a run has done so far, for a caller that sums several
// runs (a fleet).
type Totals struct {
	// Latencies are the requests' latencies so far in ms, in no
	// particular order; the slice is the run's own.
	Latencies []float64
	// LastDone is the last completion, Busy the time at least one batch
	// ran.
	LastDone, Busy time.Duration
	// BatchEnergyMJ is the batches' energy, zeta(b) each, without idle
	// power (0 without energy figures).
	BatchEnergyMJ float64
	Rows, Batches int
}

// Totals returns the run's totals so far.
func (s *Stepper) Totals() Totals {
	r := s.r
	return Totals{Latencies: r.latencies, LastDone: r.lastDone, Busy: r.busyTotal, BatchEnergyMJ: r.energyMJ,
		Rows: r.rowsSent, Batches: r.batches}
}
