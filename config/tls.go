package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// TLS turns TLS on for the client-facing doors. The files are re-read
// when they change (package server), so a renewed certificate is served
// without a restart; the paths themselves are read at start only.
type TLS struct {
	Cert     string `yaml:"cert" help:"PEM certificate (chain) of the HTTP and gRPC doors; with tls.key it turns TLS on (empty: plain text); re-read when the file changes"`
	Key      string `yaml:"key" help:"PEM private key of tls.cert; re-read when the file changes"`
	ClientCA string `yaml:"client_ca" help:"PEM CA certificates: every client must present a certificate one of them signed (mutual TLS), or its handshake fails; empty: no client certificate asked"`
	Admin    bool   `yaml:"admin" help:"serve the admin address over TLS too, with tls.cert and tls.client_ca (false: plain HTTP; keep it private)"`
}

// On reports whether the doors speak TLS.
func (t TLS) On() bool { return t.Cert != "" }

// UpstreamTLS is how the proxy speaks TLS to Triton: over HTTP when the
// upstream URL is https, over gRPC when upstream_tls.grpc is set (Triton's
// --grpc-use-ssl).
type UpstreamTLS struct {
	GRPC               bool   `yaml:"grpc" help:"speak TLS to upstream_grpc (Triton started with --grpc-use-ssl); the HTTP upstream speaks TLS when its URL is https"`
	CA                 string `yaml:"ca" help:"PEM CA certificates that verify the upstream's certificate (empty: the system's roots)"`
	Cert               string `yaml:"cert" help:"PEM client certificate presented to an upstream that asks for one (Triton's --grpc-use-ssl-mutual); re-read when the file changes"`
	Key                string `yaml:"key" help:"PEM private key of upstream_tls.cert"`
	ServerName         string `yaml:"server_name" help:"name the upstream's certificate must carry (empty: the upstream's host)"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify" help:"accept any upstream certificate unverified (tests only: it leaves the connection open to interception)"`
}

// upstreamTLSOn reports whether any call to the upstream speaks TLS.
func (c *Config) upstreamTLSOn() bool {
	return c.UpstreamTLS.GRPC || strings.HasPrefix(strings.ToLower(c.Upstream), "https://")
}

// validTLS checks that the TLS options go together; checkTLS reads them.
func (c *Config) validTLS() error {
	var errs []error
	t, u := c.TLS, c.UpstreamTLS
	if (t.Cert == "") != (t.Key == "") {
		errs = append(errs, fieldErr("tls.cert", "and tls.key go together: give both or neither"))
	}
	if t.ClientCA != "" && t.Cert == "" {
		errs = append(errs, fieldErr("tls.client_ca", "needs tls.cert and tls.key: client certificates are asked only over TLS"))
	}
	if t.Admin && t.Cert == "" {
		errs = append(errs, fieldErr("tls.admin", "needs tls.cert and tls.key"))
	}
	if (u.Cert == "") != (u.Key == "") {
		errs = append(errs, fieldErr("upstream_tls.cert", "and upstream_tls.key go together: give both or neither"))
	}
	if !c.upstreamTLSOn() && (u.CA != "" || u.Cert != "" || u.ServerName != "" || u.InsecureSkipVerify) {
		errs = append(errs, fieldErr("upstream_tls", "is set but no upstream call speaks TLS: make upstream an https URL, or set upstream_tls.grpc"))
	}
	return errors.Join(errs...)
}

// checkTLS reads the certificates, keys and CA files, so that a wrong
// path or a key that does not match its certificate stops the start (or
// a reload) instead of failing every handshake.
func (c *Config) checkTLS() error {
	var errs []error
	pair := func(field, cert, key string) {
		if cert == "" || key == "" {
			return
		}
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			errs = append(errs, fieldErr(field, "%v", err))
		}
	}
	pair("tls.cert", c.TLS.Cert, c.TLS.Key)
	pair("upstream_tls.cert", c.UpstreamTLS.Cert, c.UpstreamTLS.Key)
	for _, ca := range []struct{ field, path string }{{"tls.client_ca", c.TLS.ClientCA}, {"upstream_tls.ca", c.UpstreamTLS.CA}} {
		if ca.path == "" {
			continue
		}
		if _, err := ReadCertPool(ca.path); err != nil {
			errs = append(errs, fieldErr(ca.field, "%v", err))
		}
	}
	return errors.Join(errs...)
}

// ReadCertPool reads a PEM file of CA certificates.
func ReadCertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseCertPool(path, pem)
}

// ParseCertPool parses PEM CA certificates read from path (which its
// error names).
func ParseCertPool(path string, pem []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
