package dispatcher

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"time"
)

// DecisionLog is an Observer that writes the decision log, a measuring
// tool rather than the process's log: lines of "ms-since-start kind model key=value...",
// one per arrival (A: rows queued), decision (D: the key's rows, the oldest
// row's wait, batches in flight, idle sources or -1 when unknown, and the
// rule's answer: rows to send or ms until its wake-up), batch start (S:
// rows, calls) and end (E: rows, round trip, whether the upstream answered
// it all). scripts/budget-decisions.py and scripts/burst-decisions.py read it. The lines are buffered and
// flushed at most every 100 ms, and by Flush.
type DecisionLog struct {
	NopObserver // a call's answer is not logged
	mu          sync.Mutex
	w           *bufio.Writer
	t0          time.Time
	flush       time.Time
}

// NewDecisionLog returns a decision log written to w, its times counted from t0.
func NewDecisionLog(w io.Writer, t0 time.Time) *DecisionLog {
	return &DecisionLog{w: bufio.NewWriterSize(w, 64<<10), t0: t0}
}

// Arrived implements Observer.
func (t *DecisionLog) Arrived(a Arrival) { t.log(a.At, "A", a.Model, "rows=%d", a.Queued) }

// Decided implements Observer.
func (t *DecisionLog) Decided(d Decision) {
	idle := d.IdleSources
	if !d.SourcesKnown {
		idle = -1
	}
	t.log(d.At, "D", d.Model, "rows=%d oldest=%.3f inflight=%d idle=%d send=%d wake=%.3f", d.Rows, ms(d.Oldest),
		d.InFlight, idle, d.Send, ms(max(d.WakeAt.Sub(d.At), 0)))
}

// BatchStarted implements Observer.
func (t *DecisionLog) BatchStarted(b *Batch) {
	t.log(b.Started, "S", b.Model, "rows=%d calls=%d", b.Rows, len(b.Calls))
}

// BatchEnded implements Observer.
func (t *DecisionLog) BatchEnded(b *Batch, e BatchEnd) {
	t.log(e.At, "E", b.Model, "rows=%d rt=%.3f ok=%v", e.Rows, ms(e.RoundTrip), e.OK)
}

func (t *DecisionLog) log(now time.Time, kind, model, format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%.3f %s %s ", ms(now.Sub(t.t0)), kind, model)
	fmt.Fprintf(t.w, format, a...)
	t.w.WriteByte('\n')
	if now.Sub(t.flush) > 100*time.Millisecond {
		t.flush = now
		t.w.Flush()
	}
}

// Flush writes out what is buffered.
func (t *DecisionLog) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.w.Flush()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
