package dispatcher

import "crypto/tls"

// UseTLS sets the TLS of an https upstream (upstream_tls: its CAs, a
// client certificate); without it the system's roots verify the upstream.
// Call it before the first batch.
func (u *HTTPUpstream) UseTLS(tc *tls.Config) {
	if tc != nil && u.hc.IsTLS {
		u.hc.TLSConfig = tc
	}
}
