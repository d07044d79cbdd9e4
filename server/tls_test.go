package server_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// sign makes a key and a certificate of it from tmpl, signed by ca (by
// the key itself when ca is nil), valid for the hour around now.
func sign(t *testing.T, tmpl *x509.Certificate, ca *testCA) (der []byte, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, big.NewInt(1<<62)); err != nil {
		t.Fatal(err)
	}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err = x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	der, key := sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for 127.0.0.1 and localhost,
// usable by a server and by a client.
func (ca *testCA) issue(t *testing.T, name string) (certPEM, keyPEM []byte) {
	t.Helper()
	der, key := sign(t, &x509.Certificate{Subject: pkix.Name{CommonName: name},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}, ca)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// files writes a certificate and key issued by ca under dir as
// NAME.crt and NAME.key and returns their paths.
func (ca *testCA) files(t *testing.T, dir, name string) (cert, key string) {
	t.Helper()
	c, k := ca.issue(t, name)
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, cert, c)
	writeFile(t, key, k)
	return cert, key
}

func (ca *testCA) file(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	writeFile(t, p, ca.pem)
	return p
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// clientTLS trusts ca and presents the pair issued by id, if any.
func clientTLS(t *testing.T, ca *testCA, id *testCA) *tls.Config {
	t.Helper()
	tc := &tls.Config{RootCAs: ca.pool(), ServerName: "localhost"}
	if id != nil {
		c, k := id.issue(t, "client")
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc
}

// httpsInfer posts one simple request to base over TLS on a connection
// of its own, and returns the error of the exchange or of its answer.
func httpsInfer(t *testing.T, base string, tc *tls.Config) error {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
	resp, err := c.Post(base+"/v2/models/simple/infer", "application/json", bytes.NewReader(simpleBody("tls", 3, 1)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return &statusErr{resp.StatusCode, string(body)}
	}
	return nil
}

type statusErr struct {
	code int
	body string
}

func (e *statusErr) Error() string { return http.StatusText(e.code) + ": " + e.body }

// grpcInfer sends one simple ModelInfer to addr over TLS on a connection
// of its own.
func grpcInfer(t *testing.T, addr string, tc *tls.Config) error {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	shape := []int64{1, 16}
	row := make([]int32, 16)
	_, err = pb.NewGRPCInferenceServiceClient(cc).ModelInfer(ctx, &pb.ModelInferRequest{
		ModelName: "simple",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: shape, Contents: &pb.InferTensorContents{IntContents: row}},
			{Name: "INPUT1", Datatype: "INT32", Shape: shape, Contents: &pb.InferTensorContents{IntContents: row}},
		},
	})
	return err
}

// TestTLSDoors serves both doors over TLS, with and without client
// certificates required, and checks who gets in: a client trusting the
// proxy's CA; with tls.client_ca, only one whose certificate that CA
// signed, the others failing at the handshake, as at Triton's gRPC port
// started with --grpc-use-ssl-mutual.
func TestTLSDoors(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	serverCA, clientCA, strangerCA := newCA(t, "server CA"), newCA(t, "client CA"), newCA(t, "stranger CA")
	for _, mutual := range []bool{false, true} {
		name := map[bool]string{false: "tls", true: "mtls"}[mutual]
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cert, key := serverCA.files(t, dir, "server")
			p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
				c.GRPCListen = "127.0.0.1:0"
				c.TLS.Cert, c.TLS.Key = cert, key
				if mutual {
					c.TLS.ClientCA = clientCA.file(t, dir, "clients.pem")
				}
			})
			base := "https://" + p.Addr().String()
			grpcAddr := p.GRPCAddr().String()
			with := clientTLS(t, serverCA, clientCA)
			if err := httpsInfer(t, base, with); err != nil {
				t.Errorf("HTTPS with a client certificate: %v", err)
			}
			if err := grpcInfer(t, grpcAddr, with); err != nil {
				t.Errorf("gRPC TLS with a client certificate: %v", err)
			}
			for _, c := range []struct {
				what string
				tc   *tls.Config
			}{
				{"no client certificate", clientTLS(t, serverCA, nil)},
				{"a client certificate of another CA", clientTLS(t, serverCA, strangerCA)},
			} {
				herr, gerr := httpsInfer(t, base, c.tc), grpcInfer(t, grpcAddr, c.tc)
				if !mutual && (herr != nil || gerr != nil) {
					t.Errorf("%s, no client CA set: HTTPS %v, gRPC %v", c.what, herr, gerr)
				}
				if mutual && (herr == nil || gerr == nil) {
					t.Errorf("%s, tls.client_ca set: HTTPS %v, gRPC %v; want both refused", c.what, herr, gerr)
				}
				var se *statusErr
				if mutual && errors.As(herr, &se) {
					t.Errorf("%s: refused with HTTP %d, want a failed handshake", c.what, se.code)
				}
			}
			if err := httpsInfer(t, base, &tls.Config{RootCAs: strangerCA.pool(), ServerName: "localhost"}); err == nil {
				t.Error("a client not trusting the proxy's CA got an answer")
			}
			resp, err := http.Post("http://"+p.Addr().String()+"/v2/models/simple/infer", "application/json", bytes.NewReader(simpleBody("plain", 1, 1)))
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Error("plain HTTP on the TLS door got 200")
				}
			}
			// The admin port stays plain HTTP unless tls.admin says otherwise.
			if code, _ := getText(t, p.Admin+"/status"); code != http.StatusOK {
				t.Errorf("plain admin /status: %d", code)
			}
		})
	}
}

