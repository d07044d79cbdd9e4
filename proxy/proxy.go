// Package proxy is ratebatch's front door: Triton's HTTP API served on
// fasthttp, with a chi route table that picks out inference requests of
// batched models for the dispatcher and passes everything else through to
// the upstream unchanged. It owns admission (body limits, timeouts,
// backpressure answers) and every client-facing error; it never decides
// batch sizes.
//
// The data port runs on fasthttp rather than net/http: net/http's
// per-request goroutines, contexts and background reads cost more CPU per
// request than a batch's merging and splitting (docs/ARCHITECTURE.md,
// "Principles").
package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/go-chi/chi/v5"
	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/linger"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/internal/rawconn"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/tracing"
)

// Forwarder sends a pass-through request upstream; *fasthttp.HostClient is
// one. Tests stand in for Triton with their own.
type Forwarder interface {
	DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error
}

// Options configure a Server.
type Options struct {
	Upstream *url.URL
	Batcher  door.Batcher
	// Tracer, when set, gives each batched request a span in its client's
	// trace (package tracing); nil: tracing off.
	Tracer       *tracing.Tracer
	Discoverer   door.Discoverer
	MaxBodyBytes int64
	RetryAfter   time.Duration
	// Hold is how long a pass-through inference request waits for an
	// upstream that refuses connections (upstream_client.hold, as batches
	// wait in the dispatcher) before it gets 503; 0: no wait.
	Hold time.Duration

	// Timeouts of the data port: ReadHeaderTimeout for a request's headers,
	// ReadTimeout for its body, WriteTimeout for the answer (it also bounds
	// a pass-through exchange), IdleTimeout between keep-alive requests.
	// Zero: none.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration

	// Health, when set, answers the readiness endpoints not ready (400, as
	// Triton does) while the outlier detector finds the model, or the whole
	// upstream, failing; otherwise they pass through to Triton.
	Health door.Health

	// Memory, when set, is the budget (limits.memory) the bodies of
	// batched inference requests, from their first byte until answered,
	// and their answers are admitted against: a request that would pass it
	// gets 503 with Retry-After before its body is read further, and its
	// connection is closed. nil: no budget.
	Memory *membudget.Budget

	// The large-body lane (with a Memory budget only): at most
	// LargeBodyLanes bodies declared past LargeBodyBytes are copied at
	// once, read from their clients or written upstream; the others wait
	// for a turn before their body is read, up to LargeBodyWait, and are
	// refused 503 with Retry-After past it. Zero values take the defaults
	// (DefaultLargeBodyBytes, half the cores (GOMAXPROCS) but at least
	// one, DefaultLargeBodyWait); LargeBodyLanes < 0: no lane.
	LargeBodyBytes int64
	LargeBodyLanes int
	LargeBodyWait  time.Duration

	// Forward reaches the upstream for pass-through; nil: a fasthttp client.
	Forward Forwarder
	Metrics *Metrics
	Logger  *slog.Logger

	// LoadReport, when set, gives the endpoint-load-metrics header (the
	// ORCA load report, package orca) put on every answer, in the form
	// the request's endpoint-load-metrics-format header names.
	LoadReport func(format []byte) string
}

// Server serves Triton's HTTP API.
type Server struct {
	o      Options
	routes *chi.Mux
	fwd    Forwarder
	prefix string // the upstream URL's path, put before every pass-through path
	https  bool
	srv    *fasthttp.Server
	log    *slog.Logger
	m      *Metrics
	// hangUps withdraws queued calls whose clients hung up.
	hangUps hangUps
	// res carries memory reserved at the headers to the handler; nil
	// without a budget.
	res *reservations
	// lane bounds the large bodies copied at once; nil: none.
	lane *lane
}

// Defaults of the large-body lane. A 4 MiB body is a batch of seven
// 224x224 FP32 images. The lanes are half the cores (at least one), so
// that large bodies in the proxy leave the other half to everything else:
// small requests beside large bodies keep their tail (docs/RELIABILITY.md,
// "Memory: a budget for requests and answers", BenchmarkSmallBesideLarge).
// The wait bounds what a large request may be held
// before its body is read (the copies before it), well within a client's
// patience for a body it is about to send.
const (
	DefaultLargeBodyBytes = 4 << 20
	DefaultLargeBodyWait  = 10 * time.Second
)

// maxHeaderBytes bounds a request's headers (431 past it); fasthttp reads
// them within one buffer of this size per connection.
const maxHeaderBytes = 16 << 10

