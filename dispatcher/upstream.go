package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/internal/hostclient"
	"github.com/ratebatch/ratebatch/kserve"
)

// Upstream sends one batched inference request. The dispatcher defines it so
// tests can stand in for Triton.
type Upstream interface {
	// Infer posts body to the model's infer endpoint, with what out says
	// the request carries besides. On success the reply holds the status
	// and body; Free gives the body back and must be called exactly once.
	// Infer may be called again with the same body (a retry), so it must
	// not consume it for good. ctx is the batch's (Batch.Ctx): it carries
	// what observers put there (a tracer's span, to propagate upstream).
	Infer(ctx context.Context, model, version string, body Body, out Outgoing) (*Reply, error)
}

// Outgoing is what an upstream request carries besides its body.
type Outgoing struct {
	// Until, when set, is when the request's last caller stops waiting
	// (the latest of their deadlines, when each has one: gRPC callers'):
	// past it the request is given up with ErrDeadline. Zero: some caller
	// waits as long as Triton takes, as it would on Triton itself, and the
	// upstream client's own timeout, when one is configured, bounds the
	// request instead.
	Until time.Time
	// Header is the callers' forwarded headers (Call.Header: the same for
	// every caller of a batch, their key says so), and Trace a lone
	// caller's traceparent (Call.Trace).
	Header, Trace string
}

// ErrDeadline reports an upstream request given up when its callers'
// deadlines passed (Outgoing.Until): theirs, not the model's failure.
var ErrDeadline = errors.New("the callers' deadline passed before the upstream answered")

// Body is a batched request body (a *kserve.Batch, or a lone caller's
// Wire) that can be written in one piece or streamed: large tensors then
// go from the callers' buffers to the socket without being copied into a
// batch buffer first. HeaderLen is -1 for a body that is all JSON.
type Body interface {
	BodyLen() int
	HeaderLen() int
	AppendBody(dst []byte) (body []byte, headerLen int)
	Reader() io.Reader
}

// streamAbove is the body size from which batches are streamed rather than
// assembled in a pooled buffer: below it one small copy is cheaper than a
// stream's bookkeeping.
const streamAbove = 64 << 10

var bodyPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// Reply is an upstream answer.
type Reply struct {
	Status    int
	Body      []byte
	HeaderLen int // Inference-Header-Content-Length, -1 when absent
	// ContentType is an error answer's (Status not 200), passed back with
	// the error as Triton sent it; "" for a 200.
	ContentType string
	Free        func()
}

// asError is the *kserve.Error of an error answer: its status, msg (its
// body's message) and its Content-Type, as Triton sent them.
func (r *Reply) asError(msg string) *kserve.Error {
	return &kserve.Error{Status: r.Status, Msg: msg, ContentType: r.ContentType}
}

// ErrUpstreamTimeout reports an upstream call past its deadline.
var ErrUpstreamTimeout = errors.New("upstream did not answer in time")

// ConnError wraps a failure to reach the upstream or a dropped connection:
// the batch may be retried. Dial is set when no connection could be made
// (refused, or no route to the host): nothing listens there, and
// the dispatcher takes it for down until a probe gets an answer.
type ConnError struct {
	Err  error
	Dial bool
}

func (e *ConnError) Error() string { return "upstream connection: " + e.Err.Error() }
func (e *ConnError) Unwrap() error { return e.Err }

// HTTPUpstream is the pooled fasthttp client to one Triton HTTP endpoint.
type HTTPUpstream struct {
	// Header, when set, adds headers to every batch's request from the
	// batch's context (Batch.Ctx): a tracer's traceparent.
	Header func(ctx context.Context, h *fasthttp.RequestHeader)
	// OwnHeader is set on the proxy's own requests (probes, InferWithin):
	// its credentials toward Triton (upstream_headers). A batch carries
	// its callers' headers instead, never these.
	OwnHeader map[string]string

	hc     *fasthttp.HostClient
	prefix string // the upstream URL's path, without a trailing slash
	// paths caches the request path of each model's default version: it
	// is the same for every batch, and fasthttp parses a path alone more
	// cheaply than a whole URL (the host client knows scheme and host).
	pathsMu sync.RWMutex
	paths   map[string]string
	host    string
	timeout time.Duration
}

// NewHTTPUpstream returns a client for the Triton at base (http or https);
// timeout bounds a request whose callers have no deadline of their own
// (Outgoing.Until; 0: none, as Triton bounds none).
func NewHTTPUpstream(base string, maxConns int, timeout time.Duration) (*HTTPUpstream, error) {
	u, err := url.Parse(base)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("upstream URL %q: want http(s)://host:port", base)
	}
	// A batch's deadline is its callers' (Outgoing.Until): kept exactly,
	// so that a gRPC caller is answered before its deadline passes.
	hc := hostclient.NewExact(u)
	hc.MaxConns = maxConns
	hc.MaxResponseBodySize = 0 // unlimited: Triton's answers are as large as the batch needs
	hc.DisableHeaderNamesNormalizing = true
	// The dispatcher decides about retries: a POST is retried only on
	// connection errors, and only as often as configured. One that was
	// never sent, on a connection that held bytes after its last answer,
	// goes again on another at once.
	hc.RetryIfErr = func(_ *fasthttp.Request, _ int, err error) (bool, bool) {
		return false, errors.Is(err, hostclient.ErrUnsolicited)
	}
	return &HTTPUpstream{hc: hc, prefix: trimSlash(u.Path), paths: make(map[string]string), host: u.Host, timeout: timeout}, nil
}

