package proxy

import (
	"slices"
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
		r.lane.quit()
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
		r.lane.quit()
	}
}

// lane bounds how many large bodies (past Options.LargeBodyBytes) are
// copied at once: read from their clients, or written to the upstream. A
// burst of large bodies admitted together would otherwise be read all at
// once, each by a goroutine that finds bytes waiting at every read and
// runs its whole time slice, and a small request's goroutine waits behind
// all of them for a core; in the lane the others wait their turn before a
// byte of their body is read (a client waiting for "100 Continue" gets it
// when its turn comes). A body holds a turn while it is read, gives it
// back once read, and takes one again to be written upstream (Take,
// through dispatcher.Call.CopyTurn): a copy to the upstream does not
// overlap the next body's read (two bulk copies at once on two cores
// leave nothing to the small requests' hops), and the next body is read
// while this one is computed upstream and answered, rather than after.
// A body waiting to be written upstream goes before those waiting to be
// read: it is already in memory, and the sooner it leaves, the sooner its
// buffer serves the next. And a body starts to be read only while fewer
// than two per turn are in the proxy between their first byte read and
// their answer (one upstream, one read beside it): the next one then
// reads into a buffer an answered one gave back to the pool, rather than
// into new memory, whose page faults and zeroing take the cores from the
// small requests. A body that waits longer than the lane's wait to be
// read is refused 503 with Retry-After; one waiting to be written has
// been accepted, and waits for as long as it takes. Small bodies never
// enter it.
type lane struct {
	wait time.Duration

	mu    sync.Mutex
	free  int             // turns no one holds
	room  int             // bodies that may still start to be read before one is answered
	sends []chan struct{} // waiting to be written upstream, first come first
	reads []chan struct{} // waiting to be read, first come first
}

func newLane(n int, wait time.Duration) *lane {
	return &lane{free: n, room: 2 * n, wait: wait}
}

// enter takes a turn to read a body, and its room in the proxy until it
// is answered (out), waiting up to the lane's wait; false: none came.
func (l *lane) enter() bool {
	l.mu.Lock()
	if l.free > 0 && l.room > 0 && len(l.reads) == 0 {
		l.free--
		l.room--
		l.mu.Unlock()
		return true
	}
	turn := make(chan struct{}, 1)
	l.reads = append(l.reads, turn)
	l.mu.Unlock()
	if hook := testHookLaneWait.Load(); hook != nil {
		(*hook)()
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case <-turn:
		return true
	case <-t.C:
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if i := slices.Index(l.reads, turn); i >= 0 {
		l.reads = slices.Delete(l.reads, i, i+1)
		return false
	}
	return true // handed over as the wait ended: it is this body's
}

// Take takes a turn to write a body upstream (dispatcher.Turn), waiting
// for as long as it takes, ahead of the bodies waiting to be read.
func (l *lane) Take() {
	l.mu.Lock()
	if l.free > 0 {
		l.free--
		l.mu.Unlock()
		return
	}
	turn := make(chan struct{}, 1)
	l.sends = append(l.sends, turn)
	l.mu.Unlock()
	if hook := testHookLaneSend.Load(); hook != nil {
		(*hook)()
	}
	<-turn
}

// Give gives a turn back (dispatcher.Turn, and a body's read): to the
// first body waiting to be written, else to the first waiting to be read
// if there is room for it, else to the lane.
func (l *lane) Give() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.sends) > 0 {
		var next chan struct{}
		next, l.sends = l.sends[0], l.sends[1:]
		next <- struct{}{} // buffered: never blocks
		return
	}
	l.free++
	l.admitRead()
}

// quit gives back both what a body that entered to be read holds, its
// turn and its room, when it leaves before its read (its reservation
// dropped).
func (l *lane) quit() {
	l.Give()
	l.out()
}

// out gives back the room of a body that entered to be read, once it is
// answered (or gone): the first body waiting to be read may start if a
// turn is free.
func (l *lane) out() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.room++
	l.admitRead()
}

// admitRead hands a free turn and room to the first body waiting to be
// read, if both are there; l.mu held.
func (l *lane) admitRead() {
	if l.free == 0 || l.room == 0 || len(l.reads) == 0 {
		return
	}
	var next chan struct{}
	next, l.reads = l.reads[0], l.reads[1:]
	l.free--
	l.room--
	next <- struct{}{} // buffered: the waiter may be gone, as a read past its wait
}

// testNoLargePool, set only by benchmarks, reads large bodies into new
// buffers, as before the pool: the baseline the pool is measured against.
var testNoLargePool atomic.Bool

// testHookLaneWait, set only by tests, runs when a large body starts
// waiting for a slot of the lane: the happens-before signal that it waits.
var testHookLaneWait atomic.Pointer[func()]

// testHookLaneSend, set only by tests, runs when a read body starts
// waiting for a turn to be written upstream.
var testHookLaneSend atomic.Pointer[func()]
