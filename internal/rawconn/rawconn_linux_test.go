//go:build linux

package rawconn

import (
	"errors"
	"os"
	"testing"
	"time"
)

// TestDeadlineCoalescing follows one direction's deadline through the
// calls fasthttp makes: the runtime's timer is re-armed only when the time
// asked for falls outside the armed one's slack.
func TestDeadlineCoalescing(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name    string
		armed   time.Time // before the call
		set     time.Time
		wantArm bool      // the runtime's deadline is changed
		wantAt  time.Time // to this, if changed (a zero time clears it)
	}{
		{"first deadline, armed past its time", time.Time{}, now.Add(80 * time.Second), true, now.Add(90 * time.Second)},
		{"pushed a little later: kept", now.Add(90 * time.Second), now.Add(85 * time.Second), false, time.Time{}},
		{"pushed past the armed time: re-armed", now.Add(90 * time.Second), now.Add(91 * time.Second), true, now.Add(91*time.Second + 91*time.Second/slackShare)},
		{"moved earlier than the slack allows: re-armed", now.Add(100 * time.Second), now.Add(time.Second), true, now.Add(time.Second + time.Second/slackShare)},
		{"cleared", now.Add(90 * time.Second), time.Time{}, true, time.Time{}},
		{"cleared when none is armed: nothing to do", time.Time{}, time.Time{}, false, time.Time{}},
		{"already past: applied as asked", now.Add(90 * time.Second), now.Add(-time.Second), true, now.Add(-time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := deadline{armed: tt.armed}
			var armed []time.Time
			if err := d.set(tt.set, func(at time.Time) error { armed = append(armed, at); return nil }); err != nil {
				t.Fatal(err)
			}
			if got := len(armed) == 1; got != tt.wantArm || len(armed) > 1 {
				t.Fatalf("armed %d times, want re-armed %v", len(armed), tt.wantArm)
			}
			if !tt.wantArm {
				if !d.armed.Equal(tt.armed) {
					t.Errorf("armed moved from %v to %v without a call", tt.armed, d.armed)
				}
				return
			}
			// The span is measured from the call's own clock reading:
			// allow for the time the test took to get there.
			if diff := armed[0].Sub(tt.wantAt); diff < -time.Second/slackShare || diff > time.Second/slackShare {
				t.Errorf("armed at %v, want about %v", armed[0].Sub(now), tt.wantAt.Sub(now))
			}
			if !d.armed.Equal(armed[0]) {
				t.Errorf("remembers %v, armed %v", d.armed, armed[0])
			}
		})
	}
}

// TestCoalescedDeadlineFires checks a real connection's read deadline:
// never before the time asked for, even when it was pushed forward within
// its slack.
func TestCoalescedDeadlineFires(t *testing.T) {
	_, s := pair(t)
	start := time.Now()
	s.SetReadDeadline(start.Add(60 * time.Millisecond))
	s.SetReadDeadline(start.Add(64 * time.Millisecond)) // within the slack: kept
	_, err := s.Read(make([]byte, 1))
	took := time.Since(start)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read = %v, want a timeout", err)
	}
	if took < 64*time.Millisecond || took > 2*time.Second {
		t.Errorf("timed out after %v, want from 64 ms on (slack 1/%d)", took, slackShare)
	}
	// Cleared, the connection reads again.
	c2, s2 := pair(t)
	s2.SetReadDeadline(time.Now().Add(time.Hour))
	s2.SetReadDeadline(time.Time{})
	c2.Write([]byte{1})
	if _, err := s2.Read(make([]byte, 1)); err != nil {
		t.Errorf("read after the deadline was cleared = %v", err)
	}
}
