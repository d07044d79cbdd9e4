// Package batchcost owns the two lines ratebatch models a batch with: its
// latency tau(b) = alpha*b + tau0 and its energy zeta(b) = beta*b + zeta0,
// b being the rows in the batch.
//
// Every part of ratebatch speaks of the same two lines: presets publish them,
// the monitor fits the latency line, policies plan with both, the SMDP solver
// and the capacity bounds are closed forms in them. They live here, in a
// package that imports nothing of ratebatch, so that each of those packages
// embeds the one definition and its one validation instead of repeating it.
//
// Units: milliseconds and millijoules.
package batchcost

import (
	"fmt"
	"math"
	"time"
)

// Latency is the batch latency line tau(b) = AlphaMs*b + Tau0Ms.
type Latency struct {
	AlphaMs float64 `json:"alpha_ms"` // latency slope per row in a batch
	Tau0Ms  float64 `json:"tau0_ms"`  // fixed latency of any batch
}

// TauMs is the latency of a batch of b rows in milliseconds.
func (l Latency) TauMs(b int) float64 { return l.AlphaMs*float64(b) + l.Tau0Ms }

// TauDuration is TauMs as a duration.
func (l Latency) TauDuration(b int) time.Duration {
	return time.Duration(l.TauMs(b) * float64(time.Millisecond))
}

// MuPerMs is the throughput b/tau(b), in rows per millisecond, of
// back-to-back batches of b.
func (l Latency) MuPerMs(b int) float64 { return float64(b) / l.TauMs(b) }

// AdhocBatch is the mean batch ad-hoc batching sends at an arrival rate of
// lambdaPerMs rows per millisecond on one instance: ad-hoc sends everything
// waiting whenever the server is free, so under load a batch holds what
// arrived during the one before, b = lambda*tau(b) = lambda*tau0/(1 -
// lambda*alpha), and never fewer than 1 (a request alone on an idle server)
// nor more than maxBatch (at or past saturation, lambda*alpha >= 1, full
// batches). It is the fluid figure: at light load, where a request now and
// then finds another waiting, the exact mean is slightly above 1.
func (l Latency) AdhocBatch(lambdaPerMs float64, maxBatch int) float64 {
	top := float64(max(maxBatch, 1))
	if !(lambdaPerMs > 0) {
		return 1
	}
	x := 1 - lambdaPerMs*l.AlphaMs
	if !(x > 0) {
		return top
	}
	return min(max(lambdaPerMs*l.Tau0Ms/x, 1), top)
}

// Validate reports whether the line is a usable latency model: a batch must
// cost time per row (alpha > 0, else batches of any size are free and every
// rate is sustainable) and cannot take negative time.
func (l Latency) Validate() error {
	switch {
	case !(l.AlphaMs > 0) || math.IsInf(l.AlphaMs, 0):
		return fmt.Errorf("alpha must be > 0 ms and finite, got %v", l.AlphaMs)
	case !(l.Tau0Ms >= 0) || math.IsInf(l.Tau0Ms, 0):
		return fmt.Errorf("tau0 must be >= 0 ms and finite, got %v", l.Tau0Ms)
	}
	return nil
}

// Energy is the batch energy line zeta(b) = BetaMJ*b + Zeta0MJ.
type Energy struct {
	BetaMJ  float64 `json:"beta_mj"`  // energy slope per row in a batch
	Zeta0MJ float64 `json:"zeta0_mj"` // fixed energy of any batch
}

// ZetaMJ is the energy of a batch of b rows in millijoules.
func (e Energy) ZetaMJ(b int) float64 { return e.BetaMJ*float64(b) + e.Zeta0MJ }

// Validate reports whether the line is a usable energy model. Both figures
// may be 0: a zero line stands for "energy unknown" where the caller
// weighs power at 0 (the SMDP solver); callers that divide by energy check
// for it themselves.
func (e Energy) Validate() error {
	switch {
	case !(e.BetaMJ >= 0) || math.IsInf(e.BetaMJ, 0):
		return fmt.Errorf("beta must be >= 0 mJ and finite, got %v", e.BetaMJ)
	case !(e.Zeta0MJ >= 0) || math.IsInf(e.Zeta0MJ, 0):
		return fmt.Errorf("zeta0 must be >= 0 mJ and finite, got %v", e.Zeta0MJ)
	}
	return nil
}
