package monitor

import (
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Each event the dispatcher tells teaches the monitor what it carries, and
// a batch the upstream did not answer in full teaches nothing.
func TestMonitorLearnsFromTheDispatchersEvents(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	b := &dispatcher.Batch{Model: "m"}
	tests := []struct {
		name  string
		event func(m *Monitor)
		check func(m *Monitor, before int) (got, want any)
	}{
		{"arrivals count their rows", func(m *Monitor) {
			m.Arrived(dispatcher.Arrival{Model: "m", Rows: 3})
			m.Arrived(dispatcher.Arrival{Model: "m", Rows: 2})
		}, func(m *Monitor, _ int) (any, any) { return m.total.Load(), int64(5) }},
		{"decisions count those open to a partner", func(m *Monitor) {
			m.Decided(dispatcher.Decision{SourcesKnown: true, IdleSources: 0})
			m.Decided(dispatcher.Decision{SourcesKnown: true, IdleSources: 2})
			m.Decided(dispatcher.Decision{SourcesKnown: false})
		}, func(m *Monitor, _ int) (any, any) {
			return [2]int64{m.decisions.Load(), m.openDecisions.Load()}, [2]int64{3, 2}
		}},
		{"a lone batch's hold", func(m *Monitor) {
			m.BatchEnded(b, dispatcher.BatchEnd{Rows: 1, Calls: 1, OK: true, RoundTrip: ms(5), Hold: ms(0.5)})
		}, func(m *Monitor, before int) (any, any) {
			return [2]any{m.Extra().HoldLoneMs, m.est.Observed() - before}, [2]any{0.5, 1}
		}},
		{"a failed batch teaches nothing", func(m *Monitor) {
			m.BatchEnded(b, dispatcher.BatchEnd{Rows: 1, Calls: 1, OK: false, Hold: ms(9)})
		}, func(m *Monitor, before int) (any, any) {
			return [2]any{m.Extra(), m.est.Observed() - before}, [2]any{smdp.Extra{}, 0}
		}},
		{"a merged caller's wait after its batch", func(m *Monitor) {
			m.Answered(dispatcher.Answer{Calls: 3, After: ms(0.25), Latency: ms(4), Arrived: m.now()})
		}, func(m *Monitor, _ int) (any, any) { return m.Extra().AfterMergedMs, 0.25 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol, err := policy.New("adhoc", policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(Config{Model: "m", Policy: pol, Window: time.Second, MaxBatch: 8})
			if err != nil {
				t.Fatal(err)
			}
			before := m.est.Observed()
			tt.event(m)
			if got, want := tt.check(m, before); got != want {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}
