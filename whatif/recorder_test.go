package whatif

import (
	"bytes"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/lab/trace"
)

// A packed word gives back its time to the microsecond, its rows and its
// caller, or its latency (to the microsecond, and to the millisecond past
// half a second), also across the clock's wrap.
func TestPackedWords(t *testing.T) {
	epoch := time.Unix(1000, 0)
	c := clock{epoch: epoch}
	for _, at := range []time.Time{epoch.Add(time.Second), epoch.Add(37*time.Hour + 1234567*time.Microsecond), epoch.Add(timeMask*time.Microsecond + 5*time.Second)} {
		for _, tc := range []struct {
			rows int
			kind dispatcher.CallerKind
		}{{1, dispatcher.CallerOpen}, {8, dispatcher.CallerClosed}, {65536, dispatcher.CallerLone}} {
			v := c.pack(at, arrivalPayload(tc.rows, uint8(tc.kind)))
			got, p := c.unpack(v, at.Add(3*time.Minute))
			rows, kind := arrivalOf(p)
			if !got.Equal(at) || rows != tc.rows || dispatcher.CallerKind(kind) != tc.kind {
				t.Errorf("packed %v, %d rows, %v: got %v, %d rows, %v", at, tc.rows, tc.kind, got, rows, dispatcher.CallerKind(kind))
			}
		}
	}
	if rows, _ := arrivalOf(arrivalPayload(1<<20, 0)); rows != 1<<16 {
		t.Errorf("a million rows kept as %d, want the most a word holds, 65536", rows)
	}
	for _, tc := range []struct{ in, want time.Duration }{
		{1234 * time.Microsecond, 1234 * time.Microsecond},
		{latencyCoarse - time.Microsecond, latencyCoarse - time.Microsecond},
		{2*time.Second + 345678*time.Microsecond, 2345 * time.Millisecond},
		{time.Hour, (latencyFine - 1) * time.Millisecond},
	} {
		if got := latencyOf(latencyPayload(tc.in)); got != tc.want {
			t.Errorf("latency %v kept as %v, want %v", tc.in, got, tc.want)
		}
	}
}

// The recorder keeps the last Arrivals arrivals of at most Models models:
// a window longer than it kept starts at its oldest arrival, and says so.
func TestRecorderBounds(t *testing.T) {
	now := time.Unix(5000, 0)
	r := NewRecorder(Options{Arrivals: 100, Models: 2, Now: func() time.Time { return now }})
	for i := range 250 {
		now = now.Add(10 * time.Millisecond)
		for _, m := range []string{"a", "b", "c"} {
			r.Arrived(dispatcher.Arrival{Model: m, At: now, Rows: 1 + i%3})
		}
	}
	tr, err := r.traffic("a", time.Minute, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.arrivals) != 100 || !tr.cut || !tr.from.Equal(tr.arrivals[0].at) || !tr.arrivals[99].at.Equal(now) {
		t.Errorf("%d arrivals kept, cut %v, from %v: want the last 100, from the oldest", len(tr.arrivals), tr.cut, tr.from)
	}
	if _, err := r.traffic("c", time.Minute, true); err == nil {
		t.Error("a third model was recorded beyond Models 2")
	}
	if unsafe.Sizeof(batch{}) != batchBytes || unsafe.Sizeof(sample{}) != sampleBytes {
		t.Errorf("a batch is %d bytes, a sample %d: Options.Bytes counts %d and %d", unsafe.Sizeof(batch{}), unsafe.Sizeof(sample{}), batchBytes, sampleBytes)
	}
	if got := (Options{}).Bytes(); got > 6<<20 {
		t.Errorf("the default rings hold %d bytes, want under 6 MiB", got)
	}
}

// The export is a rate series that the load generator and the simulator
// read: per bin, the calls that came in it, so that its integral is the
// calls counted, and its comments say whose and which callers.
func TestWriteTraceReadsBack(t *testing.T) {
	now := time.Unix(5000, 0)
	r := NewRecorder(Options{Now: func() time.Time { return now }})
	r.model("m", now) // as its first arrival does, before the first sample
	r.Sample()
	// Bursts: 50 calls in each of the first 100 ms of a second, 2 in the
	// rest of it, for 10 s.
	var calls int
	for s := range 10 {
		base := time.Unix(5000, 0).Add(time.Duration(s) * time.Second)
		for i := range 50 {
			r.Arrived(dispatcher.Arrival{Model: "m", At: base.Add(time.Duration(i) * 2 * time.Millisecond), Rows: 1, Caller: dispatcher.CallerOpen})
		}
		r.Arrived(dispatcher.Arrival{Model: "m", At: base.Add(300 * time.Millisecond), Rows: 1, Caller: dispatcher.CallerClosed})
		r.Arrived(dispatcher.Arrival{Model: "m", At: base.Add(700 * time.Millisecond), Rows: 1, Caller: dispatcher.CallerClosed})
		calls += 52
		now = base.Add(time.Second)
		r.Sample()
	}
	var buf bytes.Buffer
	if err := r.WriteTrace(&buf, "m", time.Minute, 100*time.Millisecond); err != nil { // since the record began
		t.Fatal(err)
	}
	text := buf.String()
	if !strings.Contains(text, "# ratebatch arrivals of model m") || !strings.Contains(text, "520 calls: 500 open-loop, 20 closed-loop") {
		t.Errorf("the comments do not say whose arrivals and which callers:\n%.600s", text)
	}
	s, err := trace.ReadCSV(strings.NewReader(text), "m.arrivals.csv")
	if err != nil {
		t.Fatalf("the load generator cannot read the export: %v\n%.600s", err, text)
	}
	if got := s.Expected(); got < float64(calls)-0.5 || got > float64(calls)+0.5 {
		t.Errorf("the series holds %.2f calls, want %d", got, calls)
	}
	if on, off := s.RateAt(50*time.Millisecond), s.RateAt(500*time.Millisecond); on != 500 || off != 0 {
		t.Errorf("rates %v in a burst's bin and %v between, want 500/s and 0", on, off)
	}
	if err := r.WriteTrace(&buf, "m", time.Minute, time.Microsecond); err == nil {
		t.Error("a bin of a microsecond was accepted")
	}
	if err := r.WriteTrace(&buf, "nobody", time.Minute, time.Second); err == nil {
		t.Error("a model never recorded was exported")
	}
}

// BenchmarkRecorder is what the recorder adds to a request on the request
// path: its arrival and its answer, and a batch's end for every call
// (batches of one, the most there can be), from concurrent callers.
func BenchmarkRecorder(b *testing.B) {
	r := NewRecorder(Options{})
	now := time.Now()
	batch := &dispatcher.Batch{Model: "m"}
	r.Arrived(dispatcher.Arrival{Model: "m", At: now, Rows: 1}) // the rings, made once
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Arrived(dispatcher.Arrival{Model: "m", At: now, Rows: 1, Caller: dispatcher.CallerOpen})
			r.BatchEnded(batch, dispatcher.BatchEnd{At: now, Rows: 1, Calls: 1, OK: true, RoundTrip: time.Millisecond})
			r.Answered(dispatcher.Answer{Model: "m", Arrived: now, Latency: time.Millisecond, Calls: 1})
		}
	})
}