// TestTLSAdmin serves the admin port over TLS with tls.admin.
func TestTLSAdmin(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	ca := newCA(t, "CA")
	cert, key := ca.files(t, t.TempDir(), "server")
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.TLS.Cert, c.TLS.Key, c.TLS.Admin = cert, key, true
	})
	admin := "https://" + p.AdminAddr().String()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(t, ca, nil)}}
	resp, err := c.Get(admin + "/status")
	if err != nil {
		t.Fatalf("HTTPS admin /status: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HTTPS admin /status: %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + p.AdminAddr().String() + "/status"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP admin /status answered 200 with tls.admin")
		}
	}
}

// TestTLSRotation replaces the certificate and key files of a serving
// proxy, and of the client CAs, and checks that new connections get the
// new ones, with no restart.
func TestTLSRotation(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	oldCA, newCA_ := newCA(t, "old CA"), newCA(t, "new CA")
	oldClients, newClients := newCA(t, "old clients"), newCA(t, "new clients")
	dir := t.TempDir()
	cert, key := oldCA.files(t, dir, "server")
	clientCAs := oldClients.file(t, dir, "clients.pem")
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.GRPCListen = "127.0.0.1:0"
		c.TLS.Cert, c.TLS.Key, c.TLS.ClientCA = cert, key, clientCAs
	})
	base, grpcAddr := "https://"+p.Addr().String(), p.GRPCAddr().String()
	if err := httpsInfer(t, base, clientTLS(t, oldCA, oldClients)); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}

	// Rotate: new files written in place, their times moved on so the
	// change shows whatever the file system's clock resolution.
	c, k := newCA_.issue(t, "server")
	writeFile(t, cert, c)
	writeFile(t, key, k)
	writeFile(t, clientCAs, newClients.pem)
	later := time.Now().Add(time.Minute)
	for _, f := range []string{cert, key, clientCAs} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	for _, door := range []struct {
		name  string
		infer func(*tls.Config) error
	}{
		{"HTTPS", func(tc *tls.Config) error { return httpsInfer(t, base, tc) }},
		{"gRPC", func(tc *tls.Config) error { return grpcInfer(t, grpcAddr, tc) }},
	} {
		if err := door.infer(clientTLS(t, newCA_, newClients)); err != nil {
			t.Errorf("%s after the rotation, new certificates: %v", door.name, err)
		}
		if err := door.infer(clientTLS(t, oldCA, newClients)); err == nil {
			t.Errorf("%s after the rotation: a client trusting only the old server CA got in", door.name)
		}
		if err := door.infer(clientTLS(t, newCA_, oldClients)); err == nil {
			t.Errorf("%s after the rotation: a client certificate of the old client CA got in", door.name)
		}
	}

	// A half-written rotation (a key that does not match) keeps the last
	// good pair.
	_, k2 := oldCA.issue(t, "other")
	writeFile(t, key, k2)
	later = later.Add(time.Minute)
	if err := os.Chtimes(key, later, later); err != nil {
		t.Fatal(err)
	}
	if err := httpsInfer(t, base, clientTLS(t, newCA_, newClients)); err != nil {
		t.Errorf("with a mismatched key written: %v; want the last good pair served", err)
	}
}

