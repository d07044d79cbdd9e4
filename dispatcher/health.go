package dispatcher

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// upstreamHealth is the dispatcher's passive view of its upstream, learnt
// from the batches it sends, as Caddy's passive health checks and Envoy's
// outlier detection learn it: no extra traffic while all is well. A
// connection that cannot be made marks the upstream down (a server that
// refuses connections is not coming back within the next request); any
// answer, whatever its status, marks it up. While it is down, one batch at a
// time tries it (the probe) with growing, jittered pauses, and the other
// batches wait for the outcome instead of hammering a dead port: an outage
// shorter than a caller's deadline then costs it latency, not an error.
type upstreamHealth struct {
	// isDown mirrors down for the lock-free fast path: while the upstream
	// is up, admit and reached cost an atomic load per batch.
	isDown  atomic.Bool
	mu      sync.Mutex
	down    bool
	probing bool          // a batch holds the probe role
	changed chan struct{} // closed and replaced whenever down or probing changes
}

func newUpstreamHealth() *upstreamHealth {
	return &upstreamHealth{changed: make(chan struct{})}
}

// admit says whether a batch may try the upstream now: always while it is
// up; while it is down, only as the probe (probe is then true and the batch
// must give the role back with reached, failed or release). Otherwise wait
// is closed at the next change.
func (h *upstreamHealth) admit() (send, probe bool, wait <-chan struct{}) {
	if !h.isDown.Load() {
		return true, false, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.down:
		return true, false, nil
	case !h.probing:
		h.probing = true
		return true, true, nil
	}
	return false, false, h.changed
}

// reached records an answer from the upstream: it is up, and the batches
// waiting for it go. It reports whether the upstream was down until now.
func (h *upstreamHealth) reached() (wasDown bool) {
	if !h.isDown.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	wasDown = h.down
	if h.down || h.probing {
		h.down, h.probing = false, false
		h.isDown.Store(false)
		h.broadcast()
	}
	return wasDown
}

// refused records a connection that could not be made and reports whether
// that marked the upstream down (it was up until now). A probe keeps its
// role: it tries again after its pause.
func (h *upstreamHealth) refused() (markedDown bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down {
		return false
	}
	h.down = true
	h.isDown.Store(true)
	h.broadcast()
	return true
}

// release gives the probe role back: its batch stops trying (its deadline
// passed, or the dispatcher is closing), and a waiting batch may take it.
func (h *upstreamHealth) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.probing {
		h.probing = false
		h.broadcast()
	}
}

// broadcast wakes every waiter. Called with h.mu held.
func (h *upstreamHealth) broadcast() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// Pauses between attempts after a connection error: the first about
// defaultBackoff, doubling up to maxBackoff, so that a restarting upstream
// is found within a tenth of a second of its return without being flooded.
const (
	defaultBackoff = 10 * time.Millisecond
	maxBackoff     = 100 * time.Millisecond
)

// Backoff is the pause before retry number attempt (1, 2, ...): base (0:
// 10 ms) doubled per attempt up to maxBackoff, drawn from its upper half
// ("equal jitter") so that calls failed by one outage do not return in
// step. The batches' retries and the pass-through's hold share it.
func Backoff(base time.Duration, attempt int) time.Duration {
	if base <= 0 {
		base = defaultBackoff
	}
	d := base
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	d = min(d, max(maxBackoff, base))
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
