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
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unique"
	"unsafe"

	"github.com/go-chi/chi/v5"
	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/linger"
	"github.com/ratebatch/ratebatch/internal/rawconn"
)

// Forwarder sends a pass-through request upstream; *fasthttp.HostClient is
// one. Tests stand in for Triton with their own.
type Forwarder interface {
	DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, deadline time.Time) error
}

// Options configure a Server.
type Options struct {
	// Backend is what the door shares with the gRPC door: the queues, the
	// memory budget, readiness, tracing and metrics (see below).
	Backend      door.Backend
	Upstream     *url.URL
	MaxBodyBytes int64
	RetryAfter   time.Duration
	// Hold is how long a pass-through inference request waits for an
	// upstream that refuses connections (upstream_client.hold, as batches
	// wait in the dispatcher) before it gets 503; 0: no wait.
	Hold time.Duration

	// Timeouts of the data port: ReadHeaderTimeout for a request's headers,
	// ReadTimeout for its body, WriteTimeout for the answer (for an answer
	// streamed without a length, server-sent events, each write of it:
	// a stream its client reads is never cut), IdleTimeout between
	// keep-alive requests. Zero: none.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// UpstreamIdleTimeout bounds the upstream's silence in a pass-through
	// exchange (the fasthttp client's only; a Forward of a test's own is
	// not bounded): no byte of its answer for that long, before the
	// answer begins (504) or between two parts of a streamed answer (the
	// stream ends). An upstream that keeps sending is never cut. Zero:
	// none.
	UpstreamIdleTimeout time.Duration

	// Backend.Health, when set, answers the readiness endpoints not
	// ready (400, as Triton does) while the outlier detector finds the
	// model, or the whole upstream, failing; otherwise they pass through
	// to Triton.
	//
	// Backend.Memory, when set, is the budget (limits.memory) the bodies
	// of batched inference requests, from their first byte until
	// answered, and their answers are admitted against: a request that
	// would pass it gets 503 with Retry-After before its body is read
	// further, and its connection is closed. nil: no budget.

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
	Logger  *slog.Logger

	// LoadReport, when set, gives the endpoint-load-metrics header (the
	// ORCA load report, package orca) put on every answer, in the form
	// the request's endpoint-load-metrics-format header names.
	LoadReport func(format []byte) string
}

