package proxy

import (
	"bufio"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// anyHop decides whether dropHopHeaders deletes anything: a hop-by-hop
// field it misses, in any spelling, would reach the other side.
func TestAnyHop(t *testing.T) {
	tests := []struct {
		name   string
		fields string
		want   bool
	}{
		{"end-to-end fields only", "Content-Type: application/json\r\nX-Request-Id: 1\r\nCookie: a=1; b\r\n", false},
		{"Connection", "Connection: keep-alive\r\n", true},
		{"lower case", "te: trailers\r\n", true},
		{"upper case", "PROXY-AUTHORIZATION: Basic x\r\n", true},
		{"Keep-Alive", "Keep-Alive: timeout=5\r\n", true},
		{"Upgrade", "Upgrade: h2c\r\n", true},
		{"Expect", "Expect: 100-continue\r\n", true},
		{"a longer name sharing a prefix", "Upgrade-Insecure-Requests: 1\r\nTrailers: x\r\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req fasthttp.RequestHeader
			raw := "POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n" + tt.fields + "\r\n"
			if err := req.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				t.Fatal(err)
			}
			if got := (requestHeader{&req}).anyHop(); got != tt.want {
				t.Errorf("request: anyHop = %v, want %v", got, tt.want)
			}
			var resp fasthttp.ResponseHeader
			raw = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + tt.fields + "\r\n"
			if err := resp.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
				t.Fatal(err)
			}
			if got := (responseHeader{&resp}).anyHop(); got != tt.want {
				t.Errorf("response: anyHop = %v, want %v", got, tt.want)
			}
		})
	}
}

// The check runs on every pass-through exchange, both ways: with no
// hop-by-hop field it must not allocate (an iterator passed as a value put
// five allocations on each exchange).
func TestDropHopHeadersWithoutHopFieldsDoesNotAllocate(t *testing.T) {
	var req fasthttp.RequestHeader
	if err := req.Read(bufio.NewReader(strings.NewReader("POST /v2/models/m/infer HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nContent-Type: application/json\r\nX-Request-Id: 1\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	var resp fasthttp.ResponseHeader
	if err := resp.Read(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Type: application/json\r\n\r\n"))); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		dropHopHeaders(requestHeader{&req})
		dropHopHeaders(responseHeader{&resp})
	}); n != 0 {
		t.Fatalf("dropHopHeaders allocates %v times per exchange, want 0", n)
	}
}
