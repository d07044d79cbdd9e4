package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/proxy"
)

// passFront starts the front door, with its own fasthttp client, in front
// of upstream; idle bounds the upstream's silence in a pass-through
// exchange and the writes of its answer.
func passFront(t *testing.T, upstream http.Handler, idle time.Duration) (front string, up *httptest.Server) {
	t.Helper()
	return passFrontWith(t, upstream, func(o *proxy.Options) { o.WriteTimeout, o.UpstreamIdleTimeout = idle, idle })
}

// passFrontWith is passFront with options changed by set.
func passFrontWith(t *testing.T, upstream http.Handler, set func(*proxy.Options)) (front string, up *httptest.Server) {
	t.Helper()
	up = httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	o := proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}}, Upstream: mustURL(up.URL), MaxBodyBytes: 1 << 20}
	set(&o)
	front = startFront(t, o)
	return front, up
}

// rawRequest sends one hand-written HTTP/1.1 request and returns the whole
// answer as the wire carried it.
func rawRequest(t *testing.T, base, request string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, request)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading answer: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	resp.Header.Del("Date")
	fmt.Fprintf(&b, "%d\n", resp.StatusCode)
	resp.Header.Write(&b)
	body, _ := io.ReadAll(resp.Body)
	b.Write(body)
	return b.String()
}

// What reaches the upstream, and what reaches the client, is what the other
// side sent: method, escaped path, query, Host, end-to-end headers, body,
// status and answer headers; nothing invented (no User-Agent, no
// Content-Type) and no hop-by-hop header.
func TestPassthroughForwardsFaithfully(t *testing.T) {
	type seen struct {
		method, uri, host, body string
		header                  http.Header
	}
	got := make(chan seen, 1)
	front, _ := passFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.RequestURI, r.Host, string(b), r.Header.Clone()}
		w.Header().Set("X-Triton", "yes")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.Header().Set(kserve.HeaderContentLength, "7")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "answer!")
	}), 0)

	ans := rawRequest(t, front, "POST /v2/models/a%2Fb/infer?x=1&y=%20 HTTP/1.1\r\nHost: triton.example:8000\r\n"+
		"X-Custom: 1\r\nX-Custom: 2\r\nConnection: keep-alive, X-Hop\r\nX-Hop: drop me\r\nContent-Length: 5\r\n\r\nhello")
	s := <-got
	if s.method != "POST" || s.uri != "/v2/models/a%2Fb/infer?x=1&y=%20" || s.host != "triton.example:8000" || s.body != "hello" {
		t.Errorf("upstream saw %s %s host %q body %q", s.method, s.uri, s.host, s.body)
	}
	if v := s.header.Values("X-Custom"); len(v) != 2 || v[0] != "1" || v[1] != "2" {
		t.Errorf("X-Custom reached upstream as %q", v)
	}
	for _, h := range []string{"User-Agent", "Content-Type", "X-Hop", "Expect"} {
		if v, ok := s.header[h]; ok {
			t.Errorf("upstream saw %s: %q, which the client did not send end to end", h, v)
		}
	}
	want := "418\nContent-Length: 7\nContent-Type: text/plain; charset=utf-8\nInference-Header-Content-Length: 7\nX-Multi: a\nX-Multi: b\nX-Triton: yes\n"
	if !strings.HasPrefix(strings.ReplaceAll(ans, "\r\n", "\n"), want) || !strings.HasSuffix(ans, "answer!") {
		t.Errorf("client got\n%s\nwant\n%s\nanswer!", ans, want)
	}
}

// An answer without Content-Type stays without one.
func TestPassthroughInventsNoContentType(t *testing.T) {
	front, _ := passFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // net/http would sniff one otherwise
		w.WriteHeader(http.StatusOK)
	}), 0)
	resp, err := http.Get(front + "/v2/health/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct, ok := resp.Header["Content-Type"]; ok || resp.StatusCode != 200 {
		t.Fatalf("status %d, Content-Type %q; want 200 without one", resp.StatusCode, ct)
	}
}

