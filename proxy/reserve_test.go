package proxy

import (
	"testing"
	"time"
)

// The lane hands a turn given back to a body waiting to be written
// upstream before one waiting to be read (it is accepted and in memory),
// each kind first come first served, and to the lane when no one waits;
// a body starts to be read only while fewer than two per turn are in the
// proxy unanswered, and the next waits for one to be answered (out) even
// with a turn free; a read that waits past the lane's wait is refused,
// and leaves no claim.
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
	state := func() (free, room, queued int) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.free, l.room, len(l.reads) + len(l.sends)
	}
	for _, step := range []struct {
		give func()
		want string
	}{{l.Give, "send 1"}, {l.Give, "send 2"}, {l.Give, "read 1"}, {l.Give, ""}, {l.out, "read 2"}} {
		step.give()
		if step.want == "" {
			// Two bodies in, none answered: the turn stays free, and the
			// second read waits for room.
			if free, room, queued := state(); free != 1 || room != 0 || queued != 1 {
				t.Fatalf("two bodies unanswered, a turn given back: %d free, room %d, %d waiting; want 1, 0, 1", free, room, queued)
			}
			continue
		}
		select {
		case g := <-got:
			if g != step.want {
				t.Fatalf("the turn went to %s, want %s", g, step.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the turn given back reached no one; want %s", step.want)
		}
	}
	l.Give()
	l.out()
	l.out()
	if free, room, queued := state(); free != 1 || room != 2 || queued != 0 {
		t.Fatalf("all given back: %d free, room %d, %d waiting; want 1, 2, 0", free, room, queued)
	}

	short := newLane(1, time.Millisecond)
	short.Take()
	if short.enter() {
		t.Fatal("a read got a turn that was held throughout its wait")
	}
	short.Give()
	short.mu.Lock()
	free, queued := short.free, len(short.reads)+len(short.sends)
	short.mu.Unlock()
	if free != 1 || queued != 0 {
		t.Fatalf("after a read refused: %d free, %d waiting; want 1 and 0", free, queued)
	}
}
