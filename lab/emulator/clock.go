package emulator

import (
	"context"
	"time"
)

// Clock is the emulator's source of time. Batch execution sleeps on it and
// every duration the emulator reports is measured with it, so a test can
// inject a virtual clock and assert exact figures without wall-time waits.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, whichever comes first, and
	// returns ctx.Err() in the second case.
	Sleep(ctx context.Context, d time.Duration) error
}

// wallClock is the real time.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
