package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// selfSigned writes a self-signed certificate and its key under dir.
func selfSigned(t *testing.T, dir, name string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(k)
	cert, key = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	for p, b := range map[string]*pem.Block{cert: {Type: "CERTIFICATE", Bytes: der}, key: {Type: "EC PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(p, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, key
}

func TestTLSOptions(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir, "a")
	otherCert, _ := selfSigned(t, dir, "b")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want []string // fields named in the error; none: valid
	}{
		{"TLS doors", []string{"--tls-cert", cert, "--tls-key", key}, nil},
		{"mutual TLS and admin", []string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", cert, "--tls-admin"}, nil},
		{"cert without key", []string{"--tls-cert", cert}, []string{"tls.cert"}},
		{"client CA without TLS", []string{"--tls-client-ca", cert}, []string{"tls.client_ca"}},
		{"admin TLS without TLS", []string{"--tls-admin"}, []string{"tls.admin"}},
		{"key of another certificate", []string{"--tls-cert", otherCert, "--tls-key", key}, []string{"tls.cert"}},
		{"missing file", []string{"--tls-cert", filepath.Join(dir, "nope"), "--tls-key", key}, []string{"tls.cert"}},
		{"client CA not PEM", []string{"--tls-cert", cert, "--tls-key", key, "--tls-client-ca", garbage}, []string{"tls.client_ca"}},
		{"upstream gRPC TLS", []string{"--upstream-tls-grpc", "--upstream-tls-ca", cert, "--upstream-tls-cert", cert, "--upstream-tls-key", key}, nil},
		{"https upstream with a CA", []string{"--upstream", "https://triton:8000", "--upstream-tls-ca", cert}, nil},
		{"upstream TLS options on plain calls", []string{"--upstream-tls-ca", cert}, []string{"upstream_tls"}},
		{"upstream cert without key", []string{"--upstream-tls-grpc", "--upstream-tls-cert", cert}, []string{"upstream_tls.cert"}},
		{"upstream CA not PEM", []string{"--upstream-tls-grpc", "--upstream-tls-ca", garbage}, []string{"upstream_tls.ca"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"--upstream", "http://triton:8000"}, tt.args...)
			_, err := Load(Source{Flags: flags(t, args...)})
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			for _, field := range tt.want {
				if err == nil || !strings.Contains(err.Error(), field+":") {
					t.Errorf("error %v; want it to name %s", err, field)
				}
			}
		})
	}
}

func TestChangedAndKeep(t *testing.T) {
	old, next := Default(), Default()
	old.Models = map[string]Model{"a": {SLA: time.Second}, "b": {}}
	next.Models = map[string]Model{"a": {SLA: 2 * time.Second}, "b": {}, "c": {Policy: "adhoc"}}
	next.Listen = ":7000"
	next.TLS.Cert = "new.crt"
	// latency_budget, and one copy of the shared wait_bound
	policy.Each(&next.Policy.Options, func(b *policy.BudgetOptions) { b.LatencyBudget, b.MaxWait = "2x", time.Millisecond })
	got := Changed(&old, &next)
	want := []string{"listen", "policy.wait_bound", "policy.latency_budget", "tls.cert", "models.a", "models.c"}
	if !slices.Equal(got, want) {
		t.Fatalf("Changed = %v, want %v", got, want)
	}
	next.Keep(&old, []string{"listen", "tls.cert", "models.a", "policy.wait_bound"})
	budget := policy.OptionsOf[policy.BudgetOptions](next.Policy.Options)
	if next.Listen != old.Listen || next.TLS.Cert != "" || budget.LatencyBudget != "2x" || next.Models["a"].SLA != 2*time.Second {
		t.Errorf("after Keep: listen %q, tls.cert %q, budget %q, models.a.sla %v; want the old listen and cert, the rest new",
			next.Listen, next.TLS.Cert, budget.LatencyBudget, next.Models["a"].SLA)
	}
	if budget.MaxWait != 0 {
		t.Errorf("after Keep: budget's wait_bound %v, want the old 0s", budget.MaxWait)
	}
}
