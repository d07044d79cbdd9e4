package loadgen

import (
	"bufio"
	"bytes"
	"math"
	"strconv"
	"testing"
	"time"
)

// The intervals file holds the load command's own schedule: as many
// arrivals as the rate gives over the duration, their gaps summing to the
// last arrival, and the same seed giving the same file.
func TestWriteIntervals(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate Rate
		d    time.Duration
	}{
		{"poisson 1000/s", ConstantRate(1000), 20 * time.Second},
		{"poisson 50/s", ConstantRate(50), 200 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a, b bytes.Buffer
			n, err := WriteIntervals(&a, tc.rate, 7, tc.d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := WriteIntervals(&b, tc.rate, 7, tc.d); err != nil || !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Fatalf("same seed, different files (err %v)", err)
			}
			var sum, lines int64
			sc := bufio.NewScanner(&a)
			for sc.Scan() {
				v, err := strconv.ParseInt(sc.Text(), 10, 64)
				if err != nil || v < 0 {
					t.Fatalf("line %d: %q is not a gap in microseconds", lines+1, sc.Text())
				}
				sum += v
				lines++
			}
			if lines != int64(n) {
				t.Fatalf("%d lines, reported %d", lines, n)
			}
			want := tc.rate.MaxRate() * tc.d.Seconds()
			if math.Abs(float64(n)-want) > 4*math.Sqrt(want) {
				t.Errorf("%d arrivals, want %.0f ± 4 sd", n, want)
			}
			if sum > tc.d.Microseconds() || float64(sum) < 0.99*float64(tc.d.Microseconds()) {
				t.Errorf("gaps sum to %d µs, want just under %d", sum, tc.d.Microseconds())
			}
		})
	}
	if _, err := WriteIntervals(&bytes.Buffer{}, ConstantRate(1), 1, time.Microsecond); err == nil {
		t.Error("no arrival in the duration: want an error")
	}
}
