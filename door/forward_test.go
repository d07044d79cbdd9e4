package door

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// Of picks Authorization, the names given and those the pattern matches,
// without regard to case, and never the request's own headers or a
// traceparent; a call without any costs no allocation.
func TestForwardingOf(t *testing.T) {
	tests := []struct {
		name    string
		names   []string
		pattern string
		header  map[string]string
		want    string // "name=value;" for each, in order
	}{
		{"none", nil, "", map[string]string{"Content-Type": "application/json"}, ""},
		{"authorization", nil, "", map[string]string{"Authorization": "Bearer a"}, "authorization=Bearer a;"},
		{"a restricted key", []string{"API-Key"}, "", map[string]string{"api-key": "k", "Authorization": "b"}, "authorization=b;api-key=k;"},
		{"the pattern", nil, "^x-meta-", map[string]string{"X-Meta-Tenant": "t1", "X-Other": "o"}, "x-meta-tenant=t1;"},
		{"the pattern never takes the request's own", nil, ".*", map[string]string{"Content-Type": "a", "traceparent": "00-x", "X-A": "1"}, "x-a=1;"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := NewForwarding(tt.names, nil, tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			var h fasthttp.RequestHeader
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got := f.Of(HTTP, h.Peek, func(fn func(name, value []byte)) { eachHeader(&h, fn) })
			var b strings.Builder
			for got != "" {
				name, rest, _ := strings.Cut(got, "\x00")
				value, rest, _ := strings.Cut(rest, "\x00")
				b.WriteString(name + "=" + value + ";")
				got = rest
			}
			if b.String() != tt.want {
				t.Fatalf("forwarded %q, want %q", b.String(), tt.want)
			}
		})
	}
	f, _ := NewForwarding([]string{"x-tenant"}, []string{"api-key"}, "")
	var h fasthttp.RequestHeader
	h.Set("Content-Type", "application/json")
	if n := testing.AllocsPerRun(100, func() { f.Of(HTTP, h.Peek, func(fn func(name, value []byte)) { eachHeader(&h, fn) }) }); n != 0 {
		t.Fatalf("%v allocations for a call that forwards nothing", n)
	}
}

// The request's own headers cannot be named.
func TestForwardingRefusesTheRequestsOwn(t *testing.T) {
	for _, n := range []string{"Content-Type", "host", "grpc-timeout", ":authority", "traceparent"} {
		if _, err := NewForwarding([]string{n}, nil, ""); err == nil {
			t.Errorf("%s accepted", n)
		}
	}
}

// eachHeader calls f with each of h's headers, as the HTTP door reads them.
func eachHeader(h *fasthttp.RequestHeader, f func(name, value []byte)) {
	for k, v := range h.All() {
		f(k, v)
	}
}

// A restricted API's key is read as each client sends it to Triton: the
// header KEY over HTTP, the metadata triton-grpc-protocol-KEY over gRPC;
// either way a batch, which goes to Triton over HTTP, carries it as KEY.
func TestForwardingRestrictedKeys(t *testing.T) {
	f, err := NewForwarding(nil, []string{"API-Key"}, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    Protocol
		sent map[string]string
	}{
		{HTTP, map[string]string{"api-key": "k"}},
		{GRPC, map[string]string{"triton-grpc-protocol-api-key": "k"}},
	} {
		get := func(name string) []byte {
			if v, ok := tc.sent[name]; ok {
				return []byte(v)
			}
			return nil
		}
		if got := f.Of(tc.p, get, nil); got != "api-key\x00k\x00" {
			t.Errorf("%s: forwarded %q, want api-key k", tc.p, got)
		}
	}
	// Over gRPC, the key's HTTP name is not Triton's gRPC form of it.
	if got := f.Of(GRPC, func(name string) []byte {
		if name == "api-key" {
			return []byte("k")
		}
		return nil
	}, nil); got != "" {
		t.Errorf("gRPC metadata api-key forwarded as %q; Triton's gRPC front end reads triton-grpc-protocol-api-key", got)
	}
}
