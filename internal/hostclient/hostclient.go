// Package hostclient builds the fasthttp client to one upstream URL, the
// part the batching dispatcher and the pass-through proxy share: where to
// dial, whether and how to speak TLS, how long idle connections live, and
// that a request's path is sent as built, never normalised.
// Each caller then sets what differs (connection limit, timeouts, retries,
// streaming).
package hostclient

import (
	"crypto/tls"
	"net"
	"net/url"
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
		// The path goes upstream exactly as the caller built it: fasthttp
		// would otherwise decode it and resolve its dot segments, so that
		// an escaped slash or a ".." in a model name or version reached
		// another path than the one built (and the call counted against
		// a model it never reached).
		DisablePathNormalizing: true,
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
