package preset

import (
	"errors"
	"fmt"
)

// Overrides names a model profile as the commands' model flags do: a
// preset, with any of its fields replaced, or, when Alpha or Tau0 is given
// without a preset, a custom model. A nil field was not given.
type Overrides struct {
	Preset                   string // DefaultPreset when empty
	PresetGiven              bool   // the preset was named, not defaulted
	Alpha, Tau0, Beta, Zeta0 *float64
	MaxBatch                 *int
}

// Profile returns the preset with the given fields overridden, or the
// custom model, validated.
func (o Overrides) Profile() (Profile, error) {
	custom := !o.PresetGiven && (o.Alpha != nil || o.Tau0 != nil)
	var p Profile
	if custom {
		if o.Alpha == nil || o.Tau0 == nil {
			return p, errors.New("a custom model needs both --alpha and --tau0 (or name a --preset)")
		}
		p = Profile{Name: "custom", MaxBatch: 32, Source: "flags"}
	} else {
		name := o.Preset
		if name == "" {
			name = DefaultPreset
		}
		var err error
		if p, err = Lookup(name); err != nil {
			return p, fmt.Errorf("--preset: %w", err)
		}
		if o.Alpha != nil || o.Tau0 != nil || o.Beta != nil || o.Zeta0 != nil || o.MaxBatch != nil {
			p.Name += " (modified)"
		}
	}
	set(&p.AlphaMs, o.Alpha)
	set(&p.Tau0Ms, o.Tau0)
	set(&p.MaxBatch, o.MaxBatch)
	if o.Beta != nil || o.Zeta0 != nil {
		both := o.Beta != nil && o.Zeta0 != nil
		if custom && !both {
			return p, errors.New("an energy model needs both --beta and --zeta0")
		}
		if !p.HasEnergy && !both {
			return p, fmt.Errorf("preset %s has no energy figures: give both --beta and --zeta0", p.Name)
		}
		set(&p.BetaMJ, o.Beta)
		set(&p.Zeta0MJ, o.Zeta0)
		p.HasEnergy = true
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

func set[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}
