package guard

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestRecoveredCountsAndNamesThePanic(t *testing.T) {
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, nil))
	before := Count("test_recovered")
	var err error
	func() {
		defer func() { err = Recovered(log, "test_recovered", recover()) }()
		panic("boom")
	}()
	if got := Count("test_recovered"); got != before+1 {
		t.Fatalf("count %d, want %d", got, before+1)
	}
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "test_recovered") {
		t.Fatalf("error %v does not name the panic and its site", err)
	}
	if !strings.Contains(logged.String(), "guard_test.go") {
		t.Fatalf("the log has no stack of the panicking goroutine:\n%s", logged.String())
	}
	// A second panic at once logs no second stack.
	logged.Reset()
	func() {
		defer func() { Recovered(log, "test_recovered", recover()) }()
		panic("boom again")
	}()
	if strings.Contains(logged.String(), "guard_test.go") || !strings.Contains(logged.String(), "boom again") {
		t.Fatalf("second panic logged %q", logged.String())
	}
}

func TestLoopRestartsAfterPanicsAndEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	runs := make(chan int, 10)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop(ctx, slog.New(slog.DiscardHandler), "test_loop", func(ctx context.Context) {
			n++
			runs <- n
			if n < 3 {
				panic("loop body")
			}
			<-ctx.Done() // the third run lives until the end
		})
	}()
	for want := 1; want <= 3; want++ {
		select {
		case got := <-runs:
			if got != want {
				t.Fatalf("run %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("run %d never started", want)
		}
	}
	if Count("test_loop") != 2 {
		t.Fatalf("counted %d panics, want 2", Count("test_loop"))
	}
	cancel()
	<-done
}

func TestLoopEndsWhenItsBodyReturns(t *testing.T) {
	calls := 0
	Loop(context.Background(), nil, "test_return", func(context.Context) { calls++ })
	if calls != 1 {
		t.Fatalf("body ran %d times", calls)
	}
}
