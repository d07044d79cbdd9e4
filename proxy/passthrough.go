package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/internal/hostclient"
	"github.com/ratebatch/ratebatch/kserve"
)

// respBodyInMemory is the largest answer read whole before it is passed
// on; larger ones, and those of unknown length (server-sent events of
// generate_stream), are streamed to the client as they arrive.
const respBodyInMemory = 64 << 10

// newUpstreamClient returns the pass-through client to the upstream. The
// exchange runs on the request's own goroutine, as nginx runs it on its
// worker: no hand-offs between goroutines on the way.
func newUpstreamClient(up *url.URL) *fasthttp.HostClient {
	hc := hostclient.New(up)
	// Pass-through has no queue: one connection per request in flight.
	hc.MaxConns = 1 << 16
	hc.StreamResponseBody = true
	hc.MaxResponseBodySize = respBodyInMemory
	hc.RetryIfErr = retryStale
	hc.ConnPoolStrategy = fasthttp.LIFO // the warmest connection first
	return hc
}

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
	deadline := time.Now().Add(100 * 365 * 24 * time.Hour)
	if s.o.WriteTimeout > 0 {
		deadline = time.Now().Add(s.o.WriteTimeout)
	}
	resp := &ctx.Response
	if err := s.fwd.DoDeadline(out, resp, deadline); err != nil {
		resp.Reset()
		s.passFailed(ctx, err)
		return
	}
	h := &resp.Header
	dropHopHeaders(responseHeader{h})
	h.ResetConnectionClose() // the upstream's connection is not the client's
	if h.ContentLength() < 0 {
		resp.ImmediateHeaderFlush = true // events reach the client as they come
	}
}

func (s *Server) passFailed(ctx *fasthttp.RequestCtx, err error) {
	var ke *kserve.Error
	switch {
	case errors.As(err, &ke):
		writeError(ctx, ke.Status, ke.Msg)
	case errors.Is(err, errBodyTooLarge):
		s.door.Refused("body_too_large")
		writeError(ctx, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", s.o.MaxBodyBytes))
	case errors.Is(err, fasthttp.ErrTimeout):
		s.door.PassFailed()
		writeError(ctx, http.StatusGatewayTimeout, "upstream did not answer in time")
	default:
		s.door.PassFailed()
		s.log.Warn("passthrough failed", "path", string(ctx.Path()), "err", err)
		writeError(ctx, http.StatusBadGateway, "upstream unreachable: "+err.Error())
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