// Server serves Triton's HTTP API.
type Server struct {
	o      Options
	door   *door.Door
	routes *chi.Mux
	fwd    Forwarder
	prefix string // the upstream URL's path, put before every pass-through path
	https  bool
	srv    *fasthttp.Server
	log    *slog.Logger
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
	s := &Server{o: o, door: door.New(o.Backend, door.HTTP), log: o.Logger, fwd: o.Forward,
		prefix: strings.TrimSuffix(o.Upstream.EscapedPath(), "/"), https: o.Upstream.Scheme == "https"}
	if s.fwd == nil {
		s.fwd = newUpstreamClient(o.Upstream, o.UpstreamIdleTimeout)
	}
	if o.Backend.Memory != nil {
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
		s.res = newReservations(o.Backend.Memory, o.ReadTimeout, s.lane)
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

// declaredMark marks, inside the proxy only, a request headerReceived
// refuses by its declared Content-Length: the value is the reason's letter
// and the length. fasthttp would otherwise wait for the start of a body
// the handler then refuses; the handler answers at once. One header, not
// one per reason: the handler reads it on every request.
const declaredMark = "X-Ratebatch-Declared"

// The reasons of a declaredMark.
const (
	// declaredTooLarge: over the body limit (413).
	declaredTooLarge = 'L'
	// declaredOverBudget: does not fit the memory budget's room when its
	// headers arrive.
	declaredOverBudget = 'M'
	// declaredLaneWait: a large request that found no turn in the
	// large-body lane within its wait.
	declaredLaneWait = 'W'
)

// markDeclared marks h with reason, for a body of n bytes.
func markDeclared(h *fasthttp.RequestHeader, reason byte, n int) {
	h.Set(declaredMark, string(reason)+strconv.Itoa(n))
}

// headerReceived runs once a request's headers are in: the body gets its
// own read timeout, and a body declared over the limit is not read.
func (s *Server) headerReceived(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
	h.Del(declaredMark) // only the proxy sets it
	if s.res != nil {
		s.res.drop(h) // a previous request's on this connection, if it never reached a handler
	}
	n := h.ContentLength()
	switch {
	case n > 0 && int64(n) > s.o.MaxBodyBytes:
		h.SetContentLength(0)
		markDeclared(h, declaredTooLarge, n)
	case n > 0 && s.res != nil && s.batched(h):
		// Too large for the budget's room now (else reserved: see
		// reservations), or, a large body, no turn in the lane within its
		// wait (else the turn is its own until its body is read). A client
		// that waits for "100 Continue" is refused before it sends a byte
		// of the body (no 100 is sent: the Expect goes); any other has
		// begun sending it, and is refused once its body is read and
		// thrown away (refuse), so that it reads the refusal rather than a
		// reset.
		var mark byte
		switch {
		case !s.res.reserve(h, int64(n)):
			mark = declaredOverBudget
		case s.lane != nil && int64(n) > s.o.LargeBodyBytes && !s.res.enterLane(h):
			mark = declaredLaneWait
		}
		if mark != 0 {
			if len(h.Peek("Expect")) > 0 {
				h.Del("Expect")
				h.SetContentLength(0)
			}
			markDeclared(h, mark, n)
		}
	}
	return fasthttp.RequestConfig{ReadTimeout: s.o.ReadTimeout}
}

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
	_, ok := s.door.Batcher.Model(rc.URLParam("model")) // undecoded, as inferPath reads it
	return ok
}

// refuseDeclared answers a request headerReceived marked (declared, the
// mark's value; nil: none) and reports whether it did: over the body
// limit, 413, its body unread, so the connection closes; over the memory
// budget or without a turn in the large-body lane, 503.
func (s *Server) refuseDeclared(ctx *fasthttp.RequestCtx, declared []byte) bool {
	if len(declared) == 0 {
		return false
	}
	n := string(declared[1:])
	switch declared[0] {
	case declaredTooLarge:
		s.door.Refused("body_too_large")
		writeError(ctx, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", s.o.MaxBodyBytes))
		closeUnread(ctx)
	case declaredOverBudget:
		size, _ := strconv.ParseInt(n, 10, 64)
		s.refuseMemory(ctx, "", "memory_declared", size)
	default: // declaredLaneWait
		s.refuse(ctx, "", &door.Refusal{Reason: "large_body_wait", Msg: fmt.Sprintf(
			"%s bytes: no turn to be read within %v (at most %d bodies over %d bytes are read at once); retry later",
			n, s.o.LargeBodyWait, s.o.LargeBodyLanes, s.o.LargeBodyBytes)})
	}
	return true
}

// Serve serves the data port on ln until Shutdown; its connections are
// counted against the doors' bounds (door.Conns).
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(linger.NewListener(s.door.Conns.Listener(rawconn.Listener{Listener: ln}), linger.Options{}))
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
	if s.connRefused(ctx) || s.restricted(ctx) || s.refuseDeclared(ctx, ctx.Request.Header.Peek(declaredMark)) {
		return
	}
	if ctx.IsPost() {
		rc := routeContexts.Get().(*chi.Context)
		rc.Reset()
		// The path is interned (package unique): clients repeat a few
		// paths, and the model name is cut out of it as a string anyway.
		path := unique.Make(string(ctx.URI().PathOriginal())).Value()
		if s.routes.Find(rc, http.MethodPost, path) != "" {
			model, version := rc.URLParam("model"), rc.URLParam("version")
			routeContexts.Put(rc)
			s.inferPath(ctx, model, version)
			return
		}
		routeContexts.Put(rc)
	}
	if s.door.Health != nil && (ctx.IsGet() || ctx.IsHead()) && s.notReady(ctx) {
		return
	}
	if model, ok := repositoryChange(ctx); ok {
		defer s.door.RepositoryChanged(model) // once Triton has answered: its load is done
	}
	s.passthrough(ctx)
}

// repositoryChange reports the model of a repository load or unload
// (POST /v2/repository/models/{model}/load, /unload), which may change
// what the proxy does with the model.
func repositoryChange(ctx *fasthttp.RequestCtx) (model string, ok bool) {
	if !ctx.IsPost() {
		return "", false
	}
	rest, ok := strings.CutPrefix(string(ctx.URI().PathOriginal()), "/v2/repository/models/")
	if !ok {
		return "", false
	}
	name, action, _ := strings.Cut(rest, "/")
	if action != "load" && action != "unload" {
		return "", false
	}
	model, err := url.PathUnescape(name)
	return model, err == nil && model != ""
}

// connRefused answers a request on a connection past the doors' bounds
// (door.Conns): 503 with Retry-After, and the connection closes. It
// reports whether it answered.
func (s *Server) connRefused(ctx *fasthttp.RequestCtx) bool {
	r := door.ConnRefused(ctx.RemoteAddr(), time.Second)
	if r == nil {
		return false
	}
	s.door.Refused(r.Reason)
	s.fail(ctx, "", r)
	closeUnread(ctx)
	return true
}

// restricted answers a request whose route the operator closed to
// clients, or opened only to a header it lacks (restricted_api,
// door.Access), as Triton answers a restricted API: 403, before anything
// else is done with it. It reports whether it answered.
func (s *Server) restricted(ctx *fasthttp.RequestCtx) bool {
	if !s.door.Access.Active() {
		return false
	}
	p := ctx.URI().PathOriginal()
	// The path is only read while the request is: no copy of it.
	err := s.door.Access.HTTP(unsafe.String(unsafe.SliceData(p), len(p)), ctx.Request.Header.Peek)
	if err == nil {
		return false
	}
	s.door.Refused("restricted")
	s.fail(ctx, "", err)
	closeUnread(ctx)
	return true
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
	var why string
	switch {
	case path == "/v2/health/ready":
		why = s.door.Unready()
	case strings.HasPrefix(path, "/v2/models/") && strings.HasSuffix(path, "/ready"):
		model, _, _ := strings.Cut(strings.TrimSuffix(strings.TrimPrefix(path, "/v2/models/"), "/ready"), "/versions/")
		why = s.door.ModelUnready(model)
	}
	if why == "" {
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
	s.door.Failed(panicModel, "500")
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
	s.door.Refused(strings.ToLower(strings.ReplaceAll(http.StatusText(status), " ", "_")))
	writeError(ctx, status, msg)
	closeUnread(ctx)
}
