// Package proxy is ratebatch's front door: a chi router on Triton's HTTP
// paths that hands inference requests of batched models to the dispatcher
// and passes everything else through to the upstream unchanged. It owns
// admission (body limits, backpressure answers) and every client-facing
// error; it never decides batch sizes.
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
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/kserve"
)

// Batcher queues inference calls of the models it batches.
type Batcher interface {
	// Model reports whether the model is batched and its max batch size.
	Model(name string) (maxBatch int, ok bool)
	Submit(ctx context.Context, model string, c *dispatcher.Call) dispatcher.Result
}

// Discoverer learns models on demand; optional.
type Discoverer interface {
	// Ensure looks the model up upstream if it is not known yet.
	Ensure(ctx context.Context, model string)
}

// Options configure a Server.
type Options struct {
	Upstream     *url.URL
	Batcher      Batcher
	Discoverer   Discoverer
	MaxBodyBytes int64
	RetryAfter   time.Duration
	// Transport reaches the upstream for passthrough; nil: fasthttp, with
	// PassTimeout bounding each exchange (0: unbounded).
	Transport   http.RoundTripper
	PassTimeout time.Duration
	Metrics     *Metrics
	Logger      *slog.Logger
}

// Server serves Triton's HTTP API.
type Server struct {
	o      Options
	router chi.Router
	pass   *httputil.ReverseProxy
	log    *slog.Logger
	m      *Metrics
}

// New returns the front door.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	up := o.Upstream
	if o.Transport == nil {
		o.Transport = newFastTransport(up, o.PassTimeout)
	}
	s := &Server{o: o, log: o.Logger, m: o.Metrics}
	s.pass = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(up)
			pr.Out.Host = pr.In.Host // Triton ignores Host; keep what the client sent
		},
		Transport: o.Transport,
		// FlushInterval 0: ReverseProxy still flushes at once for
		// server-sent events (generate_stream) and answers of unknown
		// length; a flush per write otherwise costs a system call each.
		BufferPool: copyBuffers{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var mbe *http.MaxBytesError
			var ke *kserve.Error
			switch {
			case errors.As(err, &mbe):
				s.m.Rejected.WithLabelValues("body_too_large").Inc()
				kserve.WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", mbe.Limit))
			case errors.As(err, &ke):
				kserve.WriteError(w, ke.Status, ke.Msg)
			case errors.Is(err, context.Canceled):
				// the client went away; nobody reads an answer
			case errors.Is(err, errUpstreamTimeout):
				s.m.PassthroughErrors.Inc()
				kserve.WriteError(w, http.StatusGatewayTimeout, err.Error())
			default:
				s.m.PassthroughErrors.Inc()
				s.log.Warn("passthrough failed", "path", r.URL.Path, "err", err)
				kserve.WriteError(w, http.StatusBadGateway, "upstream unreachable: "+err.Error())
			}
		},
	}
	r := chi.NewRouter()
	r.Post("/v2/models/{model}/infer", s.infer)
	r.Post("/v2/models/{model}/versions/{version}/infer", s.infer)
	r.NotFound(s.passthrough)
	r.MethodNotAllowed(s.passthrough)
	s.router = r
	return s
}

// copyBuffers lends ReverseProxy its 32 KiB copy buffers instead of one
// new buffer per request.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.router.ServeHTTP(w, r) }

// smallBody is the largest body of known length that pass-through reads
// before forwarding: from memory headers and body leave in one write,
// where a stream costs a second system call.
const smallBody = 64 << 10

func (s *Server) passthrough(w http.ResponseWriter, r *http.Request) {
	s.m.Passthrough.Inc()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes)
	}
	s.pass.ServeHTTP(w, r)
}

// passBuffered passes through a request whose body was already read.
func (s *Server) passBuffered(w http.ResponseWriter, r *http.Request, raw []byte) {
	r.Body = io.NopCloser(bytes.NewReader(raw))
	r.ContentLength = int64(len(raw))
	s.m.Passthrough.Inc()
	s.pass.ServeHTTP(w, r)
}

func (s *Server) infer(w http.ResponseWriter, r *http.Request) {
	model := chi.URLParam(r, "model")
	_, ok := s.o.Batcher.Model(model)
	if !ok && s.o.Discoverer != nil {
		s.o.Discoverer.Ensure(r.Context(), model)
		_, ok = s.o.Batcher.Model(model)
	}
	if !ok {
		s.passthrough(w, r) // not batched: stream it to Triton untouched
		return
	}
	start := time.Now()
	raw, body, err := s.readBody(w, r)
	if err != nil {
		s.fail(w, model, err)
		return
	}
	headerLen, err := kserve.ParseHeaderLength(r.Header.Get(kserve.HeaderContentLength), len(body))
	if err != nil {
		s.fail(w, model, err)
		return
	}
	req, err := kserve.DecodeRequest(body, headerLen)
	if err != nil {
		s.fail(w, model, err)
		return
	}
	key, batchable := kserve.BatchKey(req)
	if !batchable {
		// Shared memory, sequences, ...: Triton handles those itself.
		s.passBuffered(w, r, raw)
		return
	}
	rows, err := kserve.Rows(req)
	if err != nil {
		s.fail(w, model, err)
		return
	}
	call := &dispatcher.Call{Version: chi.URLParam(r, "version"), Req: req, Rows: int(rows), Key: key}
	if call.Version != "" {
		call.Key = "v" + call.Version + "\x00" + key
	}
	if err := scheduleParams(req, call, start); err != nil {
		s.fail(w, model, err)
		return
	}
	res := s.o.Batcher.Submit(r.Context(), model, call)
	if res.Err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		s.fail(w, model, res.Err)
		return
	}
	defer res.Release()
	if err := writeResponse(w, r, res.Resp); err != nil {
		s.log.Debug("writing response", "model", model, "err", err)
	}
	s.m.latencyOf(model).Observe(time.Since(start).Seconds())
}

