package power

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
)

// panicSource panics on its first reads, then reads as its script.
type panicSource struct {
	scriptSource
	panics atomic.Int32 // reads left that panic
	reads  chan struct{}
}

func (s *panicSource) Read(ctx context.Context) ([]Reading, error) {
	if s.panics.Add(-1) >= 0 {
		panic("injected source panic")
	}
	defer func() { s.reads <- struct{}{} }()
	return s.scriptSource.Read(ctx)
}

// A source that panics does not end the process: Run recovers, waits and
// polls again, and the meter keeps accounting once reads work.
func TestRunRecoversFromASourcePanic(t *testing.T) {
	clock := newFakeClock()
	src := &panicSource{scriptSource: scriptSource{clock: clock, next: []Reading{counterGPU("0", 100, 50)}}, reads: make(chan struct{}, 16)}
	src.panics.Store(2)
	m := newTestMeter(t, src, clock)
	ticks := make(chan time.Time)
	m.tick = func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }
	before := guard.Count("power")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	// Two runs panic at their first poll; the third polls.
	select {
	case <-src.reads:
	case <-time.After(10 * time.Second):
		t.Fatal("the meter never polled again after its source panicked")
	}
	if got := guard.Count("power") - before; got != 2 {
		t.Fatalf("counted %d power panics, want 2", got)
	}
	cancel()
	<-done
	if !m.Snapshot().Available || len(m.Snapshot().GPUs) != 1 {
		t.Fatalf("meter not accounting after the panics: %+v", m.Snapshot())
	}
}