// TestTLSRotationSameStamp replaces the certificate and key with a new
// pair of the very same sizes and puts the files' modification times back
// as they were (a copy that keeps times, a restore from a backup): the new
// pair is served all the same, for its content changed.
func TestTLSRotationSameStamp(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	oldCA, newCA_ := newCA(t, "old CA"), newCA(t, "new CA")
	dir := t.TempDir()
	oldCert, oldKey := oldCA.issue(t, "server")
	newCert, newKey := newCA_.issue(t, "server")
	// PEM readers skip what follows the last block: pad the shorter of
	// each pair so that old and new have the same size.
	pad := func(a, b []byte) ([]byte, []byte) {
		for len(a) < len(b) {
			a = append(a, '\n')
		}
		for len(b) < len(a) {
			b = append(b, '\n')
		}
		return a, b
	}
	oldCert, newCert = pad(oldCert, newCert)
	oldKey, newKey = pad(oldKey, newKey)
	cert, key := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	writeFile(t, cert, oldCert)
	writeFile(t, key, oldKey)
	stamp := time.Now().Add(-time.Hour).Truncate(time.Second)
	for _, f := range []string{cert, key} {
		if err := os.Chtimes(f, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.TLS.Cert, c.TLS.Key = cert, key })
	base := "https://" + p.Addr().String()
	if err := httpsInfer(t, base, clientTLS(t, oldCA, nil)); err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	writeFile(t, cert, newCert)
	writeFile(t, key, newKey)
	for _, f := range []string{cert, key} {
		if err := os.Chtimes(f, stamp, stamp); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(f); err != nil || !fi.ModTime().Equal(stamp) {
			t.Fatalf("%s: %v, modified %v, want %v", f, err, fi.ModTime(), stamp)
		}
	}
	if err := httpsInfer(t, base, clientTLS(t, newCA_, nil)); err != nil {
		t.Errorf("after a rotation of the same size and time: %v; want the new pair served", err)
	}
}

// TestTLSAEADOnly: a TLS 1.2 client offering only CBC suites with SHA-1
// MACs is refused at the handshake; one offering an AEAD suite gets in.
func TestTLSAEADOnly(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	ca := newCA(t, "CA")
	cert, key := ca.files(t, t.TempDir(), "server")
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.TLS.Cert, c.TLS.Key = cert, key })
	base := "https://" + p.Addr().String()
	for _, tc := range []struct {
		suite uint16
		ok    bool
	}{
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, false},
		{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, true},
		{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, true},
	} {
		c := clientTLS(t, ca, nil)
		c.MaxVersion, c.CipherSuites = tls.VersionTLS12, []uint16{tc.suite}
		if err := httpsInfer(t, base, c); (err == nil) != tc.ok {
			t.Errorf("TLS 1.2 with %s only: %v, want accepted %v", tls.CipherSuiteName(tc.suite), err, tc.ok)
		}
	}
}

