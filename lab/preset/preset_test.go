package preset

import (
	"math"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

func TestPresetsValid(t *testing.T) {
	for _, p := range All() {
		if err := p.Validate(); err != nil {
			t.Errorf("preset %s: %v", p.Name, err)
		}
	}
	if _, err := Lookup(DefaultPreset); err != nil {
		t.Fatalf("default preset: %v", err)
	}
	if p, _ := Lookup(DefaultPreset); !p.HasEnergy {
		t.Fatalf("default preset %s must carry energy figures", DefaultPreset)
	}
}

func TestLookupUnknownNamesKnown(t *testing.T) {
	_, err := Lookup("nope")
	if err == nil {
		t.Fatal("want error for unknown preset")
	}
	if got := err.Error(); !strings.Contains(got, "googlenet-p4") {
		t.Fatalf("error %q should list known presets", got)
	}
}

func TestLineHelpers(t *testing.T) {
	p, _ := Lookup("googlenet-p4")
	if got, want := p.TauMs(4), 0.3051*4+1.052; math.Abs(got-want) > 1e-12 {
		t.Fatalf("TauMs(4) = %v, want %v", got, want)
	}
	if got, want := p.ZetaMJ(2), 19.90*2+19.60; math.Abs(got-want) > 1e-12 {
		t.Fatalf("ZetaMJ(2) = %v, want %v", got, want)
	}
	if !(p.MuPerMs(32) > p.MuPerMs(1)) {
		t.Fatal("throughput must grow with batch size")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		p    Profile
		ok   bool
	}{
		{"good", Profile{Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: 0}, MaxBatch: 1}, true},
		{"zero alpha", Profile{Latency: batchcost.Latency{AlphaMs: 0, Tau0Ms: 1}, MaxBatch: 1}, false},
		{"negative tau0", Profile{Latency: batchcost.Latency{AlphaMs: 1, Tau0Ms: -1}, MaxBatch: 1}, false},
		{"NaN alpha", Profile{Latency: batchcost.Latency{AlphaMs: math.NaN()}, MaxBatch: 1}, false},
		{"no batch", Profile{Latency: batchcost.Latency{AlphaMs: 1}, MaxBatch: 0}, false},
		{"negative energy", Profile{Latency: batchcost.Latency{AlphaMs: 1}, MaxBatch: 1, HasEnergy: true, Energy: batchcost.Energy{BetaMJ: -1}}, false},
	}
	for _, tt := range tests {
		if err := tt.p.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}
