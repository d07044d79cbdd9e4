package proxy

import (
	"context"
	"net"
	"sync"
	"time"
)

// hangUpPoll is how often a waiting request checks that its client is
// still connected. A request answered sooner never checks.
const hangUpPoll = 20 * time.Millisecond

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
	mu.Lock() // t is set before the first poll reads it
	defer mu.Unlock()
	t = time.AfterFunc(hangUpPoll, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		if peerClosed(conn) {
			cancel()
			return
		}
		t.Reset(hangUpPoll)
	})
	return ctx, func() {
		mu.Lock()
		stopped = true
		mu.Unlock()
		t.Stop()
		cancel()
	}
}
