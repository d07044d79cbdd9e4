package monitor

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/policy"
)

// The lateness of a timed wait is measured at the first decision at or
// after its end, less what the poller's whole milliseconds explain; a
// wait that ended at an arrival before its end, or a queue that emptied,
// measures nothing.
func TestTimerLateness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(v float64) time.Time { return t0.Add(time.Duration(v * float64(time.Millisecond))) }
	for _, tc := range []struct {
		name  string
		ds    []dispatcher.Decision
		waits int
		late  float64 // ms past the whole milliseconds
	}{
		{"a 2.3 ms wait ending at 3.5 ms: 0.5 ms past 3", []dispatcher.Decision{
			{At: ms(0), Rows: 1, WakeAt: ms(2.3)},
			{At: ms(3.5), Rows: 1, Send: 1},
		}, 1, 0.5},
		{"re-set at 1.6 ms by an arrival, ended at 2.45 ms: 0.15 past the poller's 2.6", []dispatcher.Decision{
			{At: ms(0), Rows: 1, WakeAt: ms(2.3)},
			{At: ms(1.6), Rows: 2, WakeAt: ms(2.3)},
			{At: ms(2.45), Rows: 2, Send: 2},
		}, 1, -0.15},
		{"ended by an arrival before its end", []dispatcher.Decision{
			{At: ms(0), Rows: 1, WakeAt: ms(2.3)},
			{At: ms(1), Rows: 2, Send: 2},
			{At: ms(5), Rows: 1, Send: 1},
		}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l timerLate
			for _, d := range tc.ds {
				l.observe(d)
			}
			got := l.take()
			if got.Waits != tc.waits {
				t.Fatalf("%d waits measured, want %d", got.Waits, tc.waits)
			}
			if tc.waits > 0 && math.Abs(got.Ms-tc.late) > 0.06 {
				t.Errorf("late %.3f ms, want %.3f", got.Ms, tc.late)
			}
		})
	}
}

// The monitor hands the lateness to the plan and shows it on /status, and
// shows the phase of a policy that has one (the budget's: learning first).
func TestMonitorShowsLatenessAndPhase(t *testing.T) {
	pol, err := policy.New(policy.NameBudget, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	m, err := New(Config{Model: "m", Policy: pol, Window: time.Second, MaxBatch: 8, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		at := now.Add(time.Duration(i) * 10 * time.Millisecond)
		m.Decided(dispatcher.Decision{At: at, Rows: 1, WakeAt: at.Add(1500 * time.Microsecond)})
		m.Decided(dispatcher.Decision{At: at.Add(2200 * time.Microsecond), Rows: 1, Send: 1})
	}
	m.Arrived(dispatcher.Arrival{Rows: 1})
	now = now.Add(time.Second)
	m.Tick()
	s := m.Snapshot()
	if s.Outside.TimedWaits != 60 || math.Abs(s.Outside.TimerLateMs-0.2) > 0.03 {
		t.Errorf("timer lateness %.3f ms over %d waits, want 0.2 over 60", s.Outside.TimerLateMs, s.Outside.TimedWaits)
	}
	if s.Phase != policy.PhaseLearning || !strings.Contains(s.PhaseReason, "of 1,000 round trips") {
		t.Errorf("phase %q (%q), want learning", s.Phase, s.PhaseReason)
	}
}
