package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"time"
)

// WriteIntervals writes the arrivals a run with this rate, seed and
// duration would offer as perf_analyzer's --request-intervals file: the
// gap before each request in whole microseconds, one a line. The first
// gap is the first arrival's offset. perf_analyzer then sends the same
// open-loop schedule as `ratebatch load`, so a policy can be measured with
// Triton's own client on any shape the load command knows (a trace's
// bursts included). It returns how many intervals it wrote.
func WriteIntervals(w io.Writer, rate Rate, seed uint64, d time.Duration) (int, error) {
	arr, err := newArrivals(rate, seed, d)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(w)
	var prev time.Duration
	n := 0
	for {
		off, ok := arr.next()
		if !ok {
			break
		}
		// Rounded gaps would drift from the schedule; gaps between rounded
		// offsets keep every arrival within half a microsecond of it.
		us := (off + time.Microsecond/2) / time.Microsecond * time.Microsecond
		if _, err := fmt.Fprintln(bw, int64((us-prev)/time.Microsecond)); err != nil {
			return n, fmt.Errorf("write intervals: %w", err)
		}
		prev = us
		n++
	}
	if n == 0 {
		return 0, fmt.Errorf("write intervals: no arrival in %v", d)
	}
	if err := bw.Flush(); err != nil {
		return n, fmt.Errorf("write intervals: %w", err)
	}
	return n, nil
}
