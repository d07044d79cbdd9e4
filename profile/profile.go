// Package profile holds a model's batch service profile: the linear batch
// latency tau(b) = alpha*b + tau0 and, where published, the linear batch
// energy zeta(b) = beta*b + zeta0. The simulator, the emulator and the
// planners read the same presets so their figures agree.
package profile

import (
	"fmt"
	"sort"
	"strings"
)

// Profile describes one model on one GPU. Times are milliseconds, energies
// millijoules. Energy is optional: HasEnergy is false where no figures were
// published, and then Zeta must not be used.
type Profile struct {
	Name     string
	AlphaMs  float64 // latency slope per request in a batch
	Tau0Ms   float64 // fixed latency of any batch
	BetaMJ   float64 // energy slope per request in a batch
	Zeta0MJ  float64 // fixed energy of any batch
	MaxBatch int     // the model's max_batch_size (B_max)
	// HasEnergy reports whether BetaMJ and Zeta0MJ are real figures.
	HasEnergy bool
	Source    string
}

// TauMs returns the predicted latency of a batch of b requests in ms.
func (p Profile) TauMs(b int) float64 { return p.AlphaMs*float64(b) + p.Tau0Ms }

// ZetaMJ returns the energy of a batch of b requests in mJ; it is only
// meaningful when HasEnergy is true.
func (p Profile) ZetaMJ(b int) float64 { return p.BetaMJ*float64(b) + p.Zeta0MJ }

// MuPerMs returns the throughput b/tau(b) in requests per millisecond.
func (p Profile) MuPerMs(b int) float64 { return float64(b) / p.TauMs(b) }

// Validate reports the first field that makes the profile unusable.
func (p Profile) Validate() error {
	switch {
	case !(p.AlphaMs > 0):
		return fmt.Errorf("profile %q: alpha must be > 0 ms, got %v", p.Name, p.AlphaMs)
	case !(p.Tau0Ms >= 0):
		return fmt.Errorf("profile %q: tau0 must be >= 0 ms, got %v", p.Name, p.Tau0Ms)
	case p.MaxBatch < 1:
		return fmt.Errorf("profile %q: max batch must be >= 1, got %d", p.Name, p.MaxBatch)
	case p.HasEnergy && (!(p.BetaMJ >= 0) || !(p.Zeta0MJ >= 0)):
		return fmt.Errorf("profile %q: energy figures must be >= 0 mJ, got beta %v zeta0 %v", p.Name, p.BetaMJ, p.Zeta0MJ)
	}
	return nil
}

// presets are the published profiles of ALGORITHMS.md. Entries without
// energy figures say so through HasEnergy; none are invented.
var presets = []Profile{
	{Name: "googlenet-p4", AlphaMs: 0.3051, Tau0Ms: 1.052, BetaMJ: 19.90, Zeta0MJ: 19.60, MaxBatch: 32, HasEnergy: true, Source: "SMDP batching paper"},
	{Name: "resnet50-v100", AlphaMs: 0.1438, Tau0Ms: 1.8874, BetaMJ: 44.19, Zeta0MJ: 155.0, MaxBatch: 128, HasEnergy: true, Source: "NVIDIA figures via the closed-form paper"},
	{Name: "resnet50-p4", AlphaMs: 0.5833, Tau0Ms: 1.4284, BetaMJ: 36.63, Zeta0MJ: 51.44, MaxBatch: 128, HasEnergy: true, Source: "NVIDIA figures via the closed-form paper"},
	{Name: "resnet50-titanrtx", AlphaMs: 1.182, Tau0Ms: 2.396, MaxBatch: 32, Source: "E2bird profile (no energy published)"},
	{Name: "resnet101-titanrtx", AlphaMs: 1.900, Tau0Ms: 5.000, MaxBatch: 32, Source: "E2bird profile (no energy published)"},
	{Name: "resnet152-titanrtx", AlphaMs: 2.712, Tau0Ms: 6.739, MaxBatch: 32, Source: "E2bird profile (no energy published)"},
}

// DefaultPreset is the preset used when none is named: it has energy figures.
const DefaultPreset = "googlenet-p4"

// Lookup returns the named preset.
func Lookup(name string) (Profile, error) {
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("unknown preset %q (known: %s)", name, strings.Join(Names(), ", "))
}

// Names lists the preset names, sorted.
func Names() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	sort.Strings(names)
	return names
}

// All returns a copy of every preset.
func All() []Profile { return append([]Profile(nil), presets...) }
