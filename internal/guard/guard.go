// Package guard contains panics: a goroutine of the request path recovers
// with Recovered (its callers get an error, everyone else is served on),
// and a background loop runs under Loop, which restarts it with a growing
// pause. Each panic is counted in ratebatch_panics_total{site} and its
// stack logged, so that a codec bug hit by one hostile request costs that
// request, not the process and every caller queued in it.
package guard

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// panics counts recovered panics by site. It is the process's: a panic is
// a fact about the binary, not about one server instance, and every site
// must be able to count without being handed a registry.
var panics = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "ratebatch_panics_total",
	Help: "Panics recovered, by site (http, grpc, grpc_relay, batch, batch_resend, decision, data, plan, monitor, power, discovery, energy_fit, ui, ...).",
}, []string{"site"})

// Collector is ratebatch_panics_total, for the serving registry.
func Collector() prometheus.Collector { return panics }

// Count returns the panics recovered at site so far (tests, status).
func Count(site string) int {
	stackMu.Lock()
	defer stackMu.Unlock()
	return counts[site]
}

// Logging a stack costs a few kilobytes of log per panic; a site that
// panics at every request must not flood the log. A site's stack is logged
// at its first panic and then at most once per stackEvery; the count is
// exact in the metric.
const stackEvery = time.Minute

var (
	stackMu   sync.Mutex
	stackLast = map[string]time.Time{}
	counts    = map[string]int{}
)

// Recovered records a recovered panic value v at site: it counts it, logs
// it with its stack (see stackEvery) and returns an error naming it, for
// the callers concerned. Call it from the deferred function that recovered,
// so that the stack is the panicking goroutine's.
func Recovered(log *slog.Logger, site string, v any) error {
	panics.WithLabelValues(site).Inc()
	if log == nil {
		log = slog.Default()
	}
	now := time.Now()
	stackMu.Lock()
	counts[site]++
	last, seen := stackLast[site]
	withStack := !seen || now.Sub(last) >= stackEvery
	if withStack {
		stackLast[site] = now
	}
	stackMu.Unlock()
	if withStack {
		log.Error("panic recovered", "site", site, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	} else {
		log.Error("panic recovered (stack logged earlier)", "site", site, "panic", fmt.Sprint(v))
	}
	return fmt.Errorf("internal error (%s): %v", site, v)
}

// Pauses before a crashed loop restarts: the first firstPause, doubling up
// to maxPause, back to firstPause once a run lasted calmAfter.
const (
	firstPause = 100 * time.Millisecond
	maxPause   = 10 * time.Second
	calmAfter  = time.Minute
)

// Loop runs fn(ctx) until ctx ends. A panic in fn is recovered (Recovered)
// and fn starts again after a pause growing from 100 ms to 10 s, so that a
// loop that panics at once every time costs a log line per pause, not a
// core. fn returning on its own ends Loop.
func Loop(ctx context.Context, log *slog.Logger, site string, fn func(context.Context)) {
	pause := firstPause
	for {
		start := time.Now()
		if !runOnce(ctx, log, site, fn) {
			return
		}
		if time.Since(start) >= calmAfter {
			pause = firstPause
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		pause = min(2*pause, maxPause)
	}
}

// runOnce runs fn and reports whether it panicked.
func runOnce(ctx context.Context, log *slog.Logger, site string, fn func(context.Context)) (panicked bool) {
	defer func() {
		if v := recover(); v != nil {
			Recovered(log, site, v)
			panicked = true
		}
	}()
	fn(ctx)
	return false
}
