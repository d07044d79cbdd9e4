// Package hostclient builds the fasthttp client to one upstream URL, the
// part the batching dispatcher and the pass-through proxy share: where to
// dial, whether and how to speak TLS, and how long idle connections live.
// Each caller then sets what differs (connection limit, timeouts, retries,
// streaming).
package hostclient

import (
	"crypto/tls"
	"errors"
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
// a port gets the scheme's default; an IPv6 host keeps its brackets.
func New(u *url.URL) *fasthttp.HostClient {
	hc := &fasthttp.HostClient{
		Addr:                     Addr(u),
		IsTLS:                    u.Scheme == "https",
		MaxIdleConnDuration:      90 * time.Second,
		NoDefaultUserAgentHeader: true,
		// fasthttp's own dialer (its DNS cache, its timeout) with raw
		// reads and writes on the connection (package rawconn says why).
		Dial: rawconn.Dialer(fasthttp.Dial),
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