// Bodies of every framing and size arrive whole, both ways, over reused
// connections: small ones from memory, large and chunked ones streamed.
func TestPassthroughBodiesEveryFraming(t *testing.T) {
	front, _ := passFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream reading body: %v", err)
		}
		if r.URL.Query().Get("chunked") == "1" {
			w.Write(b[:len(b)/2]) // no Content-Length: net/http sends it chunked
			w.(http.Flusher).Flush()
			w.Write(b[len(b)/2:])
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.Write(b)
	}), 0)
	for _, n := range []int{1, 1000, 64 << 10, 64<<10 + 1, 700 << 10} {
		body := bytes.Repeat([]byte{'a'}, n)
		for i := range body {
			body[i] = byte('a' + i%26)
		}
		for _, tc := range []struct {
			name    string
			reqBody io.Reader // a bare io.Reader: the client sends it chunked
			query   string
		}{
			{"sized", bytes.NewReader(body), ""},
			{"chunked-request", io.MultiReader(bytes.NewReader(body)), ""},
			{"chunked-answer", bytes.NewReader(body), "?chunked=1"},
		} {
			resp, err := http.Post(front+"/v2/models/other/infer"+tc.query, "application/octet-stream", tc.reqBody)
			if err != nil {
				t.Fatalf("%d bytes %s: %v", n, tc.name, err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, body) {
				t.Fatalf("%d bytes %s: status %d, %d bytes back (err %v)", n, tc.name, resp.StatusCode, len(got), err)
			}
		}
	}
}

