package proxy

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// A waiting request checks that its client is still connected after
// hangUpPoll, then at doubling intervals up to hangUpPollMax: a request
// answered sooner never checks, and under overload, when every request
// waits, the checks stay a few per request.
const (
	hangUpPoll    = 20 * time.Millisecond
	hangUpPollMax = 320 * time.Millisecond
)

// hangUps withdraws the queued calls of clients that hung up. fasthttp does
// not read a connection while its handler runs, so the watch peeks at the
// sockets of the calls that have waited. One timer serves every waiting
// call: it runs every hangUpPoll while any call waits and stops when none
// does, so a call costs a slot in a slice, not a timer of its own (a timer
// per request was a quarter of the batching path's allocations and woke
// the network poller when it was the earliest timer). A call joins the
// watch only when it waits (the first Done of its context): at low load the
// caller runs its own batch and finds its answer there, and never waits.
type hangUps struct {
	mu      sync.Mutex
	waiting []*hangUpWait
	timer   *time.Timer
	armed   bool
}

// hangUpWait is one call, and the context its wait runs under: Done closes
// when its client hangs up. Being its own context spares a request
// context.WithCancel's allocations. It is not reused: a poll that peeked at
// its socket outside the lock must not find another call in its place.
type hangUpWait struct {
	h     *hangUps
	conn  net.Conn
	since time.Time   // the call's arrival
	gone  atomic.Bool // done is closed

	// Under h.mu:
	done    chan struct{} // made by the first Done
	idx     int           // in h.waiting; -1 when not watched
	stopped bool
	next    time.Time
	every   time.Duration
}

func (w *hangUpWait) Deadline() (time.Time, bool) { return time.Time{}, false }
func (w *hangUpWait) Value(any) any               { return nil }

// Done starts the watch of the call's client, the first time it is called.
func (w *hangUpWait) Done() <-chan struct{} {
	h := w.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.done != nil {
		return w.done
	}
	w.done = make(chan struct{})
	if w.stopped {
		return w.done
	}
	w.next, w.every = w.since.Add(hangUpPoll), hangUpPoll
	w.idx = len(h.waiting)
	h.waiting = append(h.waiting, w)
	if !h.armed {
		h.armed = true
		if h.timer == nil {
			h.timer = time.AfterFunc(hangUpPoll, h.poll)
		} else {
			h.timer.Reset(hangUpPoll)
		}
	}
	return w.done
}

// Err is context.Canceled once the client hung up.
func (w *hangUpWait) Err() error {
	if w.gone.Load() {
		return context.Canceled
	}
	return nil
}

// hungUp ends the wait; a later call does nothing. Only a watched call
// hangs up, and its done channel is made.
func (w *hangUpWait) hungUp() {
	if w.gone.CompareAndSwap(false, true) {
		close(w.done)
	}
}

// watch returns a context that ends when the client of conn hangs up, so
// that a call still queued is withdrawn instead of sent, and the wait to
// pass to stop. since is when the call arrived. The watch starts when the
// context's Done is first called. A connection whose socket cannot be
// peeked at (not a syscall.Conn) is not watched.
func (h *hangUps) watch(conn net.Conn, since time.Time) (context.Context, *hangUpWait) {
	if !canPeek(conn) {
		return context.Background(), nil
	}
	w := &hangUpWait{h: h, conn: conn, since: since, idx: -1}
	return w, w
}

// stop ends the watch of w (nil: not watched), or forbids its start.
func (h *hangUps) stop(w *hangUpWait) {
	if w == nil {
		return
	}
	h.mu.Lock()
	w.stopped = true
	if i := w.idx; i >= 0 {
		last := len(h.waiting) - 1
		h.waiting[i] = h.waiting[last]
		h.waiting[i].idx = i
		h.waiting[last] = nil
		h.waiting = h.waiting[:last]
		w.idx = -1
	}
	h.mu.Unlock()
}

// poll peeks at the sockets of the calls due for a check, outside the lock
// (a peek is a system call), and withdraws those whose client is gone.
func (h *hangUps) poll() {
	now := time.Now()
	h.mu.Lock()
	var due []*hangUpWait
	for _, w := range h.waiting {
		if !now.Before(w.next) {
			due = append(due, w)
		}
	}
	h.mu.Unlock()
	for _, w := range due {
		if peerClosed(w.conn) {
			w.hungUp()
		}
	}
	h.mu.Lock()
	for _, w := range due {
		if w.idx >= 0 {
			w.every = min(2*w.every, hangUpPollMax)
			w.next = now.Add(w.every)
		}
	}
	if h.armed = len(h.waiting) > 0; h.armed {
		h.timer.Reset(hangUpPoll)
	}
	h.mu.Unlock()
}
