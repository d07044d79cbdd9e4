package server

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/config"
)

// The client toward Triton offers the doors' AEAD suites only, and says
// at WARN when it is told not to verify the upstream's certificate.
func TestUpstreamTLSConfig(t *testing.T) {
	for _, insecure := range []bool{false, true} {
		var logs bytes.Buffer
		tc, err := upstreamTLS(config.UpstreamTLS{InsecureSkipVerify: insecure}, true, "triton", slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range tc.CipherSuites {
			if name := tls.CipherSuiteName(id); !strings.Contains(name, "GCM") && !strings.Contains(name, "CHACHA20") {
				t.Errorf("suite %s offered: not AEAD", name)
			}
		}
		if len(tc.CipherSuites) == 0 {
			t.Error("no suite list: Go's default offers CBC suites with SHA-1 for TLS 1.2")
		}
		warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "insecure_skip_verify")
		if warned != insecure {
			t.Errorf("insecure_skip_verify %v: warned %v (log %q)", insecure, warned, logs.String())
		}
	}
}
