package proxy

import (
	"sync"
	"sync/atomic"
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
	lane  *lane // given back with a stale or dropped reservation's slot

	mu        sync.Mutex
	m         map[*fasthttp.RequestHeader]reservation
	lastSweep time.Time
}

// reservation is what a request's headers were given: n bytes of the
// budget; for a body past membudget.MinClass, n is its size class and buf
// a pooled buffer of that capacity when the budget had one idle (a lease);
// inLane when it holds a slot of the large-body lane.
type reservation struct {
	n      int64
	leased bool
	buf    []byte
	inLane bool
	at     time.Time
}

func newReservations(b *membudget.Budget, readTimeout time.Duration, l *lane) *reservations {
	stale := 2 * time.Minute
	if readTimeout > 0 {
		stale = readTimeout + 10*time.Second
	}
	return &reservations{b: b, stale: stale, lane: l, m: map[*fasthttp.RequestHeader]reservation{}}
}

// reserve takes room for h's body of declared bytes (declared+1: the
// last read sees EOF without growing), reporting whether it fits; a
// reservation h still had is given back first. A body past
// membudget.MinClass leases its size class (membudget.Budget.Lease), with
// a pooled buffer to read into when one lies idle.
func (r *reservations) reserve(h *fasthttp.RequestHeader, declared int64) bool {
	r.drop(h)
	v := reservation{n: declared + 1}
	if v.n > membudget.MinClass && !testNoLargePool.Load() {
		l, ok := r.b.Lease(v.n)
		if !ok {
			return false
		}
		v.n, v.leased, v.buf = l.N, true, l.Buf
	} else if !r.b.Acquire(v.n) {
		return false
	}
	now := time.Now()
	v.at = now
	r.mu.Lock()
	r.m[h] = v
	var stale []reservation
	if now.Sub(r.lastSweep) > time.Second {
		r.lastSweep = now
		for k, v := range r.m {
			if now.Sub(v.at) > r.stale {
				delete(r.m, k)
				stale = append(stale, v)
			}
		}
	}
	r.mu.Unlock()
	for _, v := range stale {
		r.giveBack(v)
	}
	return true
}

// enterLane makes h's reservation wait for a slot of the large-body lane;
// false: none came within the lane's wait, and the reservation is given
// back.
func (r *reservations) enterLane(h *fasthttp.RequestHeader) bool {
	if !r.lane.enter() {
		r.drop(h)
		return false
	}
	r.mu.Lock()
	v, ok := r.m[h]
	if ok {
		v.inLane = true
		r.m[h] = v
	}
	r.mu.Unlock()
	if !ok { // swept meanwhile (it cannot be: the wait is shorter than stale)
		r.lane.leave()
	}
	return ok
}

// take hands h's reservation over to its handler: the bytes, now the
// caller's to release, its buffer and its lane slot (zero if none).
func (r *reservations) take(h *fasthttp.RequestHeader) reservation {
	r.mu.Lock()
	v, ok := r.m[h]
	if ok {
		delete(r.m, h)
	}
	r.mu.Unlock()
	return v
}

// drop gives h's reservation back, if it has one.
func (r *reservations) drop(h *fasthttp.RequestHeader) { r.giveBack(r.take(h)) }

func (r *reservations) giveBack(v reservation) {
	r.b.Release(v.n)
	if v.inLane {
		r.lane.leave()
	}
}

// lane bounds how many large bodies (past Options.LargeBodyBytes) are in
// the proxy at once, from the first byte read until answered. A burst of
// large bodies admitted together would otherwise be read all at once,
// each by a goroutine that finds bytes waiting at every read and runs its
// whole time slice, and a small request's goroutine waits behind all of
// them for a core; in the lane the others wait their turn before a byte
// of their body is read (a client waiting for "100 Continue" gets it when
// its turn comes). The turn lasts until the answer, not only the read:
// the next body's read then does not overlap this one's copy to the
// upstream (two bulk copies at once on two cores leave nothing to the
// small requests' hops), and it reads into this one's buffer, given back
// to the pool just before the turn passes, rather than into new memory.
// A body that waits longer than the lane's wait is refused 503 with
// Retry-After. Small bodies never enter it.
type lane struct {
	slots chan struct{}
	wait  time.Duration
}

func newLane(n int, wait time.Duration) *lane {
	return &lane{slots: make(chan struct{}, n), wait: wait}
}

// enter takes a slot, waiting up to the lane's wait; false: none came.
func (l *lane) enter() bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	if hook := testHookLaneWait.Load(); hook != nil {
		(*hook)()
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	}
}

// leave gives a slot back.
func (l *lane) leave() { <-l.slots }

// testNoLargePool, set only by benchmarks, reads large bodies into new
// buffers, as before the pool: the baseline the pool is measured against.
var testNoLargePool atomic.Bool

// testHookLaneWait, set only by tests, runs when a large body starts
// waiting for a slot of the lane: the happens-before signal that it waits.
var testHookLaneWait atomic.Pointer[func()]