// Server-sent events (generate_stream) reach the client as they are sent,
// not when the stream ends; a client that leaves mid-stream closes the
// upstream connection.
func TestPassthroughStreamsEventsAndAbortsWithClient(t *testing.T) {
	release := make(chan struct{})
	upstreamDone := make(chan error, 1)
	front, _ := passFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"text_output\":\"first\"}\n\n")
		w.(http.Flusher).Flush()
		<-release
		// Keep writing until the proxy closes the connection.
		for range 200 {
			if _, err := io.WriteString(w, "data: {\"text_output\":\"more\"}\n\n"); err != nil {
				upstreamDone <- err
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond)
		}
		upstreamDone <- nil
	}), 0)

	resp, err := http.Post(front+"/v2/models/llm/generate_stream", "application/json", strings.NewReader(`{"text_input":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: {\"text_output\":\"first\"}\n" {
		t.Fatalf("first event %q, %v: the stream was held back", line, err)
	}
	resp.Body.Close() // the client leaves
	close(release)
	select {
	case err := <-upstreamDone:
		if err == nil {
			t.Fatal("upstream wrote the whole stream: the proxy did not close its connection when the client left")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("upstream still streaming 5 s after the client left")
	}
}

// An upstream silent past the idle timeout gets the client 504 in the
// KServe form; an upstream that refuses connections gives 503 with
// Retry-After.
func TestPassthroughTimeoutAndUnreachable(t *testing.T) {
	block := make(chan struct{})
	front, _ := passFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-block }), 100*time.Millisecond)
	t.Cleanup(func() { close(block) }) // before the servers close: cleanups run last first
	resp, err := http.Get(front + "/v2/models/slow")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if msg, ok := kserve.ParseErrorBody(b); resp.StatusCode != http.StatusGatewayTimeout || !ok || !strings.Contains(msg, "in time") {
		t.Fatalf("slow upstream: %d %s; want 504 with a KServe error", resp.StatusCode, b)
	}

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead, _ := url.Parse("http://" + l.Addr().String())
	l.Close()
	fr := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}}, Upstream: dead, MaxBodyBytes: 1 << 20})
	resp, err = http.Get(fr + "/v2/health/ready")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if msg, ok := kserve.ParseErrorBody(b); resp.StatusCode != http.StatusServiceUnavailable || !ok ||
		!strings.Contains(msg, "refusing connections") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("dead upstream: %d %s; want 503 with Retry-After and a KServe error", resp.StatusCode, b)
	}
	// What failed, but not where: the upstream's address is the log's.
	if msg, _ := kserve.ParseErrorBody(b); !strings.Contains(msg, "connection refused") || strings.Contains(msg, dead.Host) {
		t.Fatalf("dead upstream: %q; want the refusal named and not the address %s", msg, dead.Host)
	}
}

// An inference request passed through (a model the proxy does not batch,
// or any model before discovery has read the upstream: a proxy started
// before Triton, or pointed at the wrong port) is held for an upstream
// that refuses connections, as a batched call is: it goes through if the
// upstream comes back within the hold, and gets 503 with Retry-After, not
// 502, past it.
func TestPassthroughHoldsInferenceForARefusingUpstream(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	const hold = 300 * time.Millisecond
	fr := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}}, Upstream: mustURL("http://" + addr), MaxBodyBytes: 1 << 20,
		Hold: hold, RetryAfter: 2 * time.Second})
	infer := func() (*http.Response, string, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := http.Post(fr+"/v2/models/other/infer", "application/json", strings.NewReader(`{"inputs":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b), time.Since(start)
	}
	resp, body, took := infer()
	if msg, ok := kserve.ParseErrorBody([]byte(body)); resp.StatusCode != http.StatusServiceUnavailable || !ok ||
		!strings.Contains(msg, "not back within") || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("refusing upstream: %d %q Retry-After %q; want 503 saying it was held, Retry-After 2", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	if strings.Contains(body, addr) {
		t.Errorf("refusing upstream: %q names the upstream's address, which is the log's", body)
	}
	if took < hold/2 || took > hold+time.Second {
		t.Errorf("answered after %v, want after the hold of %v", took, hold)
	}

	// Back within the hold: the request goes through.
	go func() {
		time.Sleep(hold / 3)
		up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"outputs":[]}`) })}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return // the port was taken meanwhile: the request below gets 503 and says so
		}
		t.Cleanup(func() { up.Close() })
		up.Serve(ln)
	}()
	if resp, body, _ := infer(); resp.StatusCode != http.StatusOK {
		t.Fatalf("upstream back within the hold: %d %s, want 200", resp.StatusCode, body)
	}
}

// A generate_stream answer that keeps sending (an event every 100 ms) is
// never cut, though it lasts three times the write timeout and the
// upstream idle timeout (500 ms each): its client gets every event and
// the last. One that falls silent for longer than the idle timeout ends
// then, well before the upstream would say more.
func TestPassthroughStreamBoundedBySilence(t *testing.T) {
	const limit = 500 * time.Millisecond
	for _, tc := range []struct {
		name   string
		events int
		pause  time.Duration // before the last event
		cut    bool
	}{
		{"keeps sending", 15, 0, false},
		{"falls silent", 3, 10 * limit, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			front, _ := passFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				for i := range tc.events {
					fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
					w.(http.Flusher).Flush()
					time.Sleep(limit / 5)
				}
				select {
				case <-time.After(tc.pause):
				case <-release:
				}
				io.WriteString(w, "data: [DONE]\n\n")
			}), limit)
			t.Cleanup(func() { close(release) }) // before the servers close: cleanups run last first
			start := time.Now()
			resp, err := http.Post(front+"/v2/models/llm/generate_stream", "application/json", strings.NewReader(`{"text_input":"hi"}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var events []string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if line := sc.Text(); line != "" {
					events = append(events, line)
				}
			}
			took := time.Since(start)
			done := len(events) > 0 && events[len(events)-1] == "data: [DONE]"
			if !tc.cut {
				if len(events) != tc.events+1 || !done {
					t.Fatalf("%d events in %v, the last %q: cut before its end (%v)", len(events), took, events[len(events)-1], sc.Err())
				}
				return
			}
			if done || len(events) != tc.events {
				t.Fatalf("got %d events, the last %q: want the %d sent before the silence, and the stream ended", len(events), events[len(events)-1], tc.events)
			}
			if took > tc.pause/2 {
				t.Fatalf("the silent stream ended after %v, want about the idle timeout %v after its last event", took, limit)
			}
		})
	}
}

