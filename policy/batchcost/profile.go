package batchcost

import "fmt"

// Profile is one model on one GPU as the two lines describe it: a preset
// publishes one, the what-if replays the line the proxy learnt as one, and
// the simulator runs a batch of b rows for TauMs(b) and ZetaMJ(b). Energy
// is optional: HasEnergy is false where no figures are known, and then
// ZetaMJ must not be used.
type Profile struct {
	Name string
	Latency
	// Energy is only meaningful when HasEnergy is true.
	Energy
	MaxBatch int // the model's max_batch_size (B_max)
	// HasEnergy reports whether BetaMJ and Zeta0MJ are real figures.
	HasEnergy bool
	Source    string
}

// Validate reports the first field that makes the profile unusable.
func (p Profile) Validate() error {
	if err := p.Latency.Validate(); err != nil {
		return fmt.Errorf("profile %q: %w", p.Name, err)
	}
	if p.MaxBatch < 1 {
		return fmt.Errorf("profile %q: max batch must be >= 1, got %d", p.Name, p.MaxBatch)
	}
	if p.HasEnergy {
		if err := p.Energy.Validate(); err != nil {
			return fmt.Errorf("profile %q: %w", p.Name, err)
		}
	}
	return nil
}

// KnownEnergy is the profile's energy line, or the zero line where none is
// known, so that a planner cannot mistake unset figures for real ones.
func (p Profile) KnownEnergy() Energy {
	if !p.HasEnergy {
		return Energy{}
	}
	return p.Energy
}
