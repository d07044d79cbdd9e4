package dispatcher

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// TraceEnv names the environment variable that, when set to a file path,
// makes every Dispatcher created without Options.Trace write its decision
// trace there (see Options.Trace). It is a measuring tool, not a log: one
// line per arrival, decision, batch start and batch end.
const TraceEnv = "RATEBATCH_DECISION_TRACE"

// tracer writes the decision trace: lines of "ms-since-start kind
// model key=value...", buffered, flushed at most every 100 ms.
type tracer struct {
	mu    sync.Mutex
	w     *bufio.Writer
	t0    time.Time
	flush time.Time
}

func newTracer(w io.Writer, now time.Time) *tracer {
	return &tracer{w: bufio.NewWriterSize(w, 64<<10), t0: now}
}

// traceFromEnv opens the file TraceEnv names, or returns nil.
func traceFromEnv() io.Writer {
	p := os.Getenv(TraceEnv)
	if p == "" {
		return nil
	}
	f, err := os.Create(p)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dispatcher: %s: %v; no decision trace\n", TraceEnv, err)
		return nil
	}
	return f
}

func (t *tracer) log(now time.Time, kind, model, format string, a ...any) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "%.3f %s %s ", float64(now.Sub(t.t0))/float64(time.Millisecond), kind, model)
	fmt.Fprintf(t.w, format, a...)
	t.w.WriteByte('\n')
	if now.Sub(t.flush) > 100*time.Millisecond {
		t.flush = now
		t.w.Flush()
	}
}

func (t *tracer) close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.w.Flush()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