// A kept-alive connection the upstream has closed (a restart, an idle
// timeout) costs the client nothing: the request, a POST included, goes
// again on a new connection.
func TestPassthroughRetriesStaleConnection(t *testing.T) {
	var calls, closed atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	up.Start()
	t.Cleanup(up.Close)
	front := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}}, Upstream: mustURL(up.URL), MaxBodyBytes: 1 << 20})
	post := func() int {
		resp, err := http.Post(front+"/v2/models/other/infer", "application/json", strings.NewReader(`{"inputs":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post(); c != 200 {
		t.Fatalf("first POST: %d", c)
	}
	up.CloseClientConnections() // the proxy's pooled connection is now dead
	for deadline := time.Now().Add(5 * time.Second); closed.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the upstream never closed the kept-alive connection")
		}
	}
	if c := post(); c != 200 {
		t.Fatalf("POST after the upstream closed the kept-alive connection: %d, want 200", c)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("upstream handled %d requests, want 2 (one each)", n)
	}
}

// HEAD gets the upstream's headers without a body; every answer carries
// exactly one Date, the upstream's own replaced rather than doubled.
func TestPassthroughHeadAndDate(t *testing.T) {
	front, _ := passFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "11")
		if r.Method != http.MethodHead {
			io.WriteString(w, `{"ok":true}`)
		}
	}), 0)
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		c, err := net.Dial("tcp", strings.TrimPrefix(front, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "%s /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n", method)
		req, _ := http.NewRequest(method, "/", nil)
		resp, err := http.ReadResponse(bufio.NewReader(c), req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		wantBody := map[string]string{http.MethodHead: "", http.MethodGet: `{"ok":true}`}[method]
		if resp.StatusCode != 200 || resp.Header.Get("Content-Length") != "11" || string(body) != wantBody {
			t.Errorf("%s: %d, Content-Length %q, body %q", method, resp.StatusCode, resp.Header.Get("Content-Length"), body)
		}
		if d := resp.Header.Values("Date"); len(d) != 1 {
			t.Errorf("%s: Date headers %q, want exactly one", method, d)
		}
	}
}

// A request without hop-by-hop fields is forwarded field for field: the
// one-pass check for them leaves even an oddly written Cookie as sent.
func TestPassthroughKeepsFieldsAsSent(t *testing.T) {
	got := make(chan http.Header, 1)
	front, _ := passFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
	}), 0)
	rawRequest(t, front, "GET /v2/health/ready HTTP/1.1\r\nHost: h\r\nCookie: a=1;b ; c=\"x y\"\r\nX-Custom: 1\r\n\r\n")
	h := <-got
	if v := h.Values("Cookie"); len(v) != 1 || v[0] != `a=1;b ; c="x y"` {
		t.Errorf("upstream saw Cookie %q, want it as sent", v)
	}
	if v := h.Get("X-Custom"); v != "1" {
		t.Errorf("upstream saw X-Custom %q", v)
	}
}

// changes records the models a door told of a repository change.
type changes struct {
	mu     sync.Mutex
	models []string
}

func (c *changes) Ensure(context.Context, string) {}
func (c *changes) Changed(model string) {
	c.mu.Lock()
	c.models = append(c.models, model)
	c.mu.Unlock()
}
func (c *changes) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.models)
}

// A repository load or unload passed through tells the registry, once
// the upstream has answered it, that the model may have changed; no other
// request does.
func TestRepositoryChangeIsTold(t *testing.T) {
	var c changes
	told := make(chan int, 1) // how many changes were told as the upstream got a request
	front, _ := passFrontWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { told <- len(c.seen()) }),
		func(o *proxy.Options) { o.Backend.Discoverer = &c })
	want := 0
	for _, path := range []string{"/v2/repository/models/a%2Fb/load", "/v2/repository/models/m/unload",
		"/v2/repository/index", "/v2/repository/models/m/config", "/v2/models/m/ready"} {
		resp, err := http.Post(front+path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n := <-told; n != want {
			t.Fatalf("%s: %d changes told before the upstream answered it, want %d", path, n, want)
		}
		if strings.HasSuffix(path, "load") {
			want++
			testpoll.Until(t, "told of "+path, func() bool { return len(c.seen()) == want })
		}
	}
	if got := c.seen(); len(got) != 2 || got[0] != "a/b" || got[1] != "m" {
		t.Errorf("told of %q, want a/b (unescaped) and m", got)
	}
}
