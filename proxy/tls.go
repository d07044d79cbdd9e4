package proxy

import (
	"crypto/tls"

	"github.com/valyala/fasthttp"
)

// UseUpstreamTLS sets the TLS of pass-through calls to an https upstream
// (upstream_tls: its CAs, a client certificate). Call it before Serve; a
// Forwarder given in Options is left as it is.
func (s *Server) UseUpstreamTLS(tc *tls.Config) {
	if hc, ok := s.fwd.(*fasthttp.HostClient); ok && tc != nil && hc.IsTLS {
		hc.TLSConfig = tc
	}
}
