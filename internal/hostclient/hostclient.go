// Package hostclient builds the fasthttp client to one upstream URL, the
// part the batching dispatcher and the pass-through proxy share: where to
// dial, whether and how to speak TLS, how long idle connections live, and
// that a request's path is sent as built, never normalised.
// Each caller then sets what differs (connection limit, timeouts, retries,
// streaming).
package hostclient

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/internal/rawconn"
)

// New returns a HostClient for the http or https upstream u. A URL without
// a port gets the scheme's default; an IPv6 host keeps its brackets. Its
// connections' deadlines may fire a little late (rawconn).
func New(u *url.URL) *fasthttp.HostClient { return newClient(u, rawconn.Dialer) }

// NewExact is New with its connections' deadlines kept exactly
// (rawconn.ExactDialer): for a client whose deadlines are its callers'.
func NewExact(u *url.URL) *fasthttp.HostClient { return newClient(u, rawconn.ExactDialer) }

type dialWrapper func(func(addr string) (net.Conn, error)) func(addr string) (net.Conn, error)

func newClient(u *url.URL, wrap dialWrapper) *fasthttp.HostClient {
	hc := &fasthttp.HostClient{
		Addr:                     Addr(u),
		IsTLS:                    u.Scheme == "https",
		MaxIdleConnDuration:      90 * time.Second,
		NoDefaultUserAgentHeader: true,
		// The path goes upstream exactly as the caller built it: fasthttp
		// would otherwise decode it and resolve its dot segments, so that
		// an escaped slash or a ".." in a model name or version reached
		// another path than the one built (and the call counted against
		// a model it never reached).
		DisablePathNormalizing: true,
		// fasthttp's own dialer (its DNS cache, its timeout) with raw
		// reads and writes on the connection (package rawconn says why),
		// each connection watched for answers that break off or overrun
		// (answerConn).
		Dial: watchAnswers(wrap(fasthttp.Dial), u.Scheme != "https"),
	}
	if hc.IsTLS {
		hc.TLSConfig = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12}
	}
	return hc
}

// Addr is the host:port to dial for u: its port, or 443 for https and 80
// otherwise.
func Addr(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	port := "80"
	if u.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// Cause says what went wrong with an exchange with the upstream in words
// fit for a client: the kind of failure, without the addresses the error
// carries (the upstream's host:port, the proxy's own, a resolver's),
// which are the operator's to read in the log, not a client's.
func Cause(err error) string {
	var dns *net.DNSError
	switch {
	case errors.Is(err, ErrAnswerCut):
		return "answer broke off"
	case errors.Is(err, ErrUnsolicited):
		return "the last answer overran its length"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the upstream"
	case errors.As(err, &dns):
		return "the upstream's name does not resolve"
	case errors.Is(err, fasthttp.ErrConnectionClosed):
		return "connection closed before an answer"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "answer cut short"
	case errors.Is(err, fasthttp.ErrTimeout), errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	}
	var tlsErr tls.AlertError
	var cert *tls.CertificateVerificationError
	if errors.As(err, &tlsErr) || errors.As(err, &cert) {
		return "TLS handshake failed"
	}
	return "connection failed"
}

// ErrAnswerCut marks a connection that failed while the upstream's answer
// was being read: the upstream answered in part and broke off (a reset, a
// connection error). Unlike a failure before the answer began, it is the
// upstream's fault, and the request was served: retrying it costs the
// upstream the work again.
var ErrAnswerCut = errors.New("the upstream's answer broke off")

// ErrUnsolicited fails a request before it is sent on a kept-alive
// connection that holds bytes no request asked for: what came after the
// last answer ended, by its Content-Length, is not the next answer (an
// upstream whose Content-Length lied, or that answered twice). The
// connection is closed; the request may go again on another, as nothing
// of it was sent. It is an ErrConnectionClosed too, so that a client that
// retries stale connections retries it.
var ErrUnsolicited = fmt.Errorf("%w: bytes came after the last answer ended", fasthttp.ErrConnectionClosed)

// watchAnswers returns dial with each connection it makes wrapped as an
// answerConn; unsolicited: whether to check for unsolicited bytes (not
// under TLS, where a record may legitimately wait: a session ticket).
func watchAnswers(dial fasthttp.DialFunc, unsolicited bool) fasthttp.DialFunc {
	return func(addr string) (net.Conn, error) {
		c, err := dial(addr)
		if err != nil {
			return nil, err
		}
		return &answerConn{Conn: c, unsolicited: unsolicited}, nil
	}
}

// answerConn is an upstream connection that tells what an HTTP client
// cannot by itself: whether a read failed after the answer began (its
// error is then an ErrAnswerCut too), and whether bytes wait unread when
// the next request starts (ErrUnsolicited). fasthttp reads and writes one
// exchange at a time, so a write after reads starts a request.
type answerConn struct {
	net.Conn
	unsolicited bool
	answer      int64 // bytes read since the last write: the answer so far
}

func (c *answerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.answer += int64(n)
	if err != nil && err != io.EOF && c.answer > 0 && !isTimeout(err) {
		// Not EOF: fasthttp reads a body without a length up to it. Not a
		// timeout: it stays one.
		return n, &cutError{err}
	}
	return n, err
}

func (c *answerConn) Write(p []byte) (int, error) {
	if c.answer > 0 {
		c.answer = 0
		if c.unsolicited && rawconn.Unread(c.Conn) {
			c.Conn.Close()
			return 0, ErrUnsolicited
		}
	}
	return c.Conn.Write(p)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// cutError is a read error after the answer began: it is err, and an
// ErrAnswerCut.
type cutError struct{ err error }

func (e *cutError) Error() string   { return e.err.Error() }
func (e *cutError) Unwrap() []error { return []error{ErrAnswerCut, e.err} }
