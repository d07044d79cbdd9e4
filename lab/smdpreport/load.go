package smdpreport

import (
	"errors"
	"fmt"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Load is the arrival rate as the smdp command names it: a load rho of
// mu(B_max) or a rate in requests/s, exactly one given (non-nil).
type Load struct{ Rho, Rate *float64 }

// Apply sets m's arrival rate and validates m. Its errors name the flags.
func (l Load) Apply(m *smdp.Model) error {
	switch {
	case l.Rho == nil && l.Rate == nil:
		return errors.New("give the load: --rho R or --rate RPS (or --compare alone for a grid of loads)")
	case l.Rho != nil && l.Rate != nil:
		return errors.New("give only one of --rho and --rate")
	case l.Rho != nil:
		if rho := *l.Rho; !(rho > 0 && rho < 1) {
			return fmt.Errorf("--rho must be in (0, 1), got %v (rho >= 1 is unstable: arrivals reach the throughput of full batches)", rho)
		}
		m.LambdaPerMs = *l.Rho * m.MuPerMs(m.MaxBatch)
	default:
		if !(*l.Rate > 0) {
			return fmt.Errorf("--rate must be > 0 requests/s, got %v", *l.Rate)
		}
		m.LambdaPerMs = *l.Rate / 1000
	}
	return m.Validate()
}

// NewBudget checks a latency-budget job: budget as smdp.ParseBudget reads
// it, on a profile with energy figures.
func NewBudget(prof preset.Profile, m smdp.Model, budget string, sMax int) (Budget, error) {
	b, err := smdp.ParseBudget(budget)
	if err != nil {
		return Budget{}, fmt.Errorf("--latency-budget: %w", err)
	}
	if !prof.HasEnergy {
		return Budget{}, fmt.Errorf("--latency-budget trades latency for power, but %s has no published energy figures: give --beta and --zeta0", prof.Name)
	}
	return Budget{Profile: prof, Model: m, Budget: b, SMax: sMax}, nil
}
