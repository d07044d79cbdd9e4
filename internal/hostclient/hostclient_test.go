package hostclient

import (
	"net/url"
	"testing"
)

func TestNew(t *testing.T) {
	tests := []struct {
		url, addr  string
		tls        bool
		serverName string
	}{
		{"http://triton:8000", "triton:8000", false, ""},
		{"http://triton", "triton:80", false, ""},
		{"https://triton", "triton:443", true, "triton"},
		{"https://triton:8443/base", "triton:8443", true, "triton"},
		{"http://[::1]:8000", "[::1]:8000", false, ""},
		{"http://[::1]", "[::1]:80", false, ""},
		{"https://[fe80::1]", "[fe80::1]:443", true, "fe80::1"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			hc := New(u)
			if hc.Addr != tt.addr || hc.IsTLS != tt.tls {
				t.Fatalf("Addr %q IsTLS %v, want %q %v", hc.Addr, hc.IsTLS, tt.addr, tt.tls)
			}
			if tt.tls && (hc.TLSConfig == nil || hc.TLSConfig.ServerName != tt.serverName) {
				t.Fatalf("TLSConfig %+v, want ServerName %q", hc.TLSConfig, tt.serverName)
			}
			if !tt.tls && hc.TLSConfig != nil {
				t.Fatal("TLSConfig set for plain http")
			}
		})
	}
}