// New returns the front door.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	s := &Server{o: o, log: o.Logger, m: o.Metrics, fwd: o.Forward,
		prefix: strings.TrimSuffix(o.Upstream.EscapedPath(), "/"), https: o.Upstream.Scheme == "https"}
	if s.fwd == nil {
		s.fwd = newUpstreamClient(o.Upstream)
	}
	if o.Memory != nil {
		if o.LargeBodyBytes <= 0 {
			o.LargeBodyBytes = DefaultLargeBodyBytes
		}
		if o.LargeBodyLanes == 0 {
			o.LargeBodyLanes = max(1, runtime.GOMAXPROCS(0)/2)
		}
		if o.LargeBodyWait <= 0 {
			o.LargeBodyWait = DefaultLargeBodyWait
		}
		if o.ReadTimeout <= 0 && o.ReadHeaderTimeout > 0 {
			// Without a body timeout the headers' read deadline stays
			// set while a body waits for its turn: the wait must end
			// well before it.
			o.LargeBodyWait = min(o.LargeBodyWait, o.ReadHeaderTimeout/2)
		}
		s.o = o
		if o.LargeBodyLanes > 0 {
			s.lane = newLane(o.LargeBodyLanes, o.LargeBodyWait)
		}
		s.res = newReservations(o.Memory, o.ReadTimeout, s.lane)
	}
	// The route table only: handlers are looked up with Find, so the
	// patterns stay chi's and a request never becomes an *http.Request.
	s.routes = chi.NewRouter()
	s.routes.Post("/v2/models/{model}/infer", http.NotFound)
	s.routes.Post("/v2/models/{model}/versions/{version}/infer", http.NotFound)
	s.srv = &fasthttp.Server{
		Handler:                      s.ServeFastHTTP,
		ErrorHandler:                 s.serverError,
		ReadTimeout:                  o.ReadHeaderTimeout,
		WriteTimeout:                 o.WriteTimeout,
		IdleTimeout:                  o.IdleTimeout,
		ReadBufferSize:               maxHeaderBytes,
		StreamRequestBody:            true, // memory follows the bytes received, not a declared length
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		CloseOnShutdown:              true,
		Logger:                       fasthttpLogger{o.Logger},
	}
	s.srv.HeaderReceived = s.headerReceived
	return s
}

// declaredTooLarge marks, inside the proxy only, a request whose declared
// Content-Length is over the limit. fasthttp would otherwise wait for the
// start of a body it then refuses; the handler answers 413 at once.
const declaredTooLarge = "X-Ratebatch-Declared-Too-Large"

// headerReceived runs once a request's headers are in: the body gets its
// own read timeout, and a body declared over the limit is not read.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	h.Del(declaredTooLarge) // only the proxy sets them
	h.Del(declaredOverBudget)
	h.Del(declaredLaneWait)
	if s.res != nil {
		s.res.drop(h) // a previous request's on this connection, if it never reached a handler
	}
	n := h.ContentLength()
	switch {
	case n > 0 && int64(n) > s.o.MaxBodyBytes:
		h.SetContentLength(0)
		h.Set(declaredTooLarge, strconv.Itoa(n))
	case n > 0 && s.res != nil && s.batched(h):
		// Too large for the budget's room now (else reserved: see
		// reservations), or, a large body, no turn in the lane within its
		// wait (else the turn is its own until its body is read). A client
		// that waits for "100 Continue" is refused before it sends a byte
		// of the body (no 100 is sent: the Expect goes); any other has
		// begun sending it, and is refused once its body is read and
		// thrown away (refuse), so that it reads the refusal rather than a
		// reset.
		mark := ""
		switch {
		case !s.res.reserve(h, int64(n)):
			mark = declaredOverBudget
		case s.lane != nil && int64(n) > s.o.LargeBodyBytes && !s.res.enterLane(h):
			mark = declaredLaneWait
		}
		if mark != "" {
			if len(h.Peek("Expect")) > 0 {
				h.Del("Expect")
				h.SetContentLength(0)
			}
			h.Set(mark, strconv.Itoa(n))
		}
	}
	return fasthttp.RequestConfig{ReadTimeout: s.o.ReadTimeout}
}

// declaredLaneWait marks, inside the proxy only, a large request that
// found no turn in the large-body lane within its wait.
const declaredLaneWait = "X-Ratebatch-Lane-Wait"

// declaredOverBudget marks, inside the proxy only, a request whose
// declared Content-Length does not fit the memory budget's room when its
// headers arrive.
const declaredOverBudget = "X-Ratebatch-Over-Budget"

