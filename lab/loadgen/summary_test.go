package loadgen

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestSummarize(t *testing.T) {
	var recs []Record
	// 100 ok answers with latencies 1..100 ms, in shuffled order.
	for i := range 100 {
		ms := (i*37)%100 + 1
		recs = append(recs, Record{Start: time.Duration(i) * time.Millisecond, Latency: time.Duration(ms) * time.Millisecond,
			Status: 200, Lag: time.Duration(i) * time.Microsecond})
	}
	// Failures of each kind; their latencies must not count.
	recs = append(recs,
		Record{Latency: time.Hour, Status: 503, Err: KindStatus},
		Record{Latency: time.Hour, Status: 503, Err: KindStatus},
		Record{Latency: time.Hour, Status: 500, Err: KindStatus},
		Record{Latency: time.Hour, Err: KindTimeout},
		Record{Latency: time.Hour, Status: 200, Err: KindMismatch},
		Record{Err: KindDropped},
		Record{Err: KindDropped},
	)
	s := Summarize(recs, 2*time.Second, 4*time.Second)
	check := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("scheduled", float64(s.Scheduled), 107)
	check("sent", float64(s.Sent), 105)
	check("ok", float64(s.OK), 100)
	check("errors", float64(s.Errors), 5)
	check("dropped", float64(s.Dropped), 2)
	check("mean", s.MeanLatencyMs, 50.5)
	check("p50", s.P50LatencyMs, 50)
	check("p90", s.P90LatencyMs, 90)
	check("p99", s.P99LatencyMs, 99)
	check("max", s.MaxLatencyMs, 100)
	check("offered rps", s.OfferedRPS, 107.0/2)
	check("throughput rps", s.ThroughputRPS, 100.0/4)
	check("lag max ms", s.LagMaxMs, 0.099)
	wantStatus := map[int]int64{200: 101, 503: 2, 500: 1}
	if fmt.Sprint(s.StatusCounts) != fmt.Sprint(wantStatus) {
		t.Errorf("status counts %v, want %v", s.StatusCounts, wantStatus)
	}
	wantKinds := map[string]int64{"http_status": 3, "timeout": 1, "mismatch": 1}
	if fmt.Sprint(s.ErrorsByKind) != fmt.Sprint(wantKinds) {
		t.Errorf("errors by kind %v, want %v", s.ErrorsByKind, wantKinds)
	}
}

// With nothing ok, latency fields are zero and rates do not divide by zero.
func TestSummarizeNothingOK(t *testing.T) {
	s := Summarize([]Record{{Err: KindTimeout, Latency: time.Second}}, 0, 0)
	if s.Sent != 1 || s.Errors != 1 || s.OK != 0 {
		t.Fatalf("account %+v, want 1 sent, 1 error", s)
	}
	if s.MeanLatencyMs != 0 || s.P99LatencyMs != 0 || s.ThroughputRPS != 0 || s.OfferedRPS != 0 {
		t.Fatalf("latencies and rates %+v, want zeros", s)
	}
}

func TestWriteCSV(t *testing.T) {
	recs := []Record{
		{Start: 1500 * time.Microsecond, Latency: 2345678 * time.Nanosecond, Status: 200},
		{Start: 2 * time.Second, Latency: 10 * time.Second, Err: KindTimeout},
		{Start: 3 * time.Second, Latency: time.Millisecond, Status: 503, Err: KindStatus},
		{Start: 4 * time.Second, Err: KindDropped},
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, recs); err != nil {
		t.Fatal(err)
	}
	want := "start_ms,latency_ms,status,error\n" +
		"1.500,2.346,200,\n" +
		"2000.000,10000.000,0,timeout\n" +
		"3000.000,1.000,503,http_status\n" +
		"4000.000,0.000,0,dropped_by_client\n"
	if b.String() != want {
		t.Fatalf("CSV:\n%s\nwant:\n%s", b.String(), want)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteCSVReportsWriteErrors(t *testing.T) {
	err := WriteCSV(failingWriter{}, make([]Record, 10_000))
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("WriteCSV to a failing writer: %v, want the write error", err)
	}
}

// The record book hands out slots that never move, across chunk boundaries,
// and returns them in order.
func TestRecordBook(t *testing.T) {
	b := newRecordBook(1) // rounds up to 1024, then chunks of chunkLen
	var ptrs []*Record
	n := 1024 + chunkLen + 10
	for i := range n {
		r := b.take()
		r.Bytes = i
		ptrs = append(ptrs, r)
	}
	b.take().Bytes = -1
	b.untake()
	for i, p := range ptrs {
		if p.Bytes != i {
			t.Fatalf("slot %d moved: holds %d", i, p.Bytes)
		}
	}
	recs := b.records()
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if r.Bytes != i {
			t.Fatalf("record %d holds %d", i, r.Bytes)
		}
	}
}

func TestErrorKindNames(t *testing.T) {
	seen := map[string]bool{}
	for k := KindNone + 1; k < numKinds; k++ {
		name := k.String()
		if name == "" || seen[name] || strings.ContainsAny(name, ", \n\"") {
			t.Fatalf("kind %d has name %q: want unique, non-empty, CSV-safe", k, name)
		}
		seen[name] = true
	}
	if KindNone.String() != "" || numKinds.String() != "unknown" {
		t.Fatalf("KindNone = %q, out of range = %q", KindNone.String(), numKinds.String())
	}
}

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		err  error
		want ErrorKind
	}{
		{fasthttp.ErrTimeout, KindTimeout},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), KindTimeout},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, KindTimeout},
		{refused, KindConnection},
		{fasthttp.ErrConnectionClosed, KindConnection},
		{context.Canceled, KindCanceled},
		{errors.New("malformed response"), KindTransport},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			if got := classify(tt.err); got != tt.want {
				t.Fatalf("classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