// scheduleParams reads Triton's schedule-policy parameters: "priority"
// (1 is highest, 0 the default level) and "timeout" in microseconds.
func scheduleParams(req *kserve.Request, c *dispatcher.Call, now time.Time) error {
	if v, ok := req.Parameters["priority"]; ok {
		p, ok := req.Parameters.Int("priority")
		if !ok || p < 0 {
			return &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("parameter 'priority' must be a non-negative integer, got %v", v)}
		}
		c.Priority = uint64(p)
	}
	if v, ok := req.Parameters[kserve.ParamTimeout]; ok {
		us, ok := req.Parameters.Int(kserve.ParamTimeout)
		if !ok || us < 0 {
			return &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("parameter 'timeout' must be a non-negative integer of microseconds, got %v", v)}
		}
		if us > 0 {
			c.Expire = now.Add(time.Duration(us) * time.Microsecond)
		}
	}
	return nil
}

// readBody reads the whole body within the size limit and decodes a
// Content-Encoding of gzip or deflate. raw is the body as sent, body the
// decoded one (the same slice when not encoded).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (raw, body []byte, err error) {
	limit := s.o.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, nil, tooLarge(limit)
	}
	// Reserve the declared length only up to reserveMax: a client that
	// declares 64 MiB and sends nothing must not hold 64 MiB.
	buf := make([]byte, 0, min(max(r.ContentLength, 512), reserveMax)+1)
	raw, err = readAll(http.MaxBytesReader(w, r.Body, limit), buf, r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, nil, tooLarge(limit)
		}
		return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "reading request body: " + err.Error()}
	}
	if r.ContentLength >= 0 && int64(len(raw)) != r.ContentLength {
		return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("request body has %d bytes, Content-Length says %d", len(raw), r.ContentLength)}
	}
	var dec io.ReadCloser
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
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
	body, err = readAll(io.LimitReader(dec, limit+1), make([]byte, 0, min(4*int64(len(raw)), limit+1)), -1)
	switch {
	case err != nil:
		return nil, nil, &kserve.Error{Status: http.StatusBadRequest, Msg: "decompressing body: " + err.Error()}
	case int64(len(body)) > limit:
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

// readAll reads r to its end into buf. A full buffer doubles, but not past
// declared+1 bytes when the length is known (declared >= 0; the extra byte
// lets the last read see EOF without growing), so memory follows the bytes
// received, at most twice over, and an honest large body is read with a
// few regrowths.
func readAll(r io.Reader, buf []byte, declared int64) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			grow := max(cap(buf), 512)
			if declared > int64(len(buf)) {
				grow = int(min(int64(grow), declared+1-int64(len(buf))))
			}
			buf = slices.Grow(buf, grow)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

func (s *Server) fail(w http.ResponseWriter, model string, err error) {
	status := http.StatusInternalServerError
	msg := err.Error()
	var ke *kserve.Error
	switch {
	case errors.As(err, &ke):
		status = ke.Status
	case errors.Is(err, dispatcher.ErrUnknownModel):
		status = http.StatusNotFound
	}
	if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", strconv.Itoa(max(int(s.o.RetryAfter.Round(time.Second)/time.Second), 1)))
	}
	s.m.Errors.WithLabelValues(model, strconv.Itoa(status)).Inc()
	kserve.WriteError(w, status, msg)
}

// writeResponse writes a caller's response, compressed when the client
// accepts gzip or deflate, as Triton does.
func writeResponse(w http.ResponseWriter, r *http.Request, resp *kserve.Response) error {
	enc := acceptedEncoding(r.Header.Get("Accept-Encoding"))
	if enc == "" {
		err := kserve.WriteResponse(w, resp)
		if err != nil && w.Header().Get("Content-Type") == "" {
			// WriteResponse sets its headers only once the response has
			// encoded: nothing is written yet and the caller is owed an
			// error, not an empty 200.
			kserve.WriteError(w, http.StatusInternalServerError, "encoding response: "+err.Error())
		}
		return err
	}
	body, headerLen, err := kserve.AppendResponse(nil, resp)
	if err != nil {
		kserve.WriteError(w, http.StatusInternalServerError, "encoding response: "+err.Error())
		return err
	}
	var zbuf bytes.Buffer
	var zw io.WriteCloser
	if enc == "gzip" {
		zw = gzip.NewWriter(&zbuf)
	} else {
		zw = zlib.NewWriter(&zbuf)
	}
	zw.Write(body)
	zw.Close()
	h := w.Header()
	h.Set("Content-Encoding", enc)
	h.Set("Content-Length", strconv.Itoa(zbuf.Len()))
	if headerLen >= 0 {
		h.Set("Content-Type", "application/octet-stream")
		h.Set(kserve.HeaderContentLength, strconv.Itoa(headerLen))
	} else {
		h.Set("Content-Type", "application/json")
	}
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(zbuf.Bytes())
	return err
}

// acceptedEncoding picks gzip or deflate if the client accepts one.
func acceptedEncoding(h string) string {
	if h == "" {
		return ""
	}
	for _, part := range strings.Split(h, ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if strings.Contains(strings.ReplaceAll(q, " ", ""), "q=0") && !strings.Contains(q, "q=0.") {
			continue
		}
		if name == "gzip" || name == "deflate" {
			return name
		}
	}
	return ""
}
