package proxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/kserve"
)

// fastTransport is the http.RoundTripper of pass-through: ReverseProxy keeps
// the HTTP semantics (hop-by-hop headers, flushing of event streams), and
// fasthttp does the exchange with Triton on the handler's own goroutine.
// net/http's Transport hands every request to a write goroutine and every
// answer back from a read goroutine; on two cores those wake-ups were most
// of what pass-through added to a request's latency.
//
// A client that leaves while Triton is still working does not abort the
// upstream call (fasthttp has no context): the connection is held until
// Triton answers or the timeout passes. A client that leaves during a
// streamed answer closes the upstream connection at once.
type fastTransport struct {
	hc      *fasthttp.HostClient
	timeout time.Duration
}

// respBodyInMemory is the largest answer read whole before it is handed
// on; larger ones, and those of unknown length (server-sent events), are
// streamed.
const respBodyInMemory = 64 << 10

// newFastTransport returns a pass-through transport to the upstream base
// URL; timeout bounds one exchange (0: none).
func newFastTransport(up *url.URL, timeout time.Duration) *fastTransport {
	addr := up.Host
	if up.Port() == "" {
		addr = net.JoinHostPort(up.Hostname(), map[bool]string{true: "443", false: "80"}[up.Scheme == "https"])
	}
	hc := &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: up.Scheme == "https",
		// Pass-through has no queue: it holds a connection per request in
		// flight, as net/http's Transport did without a per-host cap.
		MaxConns:                 1 << 16,
		MaxIdleConnDuration:      90 * time.Second,
		StreamResponseBody:       true,
		MaxResponseBodySize:      respBodyInMemory,
		DisablePathNormalizing:   true, // the path goes upstream as the client wrote it
		NoDefaultUserAgentHeader: true,
		RetryIfErr:               retryStale,
	}
	if hc.IsTLS {
		hc.TLSConfig = &tls.Config{ServerName: up.Hostname(), MinVersion: tls.VersionTLS12}
	}
	return &fastTransport{hc: hc, timeout: timeout}
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

// errUpstreamTimeout is a pass-through exchange past its deadline.
var errUpstreamTimeout = errors.New("upstream did not answer in time")

// RoundTrip implements http.RoundTripper.
func (t *fastTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	if err := t.buildRequest(req, r); err != nil {
		return nil, err
	}
	deadline, ok := r.Context().Deadline()
	if t.timeout > 0 {
		if d := time.Now().Add(t.timeout); !ok || d.Before(deadline) {
			deadline, ok = d, true
		}
	}
	resp := fasthttp.AcquireResponse()
	var err error
	if ok {
		err = t.hc.DoDeadline(req, resp, deadline)
	} else {
		err = t.hc.Do(req, resp)
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		if errors.Is(err, fasthttp.ErrTimeout) {
			return nil, errUpstreamTimeout
		}
		return nil, err
	}
	return toHTTPResponse(resp, r), nil
}

// buildRequest copies r, already rewritten by ReverseProxy (upstream URL,
// hop-by-hop headers removed), into req.
func (t *fastTransport) buildRequest(req *fasthttp.Request, r *http.Request) error {
	req.Header.DisableNormalizing() // net/http already canonicalised the names
	req.Header.SetNoDefaultContentType(true)
	req.UseHostHeader = true
	req.SetRequestURI(r.URL.Scheme + "://" + r.URL.Host + r.URL.RequestURI())
	req.Header.SetMethod(r.Method)
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	req.Header.SetHost(host)
	for k, vv := range r.Header {
		switch k {
		case "Content-Length", "Transfer-Encoding", "Host":
			continue // fasthttp frames the body itself
		case "Expect":
			continue // the client already had its 100 Continue; the body goes whole
		}
		for _, v := range vv {
			req.Header.Add(k, v)
		}
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	n := r.ContentLength
	if n < 0 || n > smallBody {
		req.SetBodyStream(r.Body, int(n)) // -1: sent chunked
		return nil
	}
	// Small bodies go in the request's pooled buffer, so headers and body
	// leave in one write and a stale connection can be retried.
	buf := slices.Grow(req.SwapBody(nil)[:0], int(n))[:n]
	if _, err := io.ReadFull(r.Body, buf); err != nil {
		req.SwapBody(buf)
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return &kserve.Error{Status: http.StatusBadRequest,
			Msg: fmt.Sprintf("request body ends before its Content-Length %d: %v", n, err)}
	}
	req.SwapBody(buf)
	return nil
}

// toHTTPResponse hands fasthttp's answer to ReverseProxy. The body owns
// resp and gives it back when closed.
func toHTTPResponse(resp *fasthttp.Response, r *http.Request) *http.Response {
	resp.Header.SetNoDefaultContentType(true) // no invented Content-Type
	h := make(http.Header, resp.Header.Len()+2)
	for k, v := range resp.Header.All() {
		key := commonHeader(k)
		h[key] = append(h[key], string(v))
	}
	cl := int64(resp.Header.ContentLength())
	if cl < 0 {
		cl = -1 // chunked or until close: ReverseProxy flushes as it copies
	}
	code := resp.StatusCode()
	return &http.Response{
		Status:        strconv.Itoa(code) + " " + http.StatusText(code),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: cl,
		Body:          &fastBody{resp: resp, r: resp.BodyStream()},
		Request:       r,
	}
}

// commonHeader returns the answer's usual header names without allocating.
func commonHeader(k []byte) string {
	switch string(k) {
	case "Content-Type":
		return "Content-Type"
	case "Content-Length":
		return "Content-Length"
	case kserve.HeaderContentLength:
		return kserve.HeaderContentLength
	case "Content-Encoding":
		return "Content-Encoding"
	case "Date":
		return "Date"
	case "Server":
		return "Server"
	case "Connection":
		return "Connection"
	}
	return string(k)
}

// fastBody reads an answer's body. Read to its end, the connection goes
// back to the pool; closed early (the client left mid-stream), the
// connection is closed so that no unread bytes reach the next request.
type fastBody struct {
	resp *fasthttp.Response
	r    io.Reader
	eof  bool
	done bool
}

var errAbandoned = errors.New("pass-through answer abandoned before its end")

func (b *fastBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *fastBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if b.eof {
		fasthttp.ReleaseResponse(b.resp) // closes the stream cleanly: the connection is reused
		return nil
	}
	if c, ok := b.r.(interface{ CloseWithError(error) error }); ok {
		c.CloseWithError(errAbandoned) // closes the connection
		// resp still refers to the closed stream: left to the collector
		// rather than reset and closed a second time.
		return nil
	}
	fasthttp.ReleaseResponse(b.resp)
	return nil
}
