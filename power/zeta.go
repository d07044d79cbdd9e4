package power

import (
	"errors"
	"fmt"
	"math"
)

// ZetaWindow is what one monitor window tells about batch energy: the
// energy the GPU drew, its idle power, and the batches and rows the proxy
// sent, all over the same Seconds.
type ZetaWindow struct {
	Seconds float64
	EnergyJ float64
	IdleW   float64 // the meter's idle power; 0 when unknown
	BusyS   float64 // time with a batch in flight; 0 when unknown
	Batches int64
	Rows    int64
}

// ZetaFit learns the batch energy line zeta(b) = BetaMJ*b + Zeta0MJ from
// window totals, idle power apart: every window gives
//
//	EnergyJ - IdleW*Seconds = Zeta0*Batches + Beta*Rows
//
// and a least-squares fit without intercept over the windows, each weighted
// down by half every HalfLife windows so the line follows a drifting GPU,
// gives Zeta0 and Beta. The fit needs windows whose mean batch size
// differs (Rows/Batches): at one steady load every window has the same
// ratio, the two columns are proportional and the split between Zeta0 and
// Beta is not identified. Line then falls back to energy proportional to
// busy time, at the measured power above idle (BusyW), which the caller
// turns into zeta(b) = BusyW * tau(b).
//
// A ZetaFit is not safe for concurrent use.
type ZetaFit struct {
	// HalfLife is in windows; 0 selects DefaultZetaHalfLife.
	HalfLife float64

	sNN, sNR, sRR, sNE, sRE float64 // decayed sums (energies in mJ)
	excessMJ, busyS         float64 // decayed, for the busy-power fallback
	windows                 int
}

// Defaults of ZetaFit.
const (
	DefaultZetaHalfLife = 60
	// zetaMinWindows is how many windows with batches the fit waits for.
	zetaMinWindows = 5
	// zetaMinDecorrelation bounds 1 - corr^2 of the Batches and Rows
	// columns (uncentred) below which the split is not identified.
	zetaMinDecorrelation = 1e-3
)

// Add takes one window; windows without batches or with unusable figures
// are ignored (idle windows say nothing about batch energy).
func (z *ZetaFit) Add(w ZetaWindow) {
	if w.Batches <= 0 || w.Rows < w.Batches || !(w.Seconds > 0) || !(w.EnergyJ >= 0) || !(w.IdleW >= 0) ||
		math.IsInf(w.EnergyJ, 0) || math.IsInf(w.IdleW, 0) {
		return
	}
	hl := z.HalfLife
	if !(hl > 0) {
		hl = DefaultZetaHalfLife
	}
	d := math.Exp2(-1 / hl)
	n, r := float64(w.Batches), float64(w.Rows)
	e := 1000 * (w.EnergyJ - w.IdleW*w.Seconds)
	z.sNN = d*z.sNN + n*n
	z.sNR = d*z.sNR + n*r
	z.sRR = d*z.sRR + r*r
	z.sNE = d*z.sNE + n*e
	z.sRE = d*z.sRE + r*e
	z.excessMJ = d*z.excessMJ + e
	if w.BusyS > 0 {
		z.busyS = d*z.busyS + w.BusyS
	} else {
		z.busyS *= d
	}
	z.windows++
}

// ErrZetaUnknown is returned while the windows identify neither the line
// nor the busy power.
var ErrZetaUnknown = errors.New("batch energy not identified yet")

// Line returns the fitted line (fitted true), or, when the windows do not
// separate Zeta0 from Beta, the mean power above idle while busy (BusyW,
// fitted false).
func (z *ZetaFit) Line() (betaMJ, zeta0MJ, busyW float64, fitted bool, err error) {
	if z.windows < zetaMinWindows {
		return 0, 0, 0, false, fmt.Errorf("%w: %d of %d windows with batches", ErrZetaUnknown, z.windows, zetaMinWindows)
	}
	det := z.sNN*z.sRR - z.sNR*z.sNR
	if det > zetaMinDecorrelation*z.sNN*z.sRR {
		zeta0 := (z.sNE*z.sRR - z.sRE*z.sNR) / det
		beta := (z.sRE*z.sNN - z.sNE*z.sNR) / det
		if zeta0 >= 0 && beta >= 0 {
			return beta, zeta0, 0, true, nil
		}
	}
	if z.busyS > 0 && z.excessMJ > 0 {
		return 0, 0, z.excessMJ / 1000 / z.busyS, false, nil
	}
	return 0, 0, 0, false, fmt.Errorf("%w: the windows' mean batch sizes do not vary and busy time is unknown", ErrZetaUnknown)
}
