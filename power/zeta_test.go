package power

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// window draws one window's totals from a true line: batches of varying
// mean size, energy = idle*seconds + zeta0*batches + beta*rows (+ noise).
func window(rng *rand.Rand, beta, zeta0, idleW, meanBatch, noise float64) ZetaWindow {
	batches := int64(50 + rng.IntN(50))
	rows := int64(math.Round(float64(batches) * meanBatch))
	e := idleW*1 + (zeta0*float64(batches)+beta*float64(rows))/1000
	e *= 1 + noise*(2*rng.Float64()-1)
	return ZetaWindow{Seconds: 1, EnergyJ: e, IdleW: idleW, BusyS: 0.5, Batches: batches, Rows: rows}
}

func TestZetaFitRecoversTheLine(t *testing.T) {
	for _, tc := range []struct {
		name        string
		beta, zeta0 float64
		noise, tol  float64
	}{
		{"googlenet-p4 exact", 19.9, 19.6, 0, 1e-9},
		{"resnet50-v100 1% noise", 44.19, 155, 0.01, 0.06},
	} {
		rng := rand.New(rand.NewPCG(1, 2))
		var z ZetaFit
		for i := range 200 {
			z.Add(window(rng, tc.beta, tc.zeta0, 30, 1+float64(i%8), tc.noise))
		}
		beta, zeta0, _, fitted, err := z.Line()
		if err != nil || !fitted {
			t.Fatalf("%s: fitted %v, err %v", tc.name, fitted, err)
		}
		if math.Abs(beta-tc.beta) > tc.tol*tc.beta || math.Abs(zeta0-tc.zeta0) > tc.tol*tc.zeta0 {
			t.Errorf("%s: beta %.4g zeta0 %.4g, want %.4g %.4g", tc.name, beta, zeta0, tc.beta, tc.zeta0)
		}
	}
}

// At one steady batch size the split is not identified: the fit says so
// and gives the busy power instead.
func TestZetaFitFallsBackToBusyPower(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var z ZetaFit
	for range 50 {
		z.Add(window(rng, 19.9, 19.6, 30, 4, 0))
	}
	_, _, busyW, fitted, err := z.Line()
	if err != nil || fitted {
		t.Fatalf("fitted %v err %v, want the busy-power fallback", fitted, err)
	}
	// Excess energy per window over 0.5 s busy.
	if !(busyW > 0) {
		t.Errorf("busy power %v", busyW)
	}
}

func TestZetaFitNeedsWindows(t *testing.T) {
	var z ZetaFit
	z.Add(ZetaWindow{Seconds: 1, EnergyJ: 40, IdleW: 30, Batches: 0, Rows: 0}) // idle: ignored
	z.Add(ZetaWindow{Seconds: 0, EnergyJ: 40, Batches: 3, Rows: 5})            // no span: ignored
	z.Add(ZetaWindow{Seconds: 1, EnergyJ: math.Inf(1), Batches: 3, Rows: 5})   // ignored
	for range 3 {
		z.Add(ZetaWindow{Seconds: 1, EnergyJ: 40, IdleW: 30, Batches: 3, Rows: 5})
	}
	if _, _, _, _, err := z.Line(); !errors.Is(err, ErrZetaUnknown) {
		t.Errorf("after 3 usable windows: err %v, want ErrZetaUnknown", err)
	}
}