// batched reports whether h is an inference request of a batched model,
// the requests the memory budget holds.
func (s *Server) batched(h *fasthttp.RequestHeader) bool {
	if !h.IsPost() {
		return false
	}
	rc := routeContexts.Get().(*chi.Context)
	defer routeContexts.Put(rc)
	rc.Reset()
	path, _, _ := strings.Cut(string(h.RequestURI()), "?")
	if s.routes.Find(rc, http.MethodPost, path) == "" {
		return false
	}
	model, err := url.PathUnescape(rc.URLParam("model"))
	if err != nil {
		return false
	}
	_, ok := s.o.Batcher.Model(model)
	return ok
}

// refuseDeclaredTooLarge answers 413 to a request marked by headerReceived;
// its body is unread, so the connection closes.
func (s *Server) refuseDeclaredTooLarge(ctx *fasthttp.RequestCtx) bool {
	if len(ctx.Request.Header.Peek(declaredTooLarge)) == 0 {
		return false
	}
	s.m.Rejected.WithLabelValues("body_too_large").Inc()
	writeError(ctx, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", s.o.MaxBodyBytes))
	closeUnread(ctx)
	return true
}

// Serve serves the data port on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(linger.NewListener(rawconn.Listener{Listener: ln}, linger.Options{}))
}

// closeUnread closes the connection after the answer to a request whose
// body may be partly unread. The close lingers: what the client still
// sends is read and discarded for a while, so that a client that sends
// its whole body before it reads (net/http, tritonclient, curl) gets the
// answer rather than a reset (package linger).
func closeUnread(ctx *fasthttp.RequestCtx) {
	ctx.SetConnectionClose()
	linger.Mark(ctx.Conn())
}

// Shutdown stops accepting, lets requests in progress finish and closes
// the connections, or gives up when ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.ShutdownWithContext(ctx) }

// fasthttpLogger sends fasthttp's own messages to slog at debug level.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug(fmt.Sprintf(format, args...))
}

var routeContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// ServeFastHTTP is the data port's request handler.
func (s *Server) ServeFastHTTP(ctx *fasthttp.RequestCtx) {
	defer s.recoverHandler(ctx) // fasthttp recovers nothing: a panic would end the process
	if s.o.LoadReport != nil {
		defer s.putLoadReport(ctx)
	}
	if s.res != nil {
		// infer adopts its request's reservation; any other path gives it
		// back when the handler ends.
		defer s.res.drop(&ctx.Request.Header)
	}
	if s.refuseDeclaredTooLarge(ctx) {
		return
	}
	if n := ctx.Request.Header.Peek(declaredOverBudget); len(n) > 0 {
		declared, _ := strconv.ParseInt(string(n), 10, 64)
		s.refuseMemory(ctx, "", "memory_declared", declared)
		return
	}
	if n := ctx.Request.Header.Peek(declaredLaneWait); len(n) > 0 {
		s.refuse(ctx, "", &door.Refusal{Reason: "large_body_wait", Msg: fmt.Sprintf(
			"%s bytes: no turn to be read within %v (at most %d bodies over %d bytes are read at once); retry later",
			n, s.o.LargeBodyWait, s.o.LargeBodyLanes, s.o.LargeBodyBytes)})
		return
	}
	if ctx.IsPost() {
		rc := routeContexts.Get().(*chi.Context)
		rc.Reset()
		// The path is interned (package unique): clients repeat a few
		// paths, and the model name is cut out of it as a string anyway.
		path := unique.Make(string(ctx.URI().PathOriginal())).Value()
		if s.routes.Find(rc, http.MethodPost, path) != "" {
			model, errM := url.PathUnescape(rc.URLParam("model"))
			version, errV := url.PathUnescape(rc.URLParam("version"))
			routeContexts.Put(rc)
			if errM == nil && errV == nil {
				s.infer(ctx, model, version)
				return
			}
		} else {
			routeContexts.Put(rc)
		}
	}
	if s.o.Health != nil && (ctx.IsGet() || ctx.IsHead()) && s.notReady(ctx) {
		return
	}
	s.passthrough(ctx)
}

// putLoadReport sets the endpoint-load-metrics header of the answer.
func (s *Server) putLoadReport(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("endpoint-load-metrics", s.o.LoadReport(ctx.Request.Header.Peek("endpoint-load-metrics-format")))
}

// notReady answers a readiness request (/v2/health/ready, and
// /v2/models/{m}[/versions/{v}]/ready) with 400 and a KServe error while
// the outlier detector finds the upstream, or the model, failing: Triton
// keeps saying ready when its GPU is lost, and an orchestrator or gateway
// should then route elsewhere. It reports whether it answered.
func (s *Server) notReady(ctx *fasthttp.RequestCtx) bool {
	path := string(ctx.Path())
	var failing bool
	var why string
	switch {
	case path == "/v2/health/ready":
		failing, why = s.o.Health.UpstreamFailing(), "every batched model is failing upstream"
		if u, ok := s.o.Health.(interface{ Unready() string }); ok {
			why = u.Unready() // the dispatcher's finer verdict, with its cause
			failing = why != ""
		}
	case strings.HasPrefix(path, "/v2/models/") && strings.HasSuffix(path, "/ready"):
		model, _, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(path, "/v2/models/"), "/ready"), "/versions/")
		failing, why = s.o.Health.Failing(model)
	}
	if !failing {
		return false
	}
	writeError(ctx, http.StatusBadRequest, "not ready: "+why)
	return true
}

