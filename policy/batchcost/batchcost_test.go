package batchcost

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestLatency(t *testing.T) {
	l := Latency{AlphaMs: 0.5, Tau0Ms: 2}
	if got := l.TauMs(4); got != 4 {
		t.Fatalf("TauMs(4) = %v, want 4", got)
	}
	if got := l.TauDuration(4); got != 4*time.Millisecond {
		t.Fatalf("TauDuration(4) = %v, want 4ms", got)
	}
	if got := l.MuPerMs(4); got != 1 {
		t.Fatalf("MuPerMs(4) = %v, want 1", got)
	}
	if e := (Energy{BetaMJ: 3, Zeta0MJ: 1}); e.ZetaMJ(2) != 7 {
		t.Fatalf("ZetaMJ(2) = %v, want 7", e.ZetaMJ(2))
	}
}

func TestValidate(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name string
		err  error
		want string // "" when valid
	}{
		{"line", Latency{AlphaMs: 1}.Validate(), ""},
		{"alpha zero", Latency{Tau0Ms: 1}.Validate(), "alpha"},
		{"alpha NaN", Latency{AlphaMs: nan}.Validate(), "alpha"},
		{"alpha infinite", Latency{AlphaMs: inf}.Validate(), "alpha"},
		{"tau0 negative", Latency{AlphaMs: 1, Tau0Ms: -1}.Validate(), "tau0"},
		{"tau0 infinite", Latency{AlphaMs: 1, Tau0Ms: inf}.Validate(), "tau0"},
		{"energy", Energy{BetaMJ: 1, Zeta0MJ: 2}.Validate(), ""},
		{"energy unknown", Energy{}.Validate(), ""},
		{"beta negative", Energy{BetaMJ: -1}.Validate(), "beta"},
		{"zeta0 NaN", Energy{Zeta0MJ: nan}.Validate(), "zeta0"},
		{"zeta0 infinite", Energy{Zeta0MJ: inf}.Validate(), "zeta0"},
	}
	for _, tt := range tests {
		switch {
		case tt.want == "" && tt.err != nil:
			t.Errorf("%s: %v, want valid", tt.name, tt.err)
		case tt.want != "" && (tt.err == nil || !strings.Contains(tt.err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error naming %s", tt.name, tt.err, tt.want)
		}
	}
}
