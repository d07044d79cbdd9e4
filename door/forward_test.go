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
			f, err := NewForwarding(tt.names, tt.pattern)
			if err != nil {
				t.Fatal(err)
			}
			var h fasthttp.RequestHeader
			for k, v := range tt.header {
				h.Set(k, v)
			}
			got := f.Of(h.Peek, func(fn func(name, value []byte)) { eachHeader(&h, fn) })
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
	f, _ := NewForwarding([]string{"x-tenant"}, "")
	var h fasthttp.RequestHeader
	h.Set("Content-Type", "application/json")
	if n := testing.AllocsPerRun(100, func() { f.Of(h.Peek, func(fn func(name, value []byte)) { eachHeader(&h, fn) }) }); n != 0 {
		t.Fatalf("%v allocations for a call that forwards nothing", n)
	}
}

// The request's own headers cannot be named.
func TestForwardingRefusesTheRequestsOwn(t *testing.T) {
	for _, n := range []string{"Content-Type", "host", "grpc-timeout", ":authority", "traceparent"} {
		if _, err := NewForwarding([]string{n}, ""); err == nil {
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