// TestUpstreamTLS puts TLS between the proxy and its upstream: an HTTPS
// upstream that requires a client certificate (batches, pass-through and
// discovery all go through it) and a gRPC upstream that speaks TLS
// (Triton's --grpc-use-ssl-mutual), reached through the gRPC door.
func TestUpstreamTLS(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	upCA, clientCA := newCA(t, "upstream CA"), newCA(t, "proxy CA")
	dir := t.TempDir()
	upCert, upKey := upCA.files(t, dir, "upstream")
	pair, err := tls.LoadX509KeyPair(upCert, upKey)
	if err != nil {
		t.Fatal(err)
	}
	upTLS := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: clientCA.pool(), ClientAuth: tls.RequireAndVerifyClientCert}

	// The HTTPS upstream: the emulator behind a TLS reverse proxy.
	target, _ := url.Parse("http://" + em.Addr())
	hs := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	hs.TLS = upTLS
	hs.StartTLS()
	t.Cleanup(hs.Close)

	// The gRPC upstream: the emulator's gRPC door over TLS.
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(upTLS)))
	pb.RegisterGRPCInferenceServiceServer(gs, em.GRPC())
	go gs.Serve(gln)
	t.Cleanup(gs.Stop)

	proxyCert, proxyKey := clientCA.files(t, dir, "proxy")
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Upstream = "https://" + strings.TrimPrefix(hs.URL, "https://")
		c.GRPCListen, c.UpstreamGRPC = "127.0.0.1:0", gln.Addr().String()
		c.UpstreamTLS = config.UpstreamTLS{GRPC: true, CA: upCA.file(t, dir, "upstream-ca.pem"),
			Cert: proxyCert, Key: proxyKey, ServerName: "localhost"}
	})
	// Batched: the dispatcher's client.
	if code, r, _ := post(t, p.Base+"/v2/models/simple/infer", simpleBody("up", 5, 2)); code != http.StatusOK {
		t.Errorf("batched call through the HTTPS upstream: %d %q", code, r.Error)
	} else if err := checkSimple(r, "up", 5, 2); err != nil {
		t.Error(err)
	}
	// Passed through: the proxy's own client.
	if code, body := getText(t, p.Base+"/v2/models/simple/config"); code != http.StatusOK {
		t.Errorf("pass-through through the HTTPS upstream: %d %.200s", code, body)
	}
	// Relayed over gRPC: ServerLive goes to the upstream's gRPC port.
	cc, err := grpc.NewClient("passthrough:///"+p.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	live, err := pb.NewGRPCInferenceServiceClient(cc).ServerLive(ctx, &pb.ServerLiveRequest{})
	if err != nil || !live.GetLive() {
		t.Errorf("ServerLive relayed to the TLS gRPC upstream: %v %v", live, err)
	}
}

// TestTLSInForce: the start-up log says what each listener and each way to
// the upstream speaks (before "ratebatch serving"), and says nothing of TLS
// when all is plain text.
func TestTLSInForce(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	ca := newCA(t, "CA")
	dir := t.TempDir()
	cert, key := ca.files(t, dir, "server")
	clients := ca.file(t, dir, "clients.pem")
	for _, c := range []struct {
		name string
		set  func(*config.Config)
		want string
	}{
		{"plain", func(c *config.Config) { c.GRPCListen = "127.0.0.1:0" }, ""},
		{"tls", func(c *config.Config) { c.TLS.Cert, c.TLS.Key = cert, key },
			`msg="TLS in force" listen=TLS admin=plain upstream=plain`},
		{"mtls, admin, grpc", func(c *config.Config) {
			c.TLS.Cert, c.TLS.Key, c.TLS.ClientCA, c.TLS.Admin, c.GRPCListen = cert, key, clients, true, "127.0.0.1:0"
		}, `msg="TLS in force" listen="mutual TLS" admin="mutual TLS" upstream=plain grpc_listen="mutual TLS" upstream_grpc=plain`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs syncBuffer
			servertest.Run(t, em.Addr(), slog.New(slog.NewTextHandler(&logs, nil)), c.set)
			testpoll.Until(t, "the start-up log", func() bool { return strings.Contains(logs.String(), "ratebatch serving") })
			line := ""
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "TLS in force") {
					line = l
				}
			}
			if c.want == "" && line != "" || !strings.Contains(line, c.want) {
				t.Errorf("TLS line %q, want %q", line, c.want)
			}
		})
	}
}
