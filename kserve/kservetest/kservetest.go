// Package kservetest serves canned KServe v2 answers on loopback, for the
// benchmarks and tests that need an upstream costing next to nothing.
package kservetest

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

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
