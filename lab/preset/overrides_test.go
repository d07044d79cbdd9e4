package preset

import (
	"flag"
	"strings"
	"testing"
)

func TestFlagsNameAProfile(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    string  // profile name
		alpha   float64 // the resulting alpha
		bmax    int
		energy  bool
		wantErr string
	}{
		{"the default preset", nil, "googlenet-p4", 0.3051, 32, true, ""},
		{"a preset", []string{"--preset", "resnet50-titanrtx"}, "resnet50-titanrtx", 1.182, 32, false, ""},
		{"a field overridden", []string{"--alpha", "0.5", "--preset", "googlenet-p4"}, "googlenet-p4 (modified)", 0.5, 32, true, ""},
		{"alpha and tau0 alone: a custom model", []string{"--alpha", "0.5", "--tau0", "2"}, "custom", 0.5, 32, false, ""},
		{"custom with B_max and energy", []string{"--alpha", "0.5", "--tau0", "2", "--bmax", "8", "--beta", "1", "--zeta0", "2"}, "custom", 0.5, 8, true, ""},
		{"custom needs both lines' terms", []string{"--alpha", "0.5"}, "", 0, 0, false, "needs both --alpha and --tau0"},
		{"custom energy needs both", []string{"--alpha", "0.5", "--tau0", "2", "--beta", "1"}, "", 0, 0, false, "needs both --beta and --zeta0"},
		{"no energy to override", []string{"--preset", "resnet50-titanrtx", "--beta", "1"}, "", 0, 0, false, "has no energy figures"},
		{"unknown preset", []string{"--preset", "nope"}, "", 0, 0, false, "--preset"},
		{"invalid line", []string{"--alpha", "-1", "--tau0", "2"}, "", 0, 0, false, "alpha"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			f := BindFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			p, err := f.Profile()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Name != tt.want || p.AlphaMs != tt.alpha || p.MaxBatch != tt.bmax || p.HasEnergy != tt.energy {
				t.Errorf("profile %+v, want %s with alpha %g, B_max %d, energy %v", p, tt.want, tt.alpha, tt.bmax, tt.energy)
			}
		})
	}
}
