package sim

import (
	"errors"
	"fmt"

	"github.com/ratebatch/ratebatch/lab/trace"
)

// Arrivals are a run's arrivals as the sim command names them: exactly one
// of a rate, a load rho (of mu(B_max)) or a trace (a built-in name or a CSV
// file, trace.Load), the trace optionally played faster (Speedup) and
// scaled (Scale). A nil field, or an empty Trace, was not given.
type Arrivals struct {
	Rate, Rho      *float64
	Trace          string
	Speedup, Scale *float64
}

// Apply sets c's rate or trace; c.Profile must be set, and c.Clients if
// closed-loop clients are to run alone. Its errors name the flags.
func (a Arrivals) Apply(c *Config) error {
	n := 0
	for _, given := range []bool{a.Rate != nil, a.Rho != nil, a.Trace != ""} {
		if given {
			n++
		}
	}
	switch {
	case n == 0 && c.Clients > 0:
		// closed-loop clients alone
	case n == 0:
		return errors.New("give the arrivals: one of --rate, --rho or --trace, or --clients")
	case n > 1:
		return errors.New("give only one of --rate, --rho and --trace")
	case a.Rate != nil:
		c.RatePerSec = *a.Rate
	case a.Rho != nil:
		if !(*a.Rho > 0) {
			return fmt.Errorf("--rho must be > 0, got %v", *a.Rho)
		}
		c.RatePerSec = *a.Rho * 1000 * c.Profile.MuPerMs(c.Profile.MaxBatch)
	default:
		tr, err := trace.Load(a.Trace)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		if a.Speedup != nil {
			if tr, err = tr.Compress(*a.Speedup); err != nil {
				return fmt.Errorf("--speedup: %w", err)
			}
		}
		if a.Scale != nil {
			if tr, err = tr.Scale(*a.Scale); err != nil {
				return fmt.Errorf("--trace-scale: %w", err)
			}
		}
		c.Trace = tr
	}
	if (a.Scale != nil || a.Speedup != nil) && a.Trace == "" {
		return errors.New("--trace-scale and --speedup need --trace")
	}
	return nil
}
