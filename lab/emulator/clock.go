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

// preciseFor is the longest sleep taken whole by preciseSleep: a longer one
// waits on the runtime's timer up to preciseFor before its end.
const preciseFor = 5 * time.Millisecond

// Sleep waits d as closely as the system allows. The runtime's timers wake
// through the network poller, whose wait takes milliseconds on Linux: on an
// idle process a 2.3 ms timer fires after 3.16 ms and a 3.2 ms one after
// 4.16 ms (measured on the project's 2-core VM), which turned the exact
// line tau(b) into a staircase of 1 ms steps (round trips of 2.4 ms for
// batches of 1-3, 3.4 ms for 4-6, 4.4 ms for 7-8 on googlenet-p4) and made
// batching look dearer than the server it emulates. The last preciseFor of
// a sleep is a blocking nanosleep (high-resolution, within about 0.1 ms),
// which holds an OS thread while it lasts; a cancelled context is seen
// before it, not during.
func (wallClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	end := time.Now().Add(d)
	if d > preciseFor {
		t := time.NewTimer(d - preciseFor)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	preciseSleep(time.Until(end))
	return nil
}
