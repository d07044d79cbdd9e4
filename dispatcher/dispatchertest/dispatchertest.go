// Package dispatchertest stands in for the upstream of a dispatcher and
// measures it, for the benchmarks of the dispatcher and the doors.
package dispatchertest

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/kservetest"
)

// InstantUpstream is a dispatcher.Upstream that answers every batch at once
// with a prebuilt reply for its rows, after consuming the body as a real
// client would (assembled when small, streamed when large). Like
// kservetest.Server, it
// answers a JSON body (a lone caller's request sent as it came) with
// jsonReply, or fails it when that is nil.
type InstantUpstream struct {
	replies []dispatcher.Reply // by rows
	json    dispatcher.Reply
	pool    sync.Pool
}

// NewInstantUpstream prebuilds reply(rows) for rows 1..maxBatch.
func NewInstantUpstream(maxBatch int, reply kservetest.Reply, jsonReply []byte) *InstantUpstream {
	u := &InstantUpstream{replies: make([]dispatcher.Reply, maxBatch+1)}
	for rows := 1; rows <= maxBatch; rows++ {
		body, hl := reply(rows)
		u.replies[rows] = dispatcher.Reply{Status: 200, Body: body, HeaderLen: hl, Free: func() {}}
	}
	u.json = dispatcher.Reply{Status: 200, Body: jsonReply, HeaderLen: -1, Free: func() {}}
	u.pool.New = func() any { b := make([]byte, 0, 64<<10); return &b }
	return u
}

// Infer implements dispatcher.Upstream.
func (u *InstantUpstream) Infer(_ context.Context, model, version string, body dispatcher.Body, _ dispatcher.Outgoing) (*dispatcher.Reply, error) {
	rows := -1
	b, isBatch := body.(*kserve.Batch)
	if isBatch {
		rows = int(b.Rows)
	}
	if body.BodyLen() > 64<<10 {
		r := body.Reader()
		var head [4 << 10]byte
		n, err := io.ReadFull(r, head[:min(max(body.HeaderLen(), 0), len(head))])
		if err != nil {
			return nil, err
		}
		if !isBatch {
			rows = kservetest.BatchRows(head[:n])
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return nil, err
		}
	} else {
		bp := u.pool.Get().(*[]byte)
		buf, _ := body.AppendBody((*bp)[:0])
		if !isBatch {
			rows = kservetest.BatchRows(buf)
		}
		*bp = buf[:0]
		u.pool.Put(bp)
	}
	switch {
	case body.HeaderLen() < 0 && u.json.Body != nil:
		return &u.json, nil
	case body.HeaderLen() < 0 || rows < 1 || rows >= len(u.replies):
		return nil, fmt.Errorf("instant upstream: unexpected %T of %d rows (header length %d)", body, rows, body.HeaderLen())
	}
	return &u.replies[rows], nil
}

// Measure runs b.N ops over conc goroutines, each op by one of them, and
// reports the bytes allocated per request over the request's wire size
// (alloc-B/req-B) and, when d has sent batches meanwhile, their mean size
// (rows/batch; d may be nil).
func Measure(b *testing.B, d *dispatcher.Dispatcher, reqBytes, conc int, op func(worker int) error) {
	b.SetBytes(int64(reqBytes))
	b.ReportAllocs()
	s0 := firstQueue(d)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	runCallers(b, conc, op)
	b.StopTimer()
	runtime.ReadMemStats(&after)
	if s := firstQueue(d); s.BatchesSent > s0.BatchesSent {
		b.ReportMetric(float64(s.RowsSent-s0.RowsSent)/float64(s.BatchesSent-s0.BatchesSent), "rows/batch")
	}
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(reqBytes), "alloc-B/req-B")
}

func runCallers(b *testing.B, conc int, op func(worker int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	fail := func(err error) { failed.CompareAndSwap(nil, &err) } // err escapes here only
	for w := range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(w); err != nil {
					fail(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
}

// firstQueue is the state of d's one model queue (benchmarks batch one
// model).
func firstQueue(d *dispatcher.Dispatcher) dispatcher.Snapshot {
	if d != nil {
		for _, s := range d.Snapshots() {
			return s
		}
	}
	return dispatcher.Snapshot{}
}