// recoverHandler contains a panic of the handler: the request gets a 500
// with a KServe v2 error and its connection closes (what was read of it is
// in an unknown state); every other request is served on. A call the
// request had queued is answered by the dispatcher, which recovers its own
// panics, before Submit returns, so none is left behind.
func (s *Server) recoverHandler(ctx *fasthttp.RequestCtx) {
	v := recover()
	if v == nil {
		return
	}
	err := guard.Recovered(s.log, "http", v)
	s.m.Errors.WithLabelValues(panicModel, ProtocolHTTP, "500").Inc()
	writeError(ctx, http.StatusInternalServerError, err.Error())
	closeUnread(ctx)
}

// panicModel is the model label of an error answered for a panic, whose
// request may not have been read far enough to name one.
const panicModel = ""

// testHookInfer, set only by tests, runs in infer once a batched model's
// request body is read: tests make it panic.
// An atomic pointer, as a test sets it while its servers run; nil in
// production, at the cost of one load per request.
var testHookInfer atomic.Pointer[func(model string, body []byte)]

// serverError answers what fasthttp refuses before a handler runs:
// malformed requests, oversized headers, timeouts.
func (s *Server) serverError(ctx *fasthttp.RequestCtx, err error) {
	if s.res != nil {
		s.res.drop(&ctx.Request.Header)
	}
	status, msg := http.StatusBadRequest, "malformed request: "+err.Error()
	var small *fasthttp.ErrSmallBuffer
	var nerr net.Error
	switch {
	case errors.As(err, &small):
		status, msg = http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("request headers exceed %d bytes", maxHeaderBytes)
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, msg = http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", s.o.MaxBodyBytes)
	case errors.As(err, &nerr) && nerr.Timeout():
		status, msg = http.StatusRequestTimeout, "request not received in time"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "request body ends before its Content-Length"
	}
	s.m.Rejected.WithLabelValues(strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_"))).Inc()
	writeError(ctx, status, msg)
	closeUnread(ctx)
}

// infer serves an inference request of a model: admitted (its memory,
// its turn in the lane, its buffer), its call queued for a batch, its
// answer written; a model the proxy does not batch is passed through.
func (s *Server) infer(ctx *fasthttp.RequestCtx, model, version string) {
	if !s.batches(model) {
		s.passthrough(ctx) // not batched: stream it to Triton untouched
		return
	}
	start := time.Now()
	var a admission
	defer a.release()
	span := s.o.Tracer.StartHTTP(&ctx.Request.Header, model)
	if s.o.Tracer != nil {
		defer endSpan(ctx, span)
	}
	if !s.admit(ctx, model, &a) || !s.read(ctx, model, version, start, &a) {
		return // answered
	}
	a.endRead()
	span.Rows(a.call.Rows)
	wait, w := s.hangUps.watch(ctx.Conn(), start)
	res := s.o.Batcher.Submit(span.Context(wait), model, a.call)
	gone := wait.Err() != nil
	s.hangUps.stop(w)
	s.reply(ctx, model, &res, gone, &a, start)
}

// endSpan ends a traced request's span with the status written, and the
// error's message for a failure.
func endSpan(ctx *fasthttp.RequestCtx, span tracing.Request) {
	status, msg := ctx.Response.StatusCode(), ""
	if status >= http.StatusBadRequest {
		msg = string(ctx.Response.Body())
	}
	span.End(status, msg)
}

// read reads an admitted request's body and decodes it into its call
// (a.call). false: the request is answered, refused or failed, or passed
// to Triton whole when it is not one the dispatcher batches.
func (s *Server) read(ctx *fasthttp.RequestCtx, model, version string, start time.Time, a *admission) bool {
	raw, body, err := s.readBody(ctx, a)
	if errors.Is(err, errOverBudget) {
		s.refuseMemory(ctx, model, "memory_growing", a.hold.Held())
		return false
	}
	if err != nil {
		s.fail(ctx, model, err)
		return false
	}
	call, batchable, err := s.newCall(ctx, model, version, body, start)
	switch {
	case !batchable:
		s.passBuffered(ctx, raw) // shared memory, sequences, ...: Triton handles those itself
		return false
	case err != nil:
		s.fail(ctx, model, err)
		return false
	}
	a.call = call
	return true
}

// batches reports whether the proxy batches model, looking it up upstream
// first when it is not known yet.
func (s *Server) batches(model string) bool {
	_, ok := s.o.Batcher.Model(model)
	if !ok && s.o.Discoverer != nil {
		// Not ctx: fasthttp reuses a RequestCtx once the handler returns,
		// and a lookup's dial may outlive it.
		s.o.Discoverer.Ensure(context.Background(), model)
		_, ok = s.o.Batcher.Model(model)
	}
	return ok
}

// admission is what an inference request of a batched model holds from
// its headers until its answer is written: its bytes, and then its
// answer's, in the memory budget (hold); a large body's pooled buffer
// (lease); its turn of the large-body lane while its body is read; the
// buffer its body is read into; its call. release gives all of it back,
// in the one order that is right (see release); the zero admission holds
// nothing.
type admission struct {
	hold  membudget.Hold
	lease bodyLease
	lane  *lane // the lane whose turn it holds; nil: none
	// inLane is the lane whose room it holds until answered; nil: none.
	inLane *lane
	bp     *[]byte
	call   *dispatcher.Call
}

// admit takes over what the request's headers reserved (reservations:
// its bytes, a lease, a turn of the lane) and holds its declared length
// before a byte of the body is read; a chunked or compressed body's bytes
// are held as its buffers grow (readBody). false: refused, and answered.
func (s *Server) admit(ctx *fasthttp.RequestCtx, model string, a *admission) bool {
	a.hold = membudget.Hold{B: s.o.Memory}
	if s.res != nil {
		r := s.res.take(&ctx.Request.Header)
		a.hold.Adopt(r.n)
		if r.leased {
			a.lease = bodyLease{buf: r.buf, class: r.n}
		}
		if r.inLane {
			a.lane, a.inLane = s.lane, s.lane
		}
	}
	if n := ctx.Request.Header.ContentLength(); n > 0 && !a.hold.Grow(int64(n)+1) {
		s.refuseMemory(ctx, model, "memory_declared", int64(n))
		return false
	}
	a.bp = bodyBuffers.Get().(*[]byte)
	return true
}

// endRead ends a large body's turn of the lane once it is read: the next
// body is read while this one waits for its batch, is computed upstream
// and answered. Its call takes a turn again to be written upstream
// (dispatcher.Call.CopyTurn).
func (a *admission) endRead() {
	if a.lane == nil {
		return
	}
	a.call.CopyTurn = a.lane
	a.lane.Give()
	a.lane = nil
}

// release gives back what the admission holds, once the handler is done
// with the request and its answer: the call first, after which nothing
// refers to the body; then the body's buffer, to its pool, and a large
// body's to the budget's, where the next body of its class to be read
// takes it (readBody claims it); the turn of the lane if the body still
// holds it (it was not read to the end, or was passed to Triton whole),
// and its room in the lane, after the buffer, so that the body the room
// lets in reads into it; and last the bytes held, the answer's among
// them, which until then made the next large requests wait.
func (a *admission) release() {
	if a.call != nil {
		a.call.Release()
	}
	if a.lease.keep != nil {
		a.hold.Keep(a.lease.keep)
	}
	if a.bp != nil {
		putBodyBuffer(a.bp)
	}
	if a.lane != nil {
		a.lane.Give()
	}
	if a.inLane != nil {
		a.inLane.out()
	}
	a.hold.Release()
}

// newCall decodes a read body into its call for the dispatcher; not
// batchable: the request is Triton's to handle (the call is nil).
func (s *Server) newCall(ctx *fasthttp.RequestCtx, model, version string, body []byte, start time.Time) (*dispatcher.Call, bool, error) {
	if hook := testHookInfer.Load(); hook != nil {
		(*hook)(model, body)
	}
	headerLen, err := kserve.ParseHeaderLength(string(ctx.Request.Header.Peek(kserve.HeaderContentLength)), len(body))
	if err != nil {
		return nil, true, err
	}
	req, err := kserve.DecodeRequestDeferred(body, headerLen)
	if err != nil {
		return nil, true, err
	}
	call, batchable, err := dispatcher.NewCall(req, version, start)
	if !batchable || err != nil {
		return nil, batchable, err
	}
	call.Wire = dispatcher.Wire{Body: body, HeaderLen: headerLen}
	call.Source = ctx.ConnID() // one request at a time per connection
	return call, true, nil
}

// reply writes a batched call's answer, or its error; a client that hung
// up while its call was queued (gone) gets none.
func (s *Server) reply(ctx *fasthttp.RequestCtx, model string, res *dispatcher.Result, gone bool, a *admission, start time.Time) {
	if res.Err != nil {
		if gone {
			ctx.SetConnectionClose() // the client is gone
			return
		}
		s.fail(ctx, model, res.Err)
		return
	}
	var err error
	if res.Wire != nil {
		writeWire(ctx, res.Wire.Body, res.Wire.HeaderLen)
	} else {
		err = writeResponse(ctx, res.Resp)
	}
	s.o.Batcher.Delivered(*res)
	res.Release()
	// The answer is written once the handler returns; until then it is
	// held, even past the budget (the work is done), which makes the next
	// large requests wait.
	a.hold.Force(int64(len(ctx.Response.Body())))
	if err != nil {
		s.log.Debug("writing response", "model", model, "err", err)
	}
	s.m.latencyOf(model).Observe(time.Since(start).Seconds())
}

// bodyLease is a large body's buffer: the pooled one its reservation
// leased or readBody claimed (buf, nil when the budget had none idle;
// class, its size class), and the one it was read into, to keep in the
// pool once the request is answered (keep).
type bodyLease struct {
	buf   []byte
	class int64
	keep  []byte
}

// Body buffers are reused: once Submit has returned nothing refers to a
// request's bytes (the upstream call that streamed them has ended), so the
// next request reads into the same memory instead of new, zeroed memory.
// Small bodies' buffers are kept here; large ones (past
// membudget.MinClass, with a budget) in the budget's pool of size
// classes, counted in it (bodyLease).
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// poolBodyMax is the largest buffer kept for reuse (an image batch's
// request is 600 KB); larger ones go to the collector.
const poolBodyMax = 4 << 20

func putBodyBuffer(bp *[]byte) {
	if cap(*bp) <= poolBodyMax {
		*bp = (*bp)[:0]
		bodyBuffers.Put(bp)
	}
}

// readBody reads the whole body within the size limit into the
// admission's buffer (its lease's, for a large body), holding its bytes as
// they come, and decodes a Content-Encoding of gzip or deflate. raw is the
// body as sent, body the decoded one (the same slice when not encoded).
func (s *Server) readBody(ctx *fasthttp.RequestCtx, a *admission) (raw, body []byte, err error) {
	bp, lease, hold := a.bp, &a.lease, &a.hold
	limit := s.o.MaxBodyBytes
	// -1 chunked, -2 none; never over the limit (headerReceived).
	declared := int64(ctx.Request.Header.ContentLength())
	if stream := ctx.RequestBodyStream(); stream != nil {
		// Reserve the declared length only up to reserveMax: a client that
		// declares 64 MiB and sends nothing must not hold 64 MiB.
		var buf []byte
		// With the declared length held by the memory budget, a body whose
		// first reserveMax bytes came grows to it at once (whole): a 60 MB
		// body would otherwise hold its last two buffers, 32 and 60 MB, at
		// once while it is copied from one to the other. A leased body
		// grows to its size class, so that its buffer can be pooled, or
		// reads into the pooled buffer its lease came with.
		var whole int64
		if lease.buf == nil && lease.class > 0 {
			lease.buf = hold.B.Claim(lease.class) // given back since the headers
		}
		switch {
		case lease.buf != nil:
			buf = lease.buf[:0]
		case lease.class > 0:
			whole = lease.class
		case hold.B != nil && declared > 0 && hold.Held() > declared:
			whole = declared + 1
		}
		if buf == nil {
			*bp = slices.Grow((*bp)[:0], int(min(max(declared, 512), reserveMax)+1))
			buf = *bp
		}
		raw, err = readAll(stream, limit+1, buf, declared, whole, func(c int) bool { return hold.Grow(int64(c)) })
		if lease.class > 0 && int64(cap(raw)) == lease.class {
			lease.keep = raw[:0]
		} else {
			*bp = raw[:0]
		}
		if errors.Is(err, errOverBudget) {
			return nil, nil, err
		}
		if err != nil {
			return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "reading request body: " + err.Error()}
		}
		if int64(len(raw)) > limit {
			s.m.Rejected.WithLabelValues("body_too_large").Inc()
			return nil, nil, tooLarge(limit)
		}
	} else {
		raw = ctx.Request.Body() // already in memory (tests, small bodies)
	}
	if declared >= 0 && int64(len(raw)) != declared {
		return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("request body has %d bytes, Content-Length says %d", len(raw), declared)}
	}
	var dec io.ReadCloser
	switch enc := strings.ToLower(strings.TrimSpace(string(ctx.Request.Header.ContentEncoding()))); enc {
	case "", "identity":
		return raw, raw, nil
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "gzip body: " + err.Error()}
		}
		dec = zr
	case "deflate": // HTTP's deflate is the zlib format (RFC 9110), as Triton reads it
		zr, err := zlib.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "deflate (zlib) body: " + err.Error()}
		}
		dec = zr
	default:
		return nil, nil, &kserve.Error{Status: http.StatusUnsupportedMediaType, Msg: fmt.Sprintf("unsupported Content-Encoding %q (gzip, deflate)", enc)}
	}
	defer dec.Close()
	// The decoded size is bounded too: a small bomb must not cost memory.
	rawHeld := hold.Held()
	charge := func(c int) bool { return hold.Grow(rawHeld + int64(c)) }
	if !charge(int(min(4*int64(len(raw)), limit+1))) {
		return nil, nil, errOverBudget
	}
	body, err = readAll(dec, limit+1, make([]byte, 0, min(4*int64(len(raw)), limit+1)), -1, 0, charge)
	switch {
	case errors.Is(err, errOverBudget):
		return nil, nil, err
	case err != nil:
		return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "decompressing body: " + err.Error()}
	case int64(len(body)) > limit:
		s.m.Rejected.WithLabelValues("body_too_large").Inc()
		return nil, nil, tooLarge(limit)
	}
	return raw, body, nil
}

