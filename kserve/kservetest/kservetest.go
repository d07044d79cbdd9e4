// Package kservetest serves canned KServe v2 answers on loopback, for the
// benchmarks and tests that need an upstream costing next to nothing.
package kservetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/kserve"
)

// Reply builds the binary answer to a batch of rows rows.
type Reply func(rows int) (body []byte, headerLen int)

// Server starts a fasthttp server on 127.0.0.1 until tb ends and returns
// its address. A binary request gets reply(rows), rows read from its header
// (BatchRows), prebuilt for 1..maxBatch; a JSON request (no
// Inference-Header-Content-Length) gets jsonReply, or 400 when that is nil.
func Server(tb testing.TB, maxBatch int, reply Reply, jsonReply []byte) string {
	tb.Helper()
	bodies := make([][]byte, maxBatch+1)
	hls := make([]string, maxBatch+1)
	for rows := 1; rows <= maxBatch; rows++ {
		body, hl := reply(rows)
		bodies[rows], hls[rows] = body, strconv.Itoa(hl)
	}
	hlKey := []byte(kserve.HeaderContentLength)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			if len(ctx.Request.Header.PeekBytes(hlKey)) == 0 && jsonReply != nil {
				ctx.SetContentType("application/json")
				ctx.SetBody(jsonReply)
				return
			}
			rows := BatchRows(ctx.PostBody())
			if rows < 1 || rows > maxBatch {
				ctx.Error("bad batch", fasthttp.StatusBadRequest)
				return
			}
			ctx.Response.Header.SetBytesK(hlKey, hls[rows])
			ctx.SetContentType("application/octet-stream")
			ctx.SetBody(bodies[rows])
		},
		MaxRequestBodySize: 256 << 20,
	}
	go srv.Serve(ln)
	tb.Cleanup(func() {
		// Clients' pooled connections stay open: do not wait for them.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		srv.ShutdownWithContext(ctx)
	})
	return ln.Addr().String()
}

// BatchRows reads dimension 0 of the first "shape" in a request's JSON
// header, -1 when there is none.
func BatchRows(body []byte) int {
	const key = `"shape":[`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return -1
	}
	n := 0
	for _, c := range body[i+len(key):] {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// InstantUpstream is a dispatcher.Upstream that answers every batch at once
// with a prebuilt reply for its rows, after consuming the body as a real
// client would (assembled when small, streamed when large). Like Server, it
// answers a JSON body (a lone caller's request sent as it came) with
// jsonReply, or fails it when that is nil.
type InstantUpstream struct {
	replies []dispatcher.Reply // by rows
	json    dispatcher.Reply
	pool    sync.Pool
}

// NewInstantUpstream prebuilds reply(rows) for rows 1..maxBatch.
func NewInstantUpstream(maxBatch int, reply Reply, jsonReply []byte) *InstantUpstream {
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
func (u *InstantUpstream) Infer(model, version string, body dispatcher.Body) (*dispatcher.Reply, error) {
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
			rows = BatchRows(head[:n])
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			return nil, err
		}
	} else {
		bp := u.pool.Get().(*[]byte)
		buf, _ := body.AppendBody((*bp)[:0])
		if !isBatch {
			rows = BatchRows(buf)
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
