package dispatcher

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"time"
)

// DecisionTrace is an Observer that writes the decision trace, a measuring
// tool rather than a log: lines of "ms-since-start kind model key=value...",
// one per arrival (A: rows queued), decision (D: the key's rows, the oldest
// row's wait, batches in flight, idle sources or -1 when unknown, and the
// rule's answer: rows to send or ms until its wake-up), batch start (S:
// rows, calls) and end (E: rows, round trip, whether the upstream answered
// it all). scripts/budget-trace.py reads it. The lines are buffered and
// flushed at most every 100 ms, and by Flush.
type DecisionTrace struct {
	NopObserver // a call's answer is not traced
	mu          sync.Mutex
	w           *bufio.Writer
	t0          time.Time
	flush       time.Time
}

// NewDecisionTrace returns a trace written to w, its times counted from t0.
func NewDecisionTrace(w io.Writer, t0 time.Time) *DecisionTrace {
	return &DecisionTrace{w: bufio.NewWriterSize(w, 64<<10), t0: t0}
}

// Arrived implements Observer.
func (t *DecisionTrace) Arrived(a Arrival) { t.log(a.At, "A", a.Model, "rows=%d", a.Queued) }

// Decided implements Observer.
func (t *DecisionTrace) Decided(d Decision) {
	idle := d.IdleSources
	if !d.SourcesKnown {
		idle = -1
	}
	t.log(d.At, "D", d.Model, "rows=%d oldest=%.3f inflight=%d idle=%d send=%d wake=%.3f", d.Rows, ms(d.Oldest),
		d.InFlight, idle, d.Send, ms(max(d.WakeAt.Sub(d.At), 0)))
}

// BatchStarted implements Observer.
func (t *DecisionTrace) BatchStarted(b *Batch) {
	t.log(b.Started, "S", b.Model, "rows=%d calls=%d", b.Rows, len(b.Calls))
}

// BatchEnded implements Observer.
func (t *DecisionTrace) BatchEnded(b *Batch, e BatchEnd) {
	t.log(e.At, "E", b.Model, "rows=%d rt=%.3f ok=%v", e.Rows, ms(e.RoundTrip), e.OK)
}

func (t *DecisionTrace) log(now time.Time, kind, model, format string, a ...any) {
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
func (t *DecisionTrace) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.w.Flush()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
