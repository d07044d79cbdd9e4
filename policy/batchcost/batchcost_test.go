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

// AdhocBatch against the fixed point b = lambda*tau(b) solved by hand for
// tau(b) = 0.5*b + 2 ms: b = 2*lambda/(1 - 0.5*lambda).
func TestAdhocBatch(t *testing.T) {
	l := Latency{AlphaMs: 0.5, Tau0Ms: 2}
	tests := []struct {
		lambda float64 // rows per ms
		want   float64
	}{
		{0, 1},          // no load: a request alone
		{0.2, 1},        // 2*0.2/0.9 = 0.44: the server idles, batches of 1
		{1, 4},          // 2/0.5 = 4: a batch of 4 takes 4 ms, in which 4 arrive
		{1.2, 6},        // 2.4/0.4 = 6
		{1.5, 8},        // 3/0.25 = 12, past B_max 8
		{2, 8},          // lambda*alpha = 1: saturated
		{3, 8},          // past saturation
		{math.NaN(), 1}, // no rate known
	}
	for _, tt := range tests {
		if got := l.AdhocBatch(tt.lambda, 8); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("AdhocBatch(%v, 8) = %v, want %v", tt.lambda, got, tt.want)
		}
	}
	// At the fixed point the batch is what arrives while it runs.
	if b := l.AdhocBatch(1.2, 8); math.Abs(b-1.2*(0.5*b+2)) > 1e-12 {
		t.Errorf("b = %v is not lambda*tau(b) = %v", b, 1.2*(0.5*b+2))
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
