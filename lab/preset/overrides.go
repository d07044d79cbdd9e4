package preset

import (
	"errors"
	"flag"
	"fmt"
	"strings"
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

// Flags are the model flags of the commands that need tau(b) and zeta(b):
// --preset, or its fields one by one (--alpha, --tau0, --beta, --zeta0,
// --bmax), read into Overrides.
type Flags struct {
	fs                       *flag.FlagSet
	preset                   string
	alpha, tau0, beta, zeta0 float64
	bmax                     int
}

// BindFlags registers the model flags on fs.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs}
	fs.StringVar(&f.preset, "preset", DefaultPreset, "model profile; one of "+strings.Join(Names(), ", ")+
		". --alpha etc. override its fields; without --preset, --alpha and --tau0 give a custom model")
	fs.Float64Var(&f.alpha, "alpha", 0, "batch latency slope alpha in ms per request: tau(b) = alpha*b + tau0")
	fs.Float64Var(&f.tau0, "tau0", 0, "batch latency intercept tau0 in ms")
	fs.Float64Var(&f.beta, "beta", 0, "batch energy slope beta in mJ per request: zeta(b) = beta*b + zeta0")
	fs.Float64Var(&f.zeta0, "zeta0", 0, "batch energy intercept zeta0 in mJ")
	fs.IntVar(&f.bmax, "bmax", 0, "max batch size B_max (custom model default 32)")
	return f
}

// Profile is the profile the parsed flags name (Overrides.Profile).
func (f *Flags) Profile() (Profile, error) {
	o := Overrides{Preset: f.preset}
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "preset":
			o.PresetGiven = true
		case "alpha":
			o.Alpha = &f.alpha
		case "tau0":
			o.Tau0 = &f.tau0
		case "beta":
			o.Beta = &f.beta
		case "zeta0":
			o.Zeta0 = &f.zeta0
		case "bmax":
			o.MaxBatch = &f.bmax
		}
	})
	return o.Profile()
}
