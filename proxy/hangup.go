package proxy

import (
	"context"
	"net"
	"sync"
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

// watchHangUp returns a context that ends when the client of conn hangs
// up, so that a call still queued is withdrawn instead of sent; stop ends
// the watch. fasthttp does not read a connection while its handler runs,
// so the watch peeks at the socket now and then.
func watchHangUp(conn net.Conn) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	if !canPeek(conn) {
		return ctx, cancel
	}
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	every := hangUpPoll
	mu.Lock() // t is set before the first poll reads it
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if peerClosed(conn) {
			cancel()
			return
		}
		every = min(2*every, hangUpPollMax)
		t.Reset(every)
	})
	return ctx, func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		t.Stop()
		cancel()
	}
}
