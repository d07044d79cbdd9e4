package server

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/rawconn"
)

// fileStamp tells whether a file changed since it was read: a renewal
// (cert-manager, certbot, a mounted Secret) replaces the file, and with it
// its modification time or size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stamps(paths []string) []fileStamp {
	out := make([]fileStamp, len(paths))
	for i, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			out[i] = fileStamp{fi.ModTime(), fi.Size()}
		}
	}
	return out
}

// watched is a value read from files and read again, at the next use,
// when one of them changes. A new read that fails (a rotation caught
// between its certificate and its key) keeps the last good value, says so
// once, and is tried again when the files change again.
type watched[T any] struct {
	what  string
	paths []string
	load  func() (T, error)
	log   *slog.Logger

	mu   sync.Mutex
	seen []fileStamp // of the value held
	bad  []fileStamp // of the last read that failed
	val  T
}

func newWatched[T any](what string, log *slog.Logger, load func() (T, error), paths ...string) (*watched[T], error) {
	w := &watched[T]{what: what, paths: paths, load: load, log: log, seen: stamps(paths)}
	v, err := load()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	w.val = v
	return w, nil
}

// get returns the value, read again first if its files changed. Called
// at each TLS handshake: a stat of each file, no read, while they stay.
func (w *watched[T]) get() T {
	now := stamps(w.paths)
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Equal(now, w.seen) || slices.Equal(now, w.bad) {
		return w.val
	}
	v, err := w.load()
	if err != nil {
		w.bad = now
		w.log.Error("TLS file changed but cannot be read; the previous one is kept", "what", w.what, "files", w.paths, "err", err)
		return w.val
	}
	w.val, w.seen, w.bad = v, now, nil
	w.log.Info("TLS file re-read", "what", w.what, "files", w.paths)
	return w.val
}

func watchPair(what, cert, key string, log *slog.Logger) (*watched[*tls.Certificate], error) {
	return newWatched(what, log, func() (*tls.Certificate, error) {
		pair, err := tls.LoadX509KeyPair(cert, key)
		return &pair, err
	}, cert, key)
}

// doorTLS is the TLS of the client-facing doors (tls.*): the certificate,
// and the CAs of client certificates when they are required, each re-read
// when its files change.
type doorTLS struct {
	pair    *watched[*tls.Certificate]
	clients *watched[*x509.CertPool] // nil: no client certificate asked
}

func newDoorTLS(c config.TLS, log *slog.Logger) (*doorTLS, error) {
	pair, err := watchPair("tls.cert", c.Cert, c.Key, log)
	if err != nil {
		return nil, err
	}
	d := &doorTLS{pair: pair}
	if c.ClientCA != "" {
		load := func() (*x509.CertPool, error) { return config.ReadCertPool(c.ClientCA) }
		if d.clients, err = newWatched("tls.client_ca", log, load, c.ClientCA); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// config is the server configuration of a door speaking protos (ALPN).
// Each handshake gets the certificate and client CAs current then; the
// configuration built from them is kept until they change, and with it
// its session ticket keys.
func (d *doorTLS) config(protos ...string) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protos}
	var (
		mu       sync.Mutex
		last     *tls.Config
		lastPair *tls.Certificate
		lastPool *x509.CertPool
	)
	get := func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pair := d.pair.get()
		var pool *x509.CertPool
		if d.clients != nil {
			pool = d.clients.get()
		}
		mu.Lock()
		defer mu.Unlock()
		if last == nil || pair != lastPair || pool != lastPool {
			next := base.Clone()
			next.Certificates = []tls.Certificate{*pair}
			if pool != nil {
				// As Triton's --grpc-use-ssl-mutual: no certificate, or one
				// no CA here signed, fails the handshake.
				next.ClientCAs, next.ClientAuth = pool, tls.RequireAndVerifyClientCert
			}
			last, lastPair, lastPool = next, pair, pool
		}
		return last, nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protos, GetConfigForClient: get}
}

// upstreamTLS is the client configuration toward Triton (upstream_tls.*)
// for the host of target, or nil when the call speaks plain text. The
// client certificate is re-read when its files change; the CAs at start.
func upstreamTLS(c config.UpstreamTLS, on bool, host string, log *slog.Logger) (*tls.Config, error) {
	if !on {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if tc.ServerName == "" {
		tc.ServerName = host
	}
	if c.CA != "" {
		pool, err := config.ReadCertPool(c.CA)
		if err != nil {
			return nil, fmt.Errorf("upstream_tls.ca: %w", err)
		}
		tc.RootCAs = pool
	}
	if c.Cert != "" {
		pair, err := watchPair("upstream_tls.cert", c.Cert, c.Key, log)
		if err != nil {
			return nil, err
		}
		tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.get(), nil }
	}
	return tc, nil
}

// hostOf is the host name of a URL or of HOST:PORT, for upstreamTLS.
func hostOf(target string) string {
	if u, err := url.Parse(target); err == nil && u.Hostname() != "" {
		return u.Hostname()
	}
	if u, err := url.Parse("//" + target); err == nil {
		return u.Hostname()
	}
	return target
}

// serverConfig is config, or nil without TLS.
func (d *doorTLS) serverConfig(protos ...string) *tls.Config {
	if d == nil {
		return nil
	}
	return d.config(protos...)
}

// listener makes ln speak TLS, or returns it as it is without TLS. The
// TCP connections under TLS make raw reads and writes (package rawconn).
func (d *doorTLS) listener(ln net.Listener, protos ...string) net.Listener {
	if d == nil {
		return ln
	}
	return tls.NewListener(rawconn.Listener{Listener: ln}, d.config(protos...))
}

// httpClient is a net/http client of the upstream's management API (or
// its metrics) with tc (nil: the default transport's), whose every
// request carries header (upstream_headers: the proxy's own credentials).
func httpClient(tc *tls.Config, timeout time.Duration, header map[string]string) *http.Client {
	c := &http.Client{Timeout: timeout}
	if tc != nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		c.Transport = t
	}
	if len(header) > 0 {
		base := c.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		c.Transport = headerTransport{base: base, header: header}
	}
	return c
}

// headerTransport sets the proxy's own headers on each request.
type headerTransport struct {
	base   http.RoundTripper
	header map[string]string
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change the request it was given
	for k, v := range t.header {
		r.Header.Set(k, v)
	}
	return t.base.RoundTrip(r)
}
