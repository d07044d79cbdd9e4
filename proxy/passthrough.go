package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/hostclient"
	"github.com/ratebatch/ratebatch/kserve"
)

// respBodyInMemory is the largest answer read whole before it is passed
// on; larger ones, and those of unknown length (server-sent events of
// generate_stream), are streamed to the client as they arrive.
const respBodyInMemory = 64 << 10

// newUpstreamClient returns the pass-through client to the upstream. The
// exchange runs on the request's own goroutine, as nginx runs it on its
// worker: no hand-offs between goroutines on the way. Its connections
// bound the upstream's silence by idle (silentConn), not the exchange.
func newUpstreamClient(up *url.URL, idle time.Duration) *fasthttp.HostClient {
	hc := hostclient.New(up)
	if idle > 0 {
		dial := hc.Dial
		hc.Dial = func(addr string) (net.Conn, error) {
			c, err := dial(addr)
			if err != nil {
				return nil, err
			}
			return &silentConn{Conn: c, idle: idle}, nil
		}
	}
	// Pass-through has no queue: one connection per request in flight.
	hc.MaxConns = 1 << 16
	hc.StreamResponseBody = true
	hc.MaxResponseBodySize = respBodyInMemory
	hc.RetryIfErr = retryStale
	hc.ConnPoolStrategy = fasthttp.LIFO // the warmest connection first
	return hc
}

// silentConn is a pass-through connection to the upstream bounded by its
// silence: each read (and write) may wait idle for its bytes, from its
// start, and the deadlines fasthttp sets for a whole exchange are not
// used. Triton bounds no exchange; a generate_stream answer may last as
// long as the model generates, and only an upstream that says nothing for
// that long is given up. (Its reads and writes are the connection's own
// below, raw on Linux: moving a deadline later costs no system call.)
type silentConn struct {
	net.Conn
	idle time.Duration
}

func (c *silentConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *silentConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *silentConn) SetDeadline(time.Time) error      { return nil }
func (c *silentConn) SetReadDeadline(time.Time) error  { return nil }
func (c *silentConn) SetWriteDeadline(time.Time) error { return nil }

