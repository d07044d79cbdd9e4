package loadgen

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/kserve"
)

// The request path uses fasthttp: against a loopback server it costs about
// half of net/http's CPU per request and no allocations (BenchmarkClient in
// client_test.go compares the two), and the load generator shares the
// machine with the server it measures.

// endpoint is the parsed --target plus model: where infer requests go.
type endpoint struct {
	addr     string // host:port for dialing
	tls      bool
	inferURI string // full URL of the infer endpoint
	metaURL  string // full URL of the model metadata endpoint
}

func parseEndpoint(target, model, version string) (endpoint, error) {
	if model == "" {
		return endpoint{}, fmt.Errorf("no model name: the infer URL is <target>/v2/models/<model>/infer")
	}
	if !strings.Contains(target, "://") {
		return endpoint{}, fmt.Errorf("target %q: scheme must be http or https, e.g. http://%s", target, target)
	}
	u, err := url.Parse(target)
	if err != nil {
		return endpoint{}, fmt.Errorf("target %q: %w", target, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return endpoint{}, fmt.Errorf("target %q: scheme must be http or https, e.g. http://127.0.0.1:8000", target)
	}
	if u.Host == "" {
		return endpoint{}, fmt.Errorf("target %q has no host, e.g. http://127.0.0.1:8000", target)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return endpoint{}, fmt.Errorf("target %q: give the server's base URL without query or fragment", target)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	base := *u
	base.Path = strings.TrimSuffix(u.Path, "/")
	base.RawPath = ""
	model = url.PathEscape(model)
	modelPath := base.String() + "/v2/models/" + model
	if version != "" {
		modelPath += "/versions/" + url.PathEscape(version)
	}
	return endpoint{
		addr:     net.JoinHostPort(u.Hostname(), port),
		tls:      u.Scheme == "https",
		inferURI: modelPath + "/infer",
		metaURL:  modelPath,
	}, nil
}

// answer is one response as the request path needs it. Its slices alias
// the session's buffers and are valid until the session's next post.
type answer struct {
	status    int
	body      []byte
	headerLen []byte // Inference-Header-Content-Length as sent, nil when absent
	grpc      bool   // body is a ModelInferResponse message (or a gRPC status message)
}

// transport owns the connections of one run, over HTTP or gRPC.
type transport interface {
	newSession(binary bool) sender
	// abort ends the requests in flight at once.
	abort()
	close()
}

// sender is one worker's way to send a prebuilt request.
type sender interface {
	post(p *payload) (answer, error)
}

// httpClient owns the connections of one run. Each worker has a session of
// its own, so a request reuses that session's request and response buffers.
type httpClient struct {
	hc      *fasthttp.HostClient
	ep      endpoint
	timeout time.Duration
	conns   connSet
}

func newHTTPClient(ep endpoint, maxConns int, timeout time.Duration) *httpClient {
	c := &httpClient{ep: ep, timeout: timeout}
	dialer := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	c.hc = &fasthttp.HostClient{
		Addr:  ep.addr,
		IsTLS: ep.tls,
		Dial: func(addr string) (net.Conn, error) {
			conn, err := dialer.Dial("tcp", addr)
			if err != nil {
				return nil, err
			}
			return c.conns.add(conn), nil
		},
		MaxConns:            maxConns,
		MaxIdleConnDuration: 10 * time.Second,
		// Never resend: a retried request would be counted once and
		// served twice, and the load would no longer be the one asked.
		// A keep-alive connection the server closed just before reuse
		// therefore shows as a "connection" error; idle connections are
		// dropped after 10 s, before common server idle timeouts.
		RetryIfErr:               func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		NoDefaultUserAgentHeader: true,
		DisablePathNormalizing:   true,
	}
	return c
}

// abort closes every connection, so that requests in flight fail at once;
// Run calls it when its context is canceled.
func (c *httpClient) abort() { c.conns.closeAll() }

func (c *httpClient) close() { c.hc.CloseIdleConnections() }

// session is one worker's reusable request state.
type session struct {
	c    *httpClient
	req  fasthttp.Request
	resp fasthttp.Response
}

func (c *httpClient) newSession(binary bool) sender {
	s := &session{c: c}
	s.req.SetRequestURI(c.ep.inferURI)
	s.req.Header.SetMethod(fasthttp.MethodPost)
	if binary {
		s.req.Header.SetContentType("application/octet-stream")
	} else {
		s.req.Header.SetContentType("application/json")
	}
	return s
}

var headerContentLength = []byte(kserve.HeaderContentLength)

// post sends one prebuilt body and reads the whole answer.
func (s *session) post(p *payload) (answer, error) {
	s.req.SetBodyRaw(p.body)
	if p.headerLen >= 0 {
		s.req.Header.SetCanonical(headerContentLength, p.headerLenText)
	}
	s.resp.Reset()
	if err := s.c.hc.DoTimeout(&s.req, &s.resp, s.c.timeout); err != nil {
		return answer{}, err
	}
	return answer{
		status:    s.resp.StatusCode(),
		body:      s.resp.Body(),
		headerLen: s.resp.Header.PeekBytes(headerContentLength),
	}, nil
}

// connSet tracks open connections so that a canceled run can close them.
type connSet struct {
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() { t.set.remove(t) })
	return t.Conn.Close()
}

func (s *connSet) add(c net.Conn) net.Conn {
	t := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return t // every use fails: the run is over
	}
	if s.conns == nil {
		s.conns = make(map[*trackedConn]struct{})
	}
	s.conns[t] = struct{}{}
	return t
}

func (s *connSet) remove(t *trackedConn) {
	s.mu.Lock()
	delete(s.conns, t)
	s.mu.Unlock()
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for t := range conns {
		t.Conn.Close()
	}
}