func tooLarge(limit int64) error {
	return &kserve.Error{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("request body exceeds %d bytes", limit)}
}

// reserveMax is the most memory a request body gets before its bytes
// arrive; beyond it the buffer grows with what is actually received.
const reserveMax = 1 << 20

// readAll reads r to its end, or until it holds limit bytes (the caller's
// cue for a body over its limit), into buf. A full buffer doubles, but not past
// declared+1 bytes when the length is known (declared >= 0; the extra byte
// lets the last read see EOF without growing), so memory follows the bytes
// received, at most twice over, and an honest large body is read with a
// few regrowths.
//
// charge is asked, before bytes are read, for the length buf may reach:
// ahead in doubling steps (a pooled buffer may be far larger than the
// body), so that memory held follows the bytes received, at most twice
// over; when it refuses, readAll stops with errOverBudget.
//
// whole, when > declared, grows a buffer that holds reserveMax bytes
// straight to a capacity of whole (declared+1, or a pool's size class).
func readAll(r io.Reader, limit int64, buf []byte, declared int64, whole int64, charge func(length int) bool) ([]byte, error) {
	held := 0 // the length charged for
	for int64(len(buf)) < limit {
		if len(buf) == cap(buf) {
			grow := max(cap(buf), 512)
			if declared > int64(len(buf)) {
				grow = int(min(int64(grow), declared+1-int64(len(buf))))
			}
			if whole > declared && declared > int64(len(buf)) && len(buf) >= reserveMax {
				// Exactly whole: append's growth would round it up.
				nb := make([]byte, len(buf), whole)
				copy(nb, buf)
				buf = nb
			} else {
				buf = slices.Grow(buf, grow)
			}
		}
		end := int(min(int64(cap(buf)), limit))
		if len(buf) >= held {
			held = min(end, max(2*len(buf), len(buf)+4096))
			if !charge(held) {
				return buf, errOverBudget
			}
		}
		n, err := r.Read(buf[len(buf):min(end, held)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// errOverBudget ends a body's read when its next bytes would pass the
// memory budget.
var errOverBudget = errors.New("over the memory budget")

// refuseMemory answers 503 with Retry-After to a request whose body would
// pass the memory budget (reason: memory_declared when its Content-Length
// did, memory_growing when a chunked or compressed body grew past it). The
// rest of its body is not read, so its connection is closed.
//
// What is left of the body is read and thrown away first, up to the body
// limit, through one small buffer: no memory is held for it, and the
// client, which may be sending it still, reads the 503 instead of a reset
// (a connection closed with unread bytes is reset, and a reset may discard
// the answer before the client reads it). Past the limit, or on an error,
// the connection closes.
func (s *Server) refuseMemory(ctx *fasthttp.RequestCtx, model, reason string, n int64) {
	s.refuse(ctx, model, door.NoRoom(reason, s.o.Memory.Limit(), n))
}

// refuse answers 503 with Retry-After to a request refused before its
// body was read (r.Reason: the metric's label), its body thrown away first
// as refuseMemory says.
func (s *Server) refuse(ctx *fasthttp.RequestCtx, model string, r *door.Refusal) {
	s.m.Rejected.WithLabelValues(r.Reason).Inc()
	if stream := ctx.RequestBodyStream(); stream != nil {
		bp := drainBuffers.Get().(*[]byte)
		left := s.o.MaxBodyBytes + 1
		var err error
		for left > 0 && err == nil {
			var k int
			k, err = stream.Read((*bp)[:min(int64(len(*bp)), left)])
			left -= int64(k)
		}
		drainBuffers.Put(bp)
		if err != io.EOF {
			closeUnread(ctx)
		}
	}
	s.fail(ctx, model, r)
}

var drainBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// fail answers err with its status (door.StatusCode) and a KServe v2
// error body, as Triton does.
func (s *Server) fail(ctx *fasthttp.RequestCtx, model string, err error) {
	status := door.StatusCode(err)
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		ctx.Response.Header.Set("Retry-After", strconv.Itoa(max(int(s.o.RetryAfter.Round(time.Second)/time.Second), 1)))
	}
	s.m.Errors.WithLabelValues(model, ProtocolHTTP, strconv.Itoa(status)).Inc()
	writeError(ctx, status, err.Error())
}

// writeError answers with a KServe v2 error body.
func writeError(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.Response.Header.Del(kserve.HeaderContentLength)
	ctx.Response.Header.Del("Content-Encoding")
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.Response.ResetBody()
	ctx.Response.SetBodyRaw(kserve.AppendErrorBody(make([]byte, 0, len(msg)+16), msg))
}

// writeResponse writes a caller's response, compressed when the client
// accepts gzip or deflate, as Triton does.
func writeResponse(ctx *fasthttp.RequestCtx, resp *kserve.Response) error {
	buf := ctx.Response.SwapBody(nil)
	body, headerLen, err := kserve.AppendResponse(buf[:0], resp)
	if err != nil {
		ctx.Response.SwapBody(body)
		writeError(ctx, http.StatusInternalServerError, "encoding response: "+err.Error())
		return err
	}
	setAnswer(ctx, body, headerLen)
	return nil
}

// writeWire answers with an upstream's answer as it came (a lone caller's,
// see dispatcher.Call.Wire): copied into the response, whose buffer
// fasthttp reuses, as the upstream's is given back once written.
func writeWire(ctx *fasthttp.RequestCtx, body []byte, headerLen int) {
	buf := ctx.Response.SwapBody(nil)
	setAnswer(ctx, append(buf[:0], body...), headerLen)
}

// setAnswer makes body, of the given Inference-Header-Content-Length (-1
// when all JSON), the 200 answer, compressed as the client accepts.
func setAnswer(ctx *fasthttp.RequestCtx, body []byte, headerLen int) {
	if enc := acceptedEncoding(string(ctx.Request.Header.Peek("Accept-Encoding"))); enc != "" {
		body = compress(body, enc)
		ctx.Response.Header.Set("Content-Encoding", enc)
	}
	ctx.Response.SwapBody(body)
	if headerLen >= 0 {
		ctx.SetContentType("application/octet-stream")
		// Set would copy and normalise the name afresh at every answer.
		var n [20]byte
		ctx.Response.Header.SetCanonical(headerLengthName, strconv.AppendInt(n[:0], int64(headerLen), 10))
	} else {
		ctx.SetContentType("application/json")
	}
	ctx.SetStatusCode(http.StatusOK)
}

// headerLengthName is kserve.HeaderContentLength in fasthttp's canonical
// spelling, which it already is.
var headerLengthName = []byte(kserve.HeaderContentLength)

// compress replaces body by its gzip or deflate (zlib) form. fasthttp's
// compressors are pooled: a new gzip.Writer per reply allocates far more
// than the answer it compresses (BenchmarkWriteResponseGzip).
func compress(body []byte, enc string) []byte {
	zp := zbufPool.Get().(*[]byte)
	z := *zp
	if enc == "gzip" {
		z = fasthttp.AppendGzipBytesLevel(z[:0], body, fasthttp.CompressDefaultCompression)
	} else {
		z = fasthttp.AppendDeflateBytesLevel(z[:0], body, fasthttp.CompressDefaultCompression)
	}
	body = append(body[:0], z...)
	*zp = z
	zbufPool.Put(zp)
	return body
}

var zbufPool = sync.Pool{New: func() any { return new([]byte) }}

// acceptedEncoding picks gzip or deflate if the client accepts one: the
// one with the higher quality (RFC 9110 12.5.3), the first listed on a tie.
// A quality of 0 means "not acceptable"; so does one that is not a number.
func acceptedEncoding(h string) string {
	best, bestQ := "", 0.0
	for part := range strings.SplitSeq(h, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name != "gzip" && name != "deflate" {
			continue
		}
		q := 1.0
		for p := range strings.SplitSeq(params, ";") {
			k, v, ok := strings.Cut(p, "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(k), "q") {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || f < 0 || f > 1 {
				f = 0
			}
			q = f
		}
		if q > bestQ {
			best, bestQ = name, q
		}
	}
	return best
}
