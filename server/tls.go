package server

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/rawconn"
)

// fileStamp tells whether a file may have changed since it was read: a
// renewal (cert-manager, certbot, a mounted Secret) replaces the file, and
// with it its modification time or size, or at least its inode or change
// time (statusChange): a file written again with its old size and its
// modification time put back still shows. Whether it did change is its
// content's hash (watched.sum).
type fileStamp struct {
	mod    time.Time
	size   int64
	status statusChange
}

func stamps(paths []string) []fileStamp {
	out := make([]fileStamp, len(paths))
	for i, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			out[i] = fileStamp{fi.ModTime(), fi.Size(), statusOf(fi)}
		}
	}
	return out
}

// readFiles reads paths and hashes their contents together.
func readFiles(paths []string) ([][]byte, [sha256.Size]byte, error) {
	files := make([][]byte, len(paths))
	h := sha256.New()
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, [sha256.Size]byte{}, err
		}
		files[i] = b
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:]) // no two splits of the same bytes hash alike
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return files, sum, nil
}

// watched is a value read from files and read again, at the next use,
// when their stamps change; it is made again when their content did. A
// new read that fails (a rotation caught between its certificate and its
// key) keeps the last good value, says so once, and is tried again when
// the files change again.
type watched[T any] struct {
	what  string
	paths []string
	load  func(files [][]byte) (T, error) // from the files' contents, in paths' order
	log   *slog.Logger

	mu   sync.Mutex
	seen []fileStamp       // of the files when the value held was read
	sum  [sha256.Size]byte // of their content then
	bad  []fileStamp       // of the last read that failed
	val  T
}

func newWatched[T any](what string, log *slog.Logger, load func([][]byte) (T, error), paths ...string) (*watched[T], error) {
	w := &watched[T]{what: what, paths: paths, load: load, log: log, seen: stamps(paths)}
	files, sum, err := readFiles(paths)
	if err == nil {
		w.val, err = load(files)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	w.sum = sum
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
	files, sum, err := readFiles(w.paths)
	if err == nil && sum == w.sum {
		w.seen, w.bad = now, nil // touched, not changed
		return w.val
	}
	var v T
	if err == nil {
		v, err = w.load(files)
	}
	if err != nil {
		w.bad = now
		w.log.Error("TLS file changed but cannot be read; the previous one is kept", "what", w.what, "files", w.paths, "err", err)
		return w.val
	}
	w.val, w.seen, w.sum, w.bad = v, now, sum, nil
	w.log.Info("TLS file re-read", "what", w.what, "files", w.paths)
	return w.val
}

func watchPair(what, cert, key string, log *slog.Logger) (*watched[*tls.Certificate], error) {
	return newWatched(what, log, func(files [][]byte) (*tls.Certificate, error) {
		pair, err := tls.X509KeyPair(files[0], files[1])
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
		load := func(files [][]byte) (*x509.CertPool, error) { return config.ParseCertPool(c.ClientCA, files[0]) }
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
	base := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: aeadSuites, NextProtos: protos}
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
	return &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: aeadSuites, NextProtos: protos, GetConfigForClient: get}
}

// aeadSuites are the TLS 1.2 cipher suites the doors and the upstream
// client offer: forward-secret key exchange and authenticated encryption
// (GCM, ChaCha20-Poly1305) only. Go's default list still has the CBC
// suites with SHA-1 MACs, open to padding-oracle attacks (Lucky13); TLS
// 1.3 has only AEAD suites and ignores this list.
var aeadSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// upstreamTLS is the client configuration toward Triton (upstream_tls.*)
// for the host of target, or nil when the call speaks plain text. The
// client certificate is re-read when its files change; the CAs at start.
func upstreamTLS(c config.UpstreamTLS, on bool, host string, log *slog.Logger) (*tls.Config, error) {
	if !on {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, CipherSuites: aeadSuites, ServerName: c.ServerName, InsecureSkipVerify: c.InsecureSkipVerify}
	if tc.ServerName == "" {
		tc.ServerName = host
	}
	if c.InsecureSkipVerify {
		log.Warn("upstream_tls.insecure_skip_verify: the upstream's certificate is not verified, so anyone on the way can read and change the traffic; for tests only", "upstream", host)
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

// tlsInForce is the start-up log line's attributes: what each listener and
// each way to the upstream speaks ("plain", "TLS" or "mutual TLS"), so that
// a reader of the log sees TLS on without reading the configuration; nil
// when everything is plain text.
func tlsInForce(c *config.Config) []any {
	door := security(c.TLS.On(), c.TLS.ClientCA != "")
	admin := security(c.TLS.On() && c.TLS.Admin, c.TLS.ClientCA != "")
	https := strings.HasPrefix(strings.ToLower(c.Upstream), "https://")
	if !c.TLS.On() && !https && !c.UpstreamTLS.GRPC {
		return nil
	}
	attrs := []any{"listen", door, "admin", admin, "upstream", security(https, c.UpstreamTLS.Cert != "")}
	if c.GRPCListen != "" {
		attrs = append(attrs, "grpc_listen", door, "upstream_grpc", security(c.UpstreamTLS.GRPC, c.UpstreamTLS.Cert != ""))
	}
	return attrs
}

// security names what a connection speaks: TLS, with certificates on both
// sides when mutual.
func security(tls, mutual bool) string {
	switch {
	case !tls:
		return "plain"
	case mutual:
		return "mutual TLS"
	}
	return "TLS"
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
