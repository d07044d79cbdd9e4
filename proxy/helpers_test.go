package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/proxy"
)

// startFront serves the front door on a loopback port until the test ends
// and returns its base URL.
func startFront(tb testing.TB, o proxy.Options) string {
	tb.Helper()
	s := proxy.New(o)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(ln)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String()
}

// wireAnswer is an answer as read off the connection.
type wireAnswer struct {
	status int
	header http.Header
	body   []byte
}

// exchange sends raw bytes on a new connection (closing its write side
// after them when halfClose is set, so a short body ends) and reads the
// first answer.
func exchange(tb testing.TB, base string, raw []byte, halfClose bool) wireAnswer {
	tb.Helper()
	c, err := net.Dial("tcp", base[len("http://"):])
	if err != nil {
		tb.Fatal(err)
	}
	// Closed with a reset: no TIME_WAIT, so a fuzzer's tens of thousands
	// of exchanges do not run out of ephemeral ports.
	defer c.Close()
	defer c.(*net.TCPConn).SetLinger(0)
	c.SetDeadline(time.Now().Add(10 * time.Second))
	go func() {
		c.Write(raw)
		if halfClose {
			c.(*net.TCPConn).CloseWrite()
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		tb.Fatalf("reading the answer to %.80q: %v", raw, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("reading the answer's body: %v", err)
	}
	return wireAnswer{resp.StatusCode, resp.Header, body}
}

// serveInProcess calls the handler directly, with the body as a stream as
// the server hands it over; ctx holds the answer.
func serveInProcess(s *proxy.Server, ctx *fasthttp.RequestCtx, method, target string, header map[string]string, body []byte) {
	ctx.Request.Reset()
	ctx.Response.Reset()
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(target)
	for k, v := range header {
		ctx.Request.Header.Set(k, v)
	}
	if body != nil {
		ctx.Request.SetBodyStream(bytes.NewReader(body), len(body))
	}
	s.ServeFastHTTP(ctx)
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