// ErrAnswerCut fails a batch whose answer broke off: the connection
// failed after the answer began (a reset), or closed before the length its
// header gave. The upstream took the batch, so it is not retried, and the
// model's failure detector counts it, as a malformed answer.
var ErrAnswerCut = errors.New("upstream's answer broke off")

// classify sorts a failed exchange: a timeout (the whole exchange's, or a
// read's: an answer dripping slower than the deadline), an answer that
// broke off, else a connection error, which may be retried. A timeout is
// the callers' own (ErrDeadline) when their deadline set it (callers).
func classify(err error, callers bool) error {
	var oe *net.OpError
	dial := errors.As(err, &oe) && oe.Op == "dial"
	timedOut := errors.Is(err, fasthttp.ErrTimeout) || !dial && errors.Is(err, os.ErrDeadlineExceeded)
	switch {
	case timedOut && callers:
		return fmt.Errorf("%w (%w)", ErrDeadline, err)
	case timedOut:
		return fmt.Errorf("%w (%w)", ErrUpstreamTimeout, err)
	case errors.Is(err, hostclient.ErrAnswerCut), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: %w", ErrAnswerCut, err)
	}
	return &ConnError{Err: err, Dial: IsRefused(err)}
}

// IsRefused reports whether err is a connection the upstream's host
// refused or could not be routed to: nothing listens there (a restarting
// server), and the outage hold applies (to batches, and to the doors'
// pass-through inference). A dial that timed out is not one: an upstream too busy to accept
// is overloaded, not down, and its callers should not be held for it.
func IsRefused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}

func trimSlash(p string) string {
	for len(p) > 0 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

// InferPath is Triton's infer endpoint for a model and optional version.
func InferPath(model, version string) string {
	p := "/v2/models/" + url.PathEscape(model)
	if version != "" {
		p += "/versions/" + url.PathEscape(version)
	}
	return p + "/infer"
}

// path is the request path of model's infer endpoint under the upstream
// URL's path.
func (u *HTTPUpstream) path(model, version string) string {
	if version != "" { // any string a client sends: not cached
		return u.prefix + InferPath(model, version)
	}
	u.pathsMu.RLock()
	p, ok := u.paths[model]
	u.pathsMu.RUnlock()
	if !ok {
		p = u.prefix + InferPath(model, "")
		u.pathsMu.Lock()
		u.paths[model] = p
		u.pathsMu.Unlock()
	}
	return p
}

// Infer implements Upstream. ctx is the batch's (Batch.Ctx): Header, when
// set, writes what it carries into the request. The request is bounded
// by out.Until, else by the client's timeout when one is configured.
func (u *HTTPUpstream) Infer(ctx context.Context, model, version string, body Body, out Outgoing) (*Reply, error) {
	return u.infer(ctx, model, version, body, out, u.timeout)
}

// infer posts body; timeout 0 is none.
//
// It stays one function: one request's life on the upstream client, acquired
// and released around the exchange.
func (u *HTTPUpstream) infer(ctx context.Context, model, version string, body Body, out Outgoing, timeout time.Duration) (*Reply, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	headerLen := body.HeaderLen()
	if whole, ok := body.(interface{ Bytes() []byte }); ok {
		req.SetBodyRaw(whole.Bytes()) // a caller's own buffer: no copy
	} else if n := body.BodyLen(); n > streamAbove {
		req.SetBodyStream(body.Reader(), n)
	} else {
		bp := bodyPool.Get().(*[]byte)
		buf, _ := body.AppendBody((*bp)[:0])
		req.SetBodyRaw(buf)
		defer func() { *bp = buf[:0]; bodyPool.Put(bp) }()
	}
	req.Header.SetRequestURI(u.path(model, version))
	req.Header.SetHost(u.host)
	if u.hc.IsTLS {
		// fasthttp refuses an http request on a TLS HostClient.
		req.URI().SetScheme("https")
	}
	req.Header.SetMethod(fasthttp.MethodPost)
	eachHeader(out.Header, func(name, value string) { req.Header.Set(name, value) })
	if out.Trace != "" {
		req.Header.Set("traceparent", out.Trace)
	}
	if u.Header != nil {
		u.Header(ctx, &req.Header) // a tracer's traceparent wins
	}
	if headerLen < 0 {
		req.Header.SetContentType("application/json")
	} else {
		req.Header.SetContentType("application/octet-stream")
		var digits [20]byte
		req.Header.SetBytesV(kserve.HeaderContentLength, strconv.AppendInt(digits[:0], int64(headerLen), 10))
	}
	resp := fasthttp.AcquireResponse()
	deadline, callers := out.Until, true
	if deadline.IsZero() && timeout > 0 {
		deadline, callers = time.Now().Add(timeout), false
	}
	var err error
	if deadline.IsZero() {
		err = u.hc.Do(req, resp)
	} else {
		err = u.hc.DoDeadline(req, resp, deadline)
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, classify(err, callers)
	}
	hl := -1
	if v := resp.Header.Peek(kserve.HeaderContentLength); len(v) > 0 {
		n, err := kserve.ParseHeaderLength(string(v), len(resp.Body()))
		if err != nil {
			fasthttp.ReleaseResponse(resp)
			return nil, fmt.Errorf("upstream answered a bad %s header: %w", kserve.HeaderContentLength, err)
		}
		hl = n
	}
	reply := &Reply{
		Status:    resp.StatusCode(),
		Body:      resp.Body(),
		HeaderLen: hl,
		Free:      func() { fasthttp.ReleaseResponse(resp) },
	}
	if reply.Status != fasthttp.StatusOK { // a 200's type is the answer's own: not copied
		reply.ContentType = string(resp.Header.ContentType())
	}
	return reply, nil
}
