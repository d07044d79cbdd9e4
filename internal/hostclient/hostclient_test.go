package hostclient

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/valyala/fasthttp"
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

// Cause names the kind of failure and none of the addresses in the error.
func TestCause(t *testing.T) {
	op := func(op string, err error) error {
		return &net.OpError{Op: op, Net: "tcp", Source: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5555},
			Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 8000}, Err: err}
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{op("dial", os.NewSyscallError("connect", syscall.ECONNREFUSED)), "connection refused"},
		{op("read", os.NewSyscallError("read", syscall.ECONNRESET)), "connection reset"},
		{op("dial", os.NewSyscallError("connect", syscall.EHOSTUNREACH)), "no route to the upstream"},
		{fmt.Errorf("error when dialing triton:8000: %w", &net.DNSError{Err: "no such host", Name: "triton", Server: "10.0.0.10:53"}), "the upstream's name does not resolve"},
		{fasthttp.ErrConnectionClosed, "connection closed before an answer"},
		{io.ErrUnexpectedEOF, "answer cut short"},
		{op("read", os.ErrDeadlineExceeded), "timed out"},
		{errors.New("dial tcp 10.0.0.2:8000: something new"), "connection failed"},
	} {
		got := Cause(tc.err)
		if got != tc.want {
			t.Errorf("Cause(%v) = %q, want %q", tc.err, got, tc.want)
		}
		if strings.Contains(got, "10.0.0.") || strings.Contains(got, "8000") || strings.Contains(got, "triton") {
			t.Errorf("Cause(%v) = %q names an address", tc.err, got)
		}
	}
}
