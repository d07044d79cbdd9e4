package proxy

import (
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/internal/membudget"
)

// reservations carry the memory a request's declared body was given when
// its headers arrived (headerReceived) to its handler, which adopts it.
// Reserving at the headers, not in the handler, is what refuses a burst of
// large bodies arriving at once before they are read: fasthttp answers
// "100 Continue" and reads up to 8 KiB of a body before the handler runs,
// so a check without a reservation there lets every one of a burst pass
// it, and the handler must then refuse them with their bodies on the way.
//
// A reservation is keyed by the request's header, which is its connection
// context's and outlives it: if neither the handler nor the error handler
// runs (the connection broke between the headers and the body), the next
// request on the same context gives the stale one back, and a sweep gives
// back any older than the time a body may take to start.
type reservations struct {
	b     *membudget.Budget
	stale time.Duration

	mu        sync.Mutex
	m         map[*fasthttp.RequestHeader]reservation
	lastSweep time.Time
}

type reservation struct {
	n  int64
	at time.Time
}

func newReservations(b *membudget.Budget, readTimeout time.Duration) *reservations {
	stale := 2 * time.Minute
	if readTimeout > 0 {
		stale = readTimeout + 10*time.Second
	}
	return &reservations{b: b, stale: stale, m: map[*fasthttp.RequestHeader]reservation{}}
}

// reserve takes n bytes for h's body, reporting whether they fit; a
// reservation h still had is given back first.
func (r *reservations) reserve(h *fasthttp.RequestHeader, n int64) bool {
	r.drop(h)
	if !r.b.Acquire(n) {
		return false
	}
	now := time.Now()
	r.mu.Lock()
	r.m[h] = reservation{n, now}
	if now.Sub(r.lastSweep) > time.Second {
		r.lastSweep = now
		for k, v := range r.m {
			if now.Sub(v.at) > r.stale {
				delete(r.m, k)
				r.b.Release(v.n)
			}
		}
	}
	r.mu.Unlock()
	return true
}

// take hands h's reservation over to its handler: the bytes, now the
// caller's to release (0 if none).
func (r *reservations) take(h *fasthttp.RequestHeader) int64 {
	r.mu.Lock()
	v, ok := r.m[h]
	if ok {
		delete(r.m, h)
	}
	r.mu.Unlock()
	return v.n
}

// drop gives h's reservation back, if it has one.
func (r *reservations) drop(h *fasthttp.RequestHeader) { r.b.Release(r.take(h)) }
