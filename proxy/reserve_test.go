package proxy

import (
	"testing"
	"time"
)

// The lane hands a turn given back to a body waiting to be written
// upstream before one waiting to be read (it is accepted and in memory),
// each kind first come first served, and to the lane when no one waits; a
// read that waits past the lane's wait is refused, and leaves no claim.
func TestLaneSendsGoFirst(t *testing.T) {
	l := newLane(1, time.Hour)
	if !l.enter() {
		t.Fatal("a free lane refused a read")
	}
	waits := make(chan struct{}, 4)
	hook := func() { waits <- struct{}{} }
	testHookLaneWait.Store(&hook)
	testHookLaneSend.Store(&hook)
	defer func() { testHookLaneWait.Store(nil); testHookLaneSend.Store(nil) }()
	got := make(chan string, 4)
	waitFor := func(what string) {
		t.Helper()
		select {
		case <-waits:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never waited", what)
		}
	}
	go func() { l.enter(); got <- "read 1" }()
	waitFor("read 1")
	go func() { l.Take(); got <- "send 1" }()
	waitFor("send 1")
	go func() { l.enter(); got <- "read 2" }()
	waitFor("read 2")
	go func() { l.Take(); got <- "send 2" }()
	waitFor("send 2")
	for _, want := range []string{"send 1", "send 2", "read 1", "read 2"} {
		l.leave()
		select {
		case g := <-got:
			if g != want {
				t.Fatalf("the turn went to %s, want %s", g, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the turn given back reached no one; want %s", want)
		}
	}
	l.Give()
	l.mu.Lock()
	free, queued := l.free, len(l.reads)+len(l.sends)
	l.mu.Unlock()
	if free != 1 || queued != 0 {
		t.Fatalf("all given back: %d free, %d waiting; want 1 and 0", free, queued)
	}

	short := newLane(1, time.Millisecond)
	short.Take()
	if short.enter() {
		t.Fatal("a read got a turn that was held throughout its wait")
	}
	short.Give()
	short.mu.Lock()
	free, queued = short.free, len(short.reads)+len(short.sends)
	short.mu.Unlock()
	if free != 1 || queued != 0 {
		t.Fatalf("after a read refused: %d free, %d waiting; want 1 and 0", free, queued)
	}
}