// retryStale retries once, whatever the method, when the failure is a
// kept-alive connection that the upstream had closed (a restarted Triton,
// an idle timeout): the request did not reach a live server. Requests
// with a streamed body are never retried (fasthttp cannot replay them).
func retryStale(_ *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	if attempts > 1 {
		return false, false
	}
	stale := errors.Is(err, fasthttp.ErrConnectionClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
	return false, stale
}

// hopHeaders are meaningful for one connection only (RFC 9110 7.6.1) and
// are not forwarded; neither is Expect, which the front door answered.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Expect"}

// header is what dropHopHeaders needs of fasthttp's request and response
// headers: requestHeader and responseHeader, which hold them without an
// allocation.
type header interface {
	PeekAll(key string) [][]byte
	Del(key string)
	// anyHop reports whether a hop-by-hop field may be there.
	anyHop() bool
}

// requestHeader is a client's header on its way upstream.
type requestHeader struct{ *fasthttp.RequestHeader }

// anyHop reads the fields as received: All would parse the cookies, and
// the Cookie header would then leave re-serialised. A header not read off
// the wire has no such record and may hold anything.
func (h requestHeader) anyHop() bool {
	if len(h.RawHeaders()) == 0 {
		return true
	}
	for k := range h.AllInOrder() {
		if isHopHeader(k) {
			return true
		}
	}
	return false
}

// responseHeader is the upstream's header on its way to the client.
type responseHeader struct{ *fasthttp.ResponseHeader }

func (h responseHeader) anyHop() bool {
	for k := range h.All() {
		if isHopHeader(k) {
			return true
		}
	}
	return false
}

// isHopHeader reports whether a field name is one of hopHeaders, in any
// spelling.
func isHopHeader(k []byte) bool {
	for _, name := range hopHeaders {
		if len(k) == len(name) && strings.EqualFold(string(k), name) {
			return true
		}
	}
	return false
}

// dropHopHeaders removes from h the hop-by-hop headers and those the
// Connection header names. Most exchanges carry no hop-by-hop field, and
// then nothing is deleted: each Del normalises its name and rescans the
// whole header, and a scan per hop-by-hop name on every exchange showed in
// the pass-through proxy's profile of user time. The check is a method of
// concrete types, not an iterator passed in: an iterator called through a
// func value put allocations on every exchange.
func dropHopHeaders(h header) {
	if !h.anyHop() {
		return
	}
	for _, v := range h.PeekAll("Connection") {
		for _, name := range strings.Split(string(v), ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// passthrough forwards the request to the upstream and its answer back,
// unchanged but for hop-by-hop headers.
func (s *Server) passthrough(ctx *fasthttp.RequestCtx) {
	s.door.Passed()
	out := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(out)
	if err := s.outgoing(ctx, out); err != nil {
		s.passFailed(ctx, err)
		return
	}
	s.forward(ctx, out)
}

// passBuffered passes through a request whose body was already read.
func (s *Server) passBuffered(ctx *fasthttp.RequestCtx, raw []byte) {
	s.door.Passed()
	out := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(out)
	s.outgoingHeader(ctx, out)
	out.SetBodyRaw(raw)
	s.forward(ctx, out)
}

// outgoing builds the upstream request: the client's header, and its body
// from memory when fasthttp holds it whole, else as a stream bounded by
// the body limit.
func (s *Server) outgoing(ctx *fasthttp.RequestCtx, out *fasthttp.Request) error {
	s.outgoingHeader(ctx, out)
	// -1 chunked, -2 none; never over the limit (headerReceived).
	n := ctx.Request.Header.ContentLength()
	stream := ctx.RequestBodyStream()
	switch {
	case stream == nil:
		out.SetBodyRaw(ctx.Request.Body())
	case n == 0 || n == -2:
	case n > 0 && n <= smallBody:
		// Read whole: headers and body leave in one write, and a stale
		// connection can be retried.
		buf := out.SwapBody(nil)
		buf = append(buf[:0], make([]byte, n)...)
		if _, err := io.ReadFull(stream, buf); err != nil {
			out.SwapBody(buf)
			return &kserve.Error{Status: http.StatusBadRequest,
				Msg: fmt.Sprintf("request body ends before its Content-Length %d: %v", n, err)}
		}
		out.SwapBody(buf)
	default:
		out.SetBodyStream(&limitedBody{r: stream, left: s.o.MaxBodyBytes}, n)
	}
	return nil
}

// smallBody is the largest body of known length that pass-through reads
// before forwarding.
const smallBody = 64 << 10

func (s *Server) outgoingHeader(ctx *fasthttp.RequestCtx, out *fasthttp.Request) {
	ctx.Request.Header.CopyTo(&out.Header)
	h := &out.Header
	dropHopHeaders(requestHeader{h})
	h.ResetConnectionClose()
	h.DisableNormalizing()
	h.SetNoDefaultContentType(true) // no Content-Type the client did not send
	if s.prefix != "" {
		h.SetRequestURI(s.prefix + string(ctx.Request.Header.RequestURI()))
	}
	if s.https {
		out.UseHostHeader = true // the client's Host, as sent
		out.URI().SetScheme("https")
	}
}

// forward makes the exchange and writes the upstream's answer; a streamed
// answer is copied to the client after the handler returns, and its
// connection goes back to the pool (or is closed, if the client left)
// when the copy ends.
func (s *Server) forward(ctx *fasthttp.RequestCtx, out *fasthttp.Request) {
	// The exchange is bounded by the upstream's silence (silentConn), not
	// its length.
	deadline := time.Now().Add(100 * 365 * 24 * time.Hour)
	resp := &ctx.Response
	err := s.fwd.DoDeadline(out, resp, deadline)
	if dispatcher.IsRefused(err) {
		err = s.holdRefused(ctx, out, resp, deadline, err)
	}
	if err != nil {
		resp.Reset()
		s.passFailed(ctx, err)
		return
	}
	h := &resp.Header
	dropHopHeaders(responseHeader{h})
	h.ResetConnectionClose() // the upstream's connection is not the client's
	if h.ContentLength() < 0 {
		resp.ImmediateHeaderFlush = true // events reach the client as they come
		paceWrites(ctx.Conn())
	}
}

// paceWrites makes the write timeout of the answer about to be written on
// c bound each of its writes (rawconn.Conn.PaceWrites): a stream its
// client keeps reading is never cut at limits.write_timeout, one whose
// client stops reading is. A connection that cannot pace (not raw TCP)
// keeps the timeout for the whole answer.
func paceWrites(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if p, ok := c.(interface{ PaceWrites() }); ok {
		p.PaceWrites()
	}
}

// errRefused is a pass-through exchange the upstream refused to connect
// to, past the hold for an inference request: 503 with Retry-After, as a
// batched call held for a refusing upstream gets (docs/RELIABILITY.md).
type errRefused struct {
	err  error
	held time.Duration
}

// Error says what failed, but not where: the upstream's address is the
// log's (hostclient.Cause).
func (e *errRefused) Error() string {
	if e.held > 0 {
		return fmt.Sprintf("upstream refusing connections, not back within %v (upstream_client.hold): %s", e.held.Round(time.Millisecond), hostclient.Cause(e.err))
	}
	return "upstream refusing connections: " + hostclient.Cause(e.err)
}

// holdRefused rides out an upstream that refuses connections (a Triton
// restarting, or not up yet when the proxy started and found no model to
// batch), as the dispatcher's outage hold does for batches: an inference
// request whose body can be sent again is tried again at jittered pauses
// growing to 100 ms (dispatcher.Backoff) until it gets through or
// Options.Hold passes, then fails with errRefused. Other requests, and a
// streamed body, which cannot be sent twice, fail with it at once.
func (s *Server) holdRefused(ctx *fasthttp.RequestCtx, out *fasthttp.Request, resp *fasthttp.Response, deadline time.Time, err error) error {
	if s.o.Hold <= 0 || out.IsBodyStream() || !ctx.IsPost() || !bytes.HasSuffix(ctx.Path(), []byte("/infer")) {
		return &errRefused{err: err}
	}
	start := time.Now()
	until := start.Add(s.o.Hold)
	if deadline.Before(until) {
		until = deadline
	}
	for attempt := 1; ; attempt++ {
		pause := dispatcher.Backoff(0, attempt)
		if time.Now().Add(pause).After(until) {
			return &errRefused{err: err, held: time.Since(start)}
		}
		time.Sleep(pause)
		resp.Reset()
		if err = s.fwd.DoDeadline(out, resp, deadline); !dispatcher.IsRefused(err) {
			return err
		}
	}
}

func (s *Server) passFailed(ctx *fasthttp.RequestCtx, err error) {
	var ke *kserve.Error
	var refused *errRefused
	switch {
	case errors.As(err, &ke):
		writeErrorAs(ctx, ke.Status, ke.Msg, kserve.ErrorContentType(ke))
	case errors.As(err, &refused):
		// The outage is logged once, by the upstream's health check, not
		// once per request.
		s.door.PassFailed()
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(int(s.o.RetryAfter.Round(time.Second)/time.Second), 1)))
		writeError(ctx, http.StatusServiceUnavailable, refused.Error())
	case errors.Is(err, errBodyTooLarge):
		s.door.Refused("body_too_large")
		writeError(ctx, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", s.o.MaxBodyBytes))
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, os.ErrDeadlineExceeded):
		s.door.PassFailed()
		writeError(ctx, http.StatusGatewayTimeout, "upstream did not answer in time")
	default:
		s.door.PassFailed()
		s.log.Warn("passthrough failed", "path", string(ctx.Path()), "err", err)
		writeError(ctx, http.StatusBadGateway, "upstream unreachable: "+hostclient.Cause(err)) // the address is in the log
	}
	// The request body may be partly unread: the connection cannot carry
	// another request.
	closeUnread(ctx)
}

var errBodyTooLarge = errors.New("request body exceeds the limit")

// limitedBody streams a request body of unknown or large length upstream
// and fails the exchange past the body limit.
type limitedBody struct {
	r    io.Reader
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errBodyTooLarge
	}
	return n, err
}
