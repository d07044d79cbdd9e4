// Package preset holds a model's batch service profile: the linear batch
// latency tau(b) = alpha*b + tau0 and, where published, the linear batch
// energy zeta(b) = beta*b + zeta0. The simulator, the emulator and the
// planners read the same presets so their figures agree.
package preset

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Profile describes one model on one GPU (batchcost.Profile: the what-if
// replays the proxy's learnt line as one). Times are milliseconds, energies
// millijoules. Energy is optional: HasEnergy is false where no figures were
// published.
type Profile = batchcost.Profile

// presets are the published profiles of ALGORITHMS.md. Entries without
// energy figures say so through HasEnergy; none are invented.
var presets = []Profile{
	{Name: "googlenet-p4", Latency: batchcost.Latency{AlphaMs: 0.3051, Tau0Ms: 1.052}, Energy: batchcost.Energy{BetaMJ: 19.90, Zeta0MJ: 19.60}, MaxBatch: 32, HasEnergy: true, Source: "SMDP batching paper"},
	{Name: "resnet50-v100", Latency: batchcost.Latency{AlphaMs: 0.1438, Tau0Ms: 1.8874}, Energy: batchcost.Energy{BetaMJ: 44.19, Zeta0MJ: 155.0}, MaxBatch: 128, HasEnergy: true, Source: "NVIDIA figures via the closed-form paper"},
	{Name: "resnet50-p4", Latency: batchcost.Latency{AlphaMs: 0.5833, Tau0Ms: 1.4284}, Energy: batchcost.Energy{BetaMJ: 36.63, Zeta0MJ: 51.44}, MaxBatch: 128, HasEnergy: true, Source: "NVIDIA figures via the closed-form paper"},
	{Name: "resnet50-titanrtx", Latency: batchcost.Latency{AlphaMs: 1.182, Tau0Ms: 2.396}, MaxBatch: 32, Source: "E2bird profile (no energy published)"},
	{Name: "resnet101-titanrtx", Latency: batchcost.Latency{AlphaMs: 1.900, Tau0Ms: 5.000}, MaxBatch: 32, Source: "E2bird profile (no energy published)"},
	{Name: "resnet152-titanrtx", Latency: batchcost.Latency{AlphaMs: 2.712, Tau0Ms: 6.739}, MaxBatch: 32, Source: "E2bird profile (no energy published)"},
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
