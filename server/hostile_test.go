package server_test

// Hostile input and security: requests built to hurt the proxy get a clean
// 4xx quickly and cost bounded memory; slow clients cannot hold connections;
// the admin listener is apart from the data port, its mutating call needs
// the bearer token, and the token never shows in logs, status or metrics.

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/registry"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// rawExchange writes req on a fresh connection, half-closes it when asked,
// and reads one response. It returns the response's status and body, how
// long the answer took, and the bytes allocated meanwhile by the whole
// process (proxy and emulator included, the request's own bytes excluded:
// they are built before).
func rawExchange(t *testing.T, addr string, req []byte, halfClose bool) (status int, body []byte, took time.Duration, alloc uint64) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	alloc0 := ms.TotalAlloc
	start := time.Now()
	if _, err := conn.Write(req); err != nil {
		// The server may answer and close before it read everything.
		t.Logf("write: %v", err)
	}
	if halfClose {
		conn.(*net.TCPConn).CloseWrite()
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no HTTP answer: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	took = time.Since(start)
	runtime.ReadMemStats(&ms)
	return resp.StatusCode, body, took, ms.TotalAlloc - alloc0
}

// httpRequest is a raw HTTP/1.1 request: headers as given, then body.
func httpRequest(path string, headers []string, body []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: proxy\r\n", path)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

func contentLength(n int) string { return fmt.Sprintf("Content-Length: %d", n) }

func chunked(body []byte, chunk int) []byte {
	var b bytes.Buffer
	for len(body) > 0 {
		n := min(chunk, len(body))
		fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	return b.Bytes()
}

func gzipped(b []byte) []byte {
	var z bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&z, gzip.BestSpeed)
	zw.Write(b)
	zw.Close()
	return z.Bytes()
}

// tensorBody is a one-input JSON request with the given shape and data text.
func tensorBody(datatype, shape, data string) []byte {
	return fmt.Appendf(nil, `{"inputs":[{"name":"INPUT0","datatype":%q,"shape":%s,"data":%s}]}`, datatype, shape, data)
}

func TestHostileRequests(t *testing.T) {
	const limit = 1 << 20
	em := emulatortest.Start(t, emulator.Options{})
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.Limits.MaxBodyBytes = limit })
	addr := strings.TrimPrefix(lt.Base, "http://")
	const infer = "/v2/models/simple/infer"
	good := simpleBody("ok", 1, 1)
	binHeader := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"parameters":{"binary_data_size":1000000}}]}`
	bomb := gzipped(make([]byte, 64<<20)) // 64 MiB of zeros in 64 KiB
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	manyInputs := make([]string, 10000)
	for i := range manyInputs {
		manyInputs[i] = fmt.Sprintf(`{"name":"in%d","datatype":"INT8","shape":[1],"data":[1]}`, i)
	}

	tests := []struct {
		name      string
		req       []byte
		halfClose bool
		status    int
		msg       string // in the KServe error; "" for answers net/http gives before the proxy sees the request
		allocMax  uint64 // bytes the exchange may allocate; 0: 6 MiB
	}{
		{"declared body over the limit, never sent", httpRequest(infer, []string{contentLength(1 << 40)}, nil), false, 413, "exceeds", 0},
		{"chunked body over the limit", httpRequest(infer, []string{"Transfer-Encoding: chunked"}, chunked(bytes.Repeat([]byte(" "), 2*limit), 64<<10)), false, 413, "exceeds", 0},
		{"gzip bomb", httpRequest(infer, []string{"Content-Encoding: gzip", contentLength(len(bomb))}, bomb), false, 413, "exceeds", 0},
		{"truncated gzip", httpRequest(infer, []string{"Content-Encoding: gzip", contentLength(20)}, gzipped(good)[:20]), false, 400, "body", 0},
		{"unknown Content-Encoding", httpRequest(infer, []string{"Content-Encoding: br", contentLength(len(good))}, good), false, 415, "br", 0},
		{"body shorter than Content-Length", httpRequest(infer, []string{contentLength(len(good) + 100)}, good), true, 400, "body", 0},
		{"body longer than Content-Length", httpRequest(infer, []string{contentLength(40)}, good), false, 400, "", 0},
		{"Inference-Header-Content-Length past the body", httpRequest(infer, []string{contentLength(len(good)), kserve.HeaderContentLength + ": 100000"}, good), false, 400, kserve.HeaderContentLength, 0},
		{"Inference-Header-Content-Length negative", httpRequest(infer, []string{contentLength(len(good)), kserve.HeaderContentLength + ": -5"}, good), false, 400, kserve.HeaderContentLength, 0},
		{"Inference-Header-Content-Length huge", httpRequest(infer, []string{contentLength(len(good)), kserve.HeaderContentLength + ": 99999999999999999999999"}, good), false, 400, kserve.HeaderContentLength, 0},
		{"binary_data_size past the end", httpRequest(infer, []string{contentLength(len(binHeader) + 64), fmt.Sprintf("%s: %d", kserve.HeaderContentLength, len(binHeader))}, append([]byte(binHeader), make([]byte, 64)...)), false, 400, "INPUT0", 0},
		{"huge element count", httpRequest(infer, []string{contentLength(len(tensorBody("INT32", "[1,1099511627776]", "[1]")))}, tensorBody("INT32", "[1,1099511627776]", "[1]")), false, 400, "INPUT0", 0},
		{"negative dimension", httpRequest(infer, []string{contentLength(len(tensorBody("INT32", "[-1,16]", "[1]")))}, tensorBody("INT32", "[-1,16]", "[1]")), false, 400, "negative", 0},
		{"element count overflows int64", httpRequest(infer, []string{contentLength(len(tensorBody("FP64", "[4294967296,4294967296,4294967296]", "[1]")))}, tensorBody("FP64", "[4294967296,4294967296,4294967296]", "[1]")), false, 400, "too many", 0},
		{"dimension overflows int64", httpRequest(infer, []string{contentLength(len(tensorBody("INT32", "[99999999999999999999,1]", "[1]")))}, tensorBody("INT32", "[99999999999999999999,1]", "[1]")), false, 400, "INPUT0", 0},
		{"deeply nested data", httpRequest(infer, []string{contentLength(len(tensorBody("INT32", "[1]", deep)))}, tensorBody("INT32", "[1]", deep)), false, 400, "deep", 0},
		{"deeply nested parameters", httpRequest(infer, []string{contentLength(len(`{"parameters":{"p":` + deep + `},"inputs":[]}`))}, []byte(`{"parameters":{"p":`+deep+`},"inputs":[]}`)), false, 400, "deep", 0},
		{"deeply nested unknown member", httpRequest(infer, []string{contentLength(len(`{"x":` + deep + `}`))}, []byte(`{"x":`+deep+`}`)), false, 400, "deep", 0},
		{"invalid UTF-8 in BYTES", httpRequest(infer, []string{contentLength(len(tensorBody("BYTES", "[1]", "[\"\xc3(\"]")))}, tensorBody("BYTES", "[1]", "[\"\xc3(\"]")), false, 400, "UTF-8", 0},
		{"invalid UTF-8 in the id", httpRequest(infer, []string{contentLength(len("{\"id\":\"\xff\",\"inputs\":[]}"))}, []byte("{\"id\":\"\xff\",\"inputs\":[]}")), false, 400, "UTF-8", 0},
		{"number out of range", httpRequest(infer, []string{contentLength(len(tensorBody("INT32", "[1]", "[99999999999]")))}, tensorBody("INT32", "[1]", "[99999999999]")), false, 400, "range", 0},
		{"float beyond FP64", httpRequest(infer, []string{contentLength(len(tensorBody("FP64", "[1]", "[1e999999]")))}, tensorBody("FP64", "[1]", "[1e999999]")), false, 400, "range", 0},
		// Tiny tensors are the costliest input per byte, so the decoder takes
		// at most 1024 of them: 10000 are refused before any bookkeeping
		// grows with them.
		{"10000 inputs", httpRequest(infer, []string{contentLength(len(`{"inputs":[` + strings.Join(manyInputs, ",") + `]}`))}, []byte(`{"inputs":[`+strings.Join(manyInputs, ",")+`]}`)), false, 400, "more than 1024 inputs", 4 << 20},
		{"Content-Length not a number", httpRequest(infer, []string{"Content-Length: 12abc"}, good), false, 400, "", 0},
		{"conflicting Content-Lengths", httpRequest(infer, []string{contentLength(len(good)), contentLength(len(good) - 1)}, good), false, 400, "", 0},
		{"headers over 64 KiB", httpRequest(infer, []string{"X-Junk: " + strings.Repeat("a", 70<<10), contentLength(len(good))}, good), false, 431, "", 0},
	}
	// JSON data whose values are wrong, in an array whose extent is sound,
	// reaches the queue: the proxy leaves the values of a lone call to
	// Triton (kserve.DecodeRequestDeferred), which refuses them as it would
	// directly. Everything else is refused before it is queued.
	dataChecked := map[string]bool{"huge element count": true, "number out of range": true, "float beyond FP64": true}
	var worst time.Duration
	queued := 1 // the good request at the end
	for _, tt := range tests {
		if dataChecked[tt.name] {
			queued++
		}
		t.Run(tt.name, func(t *testing.T) {
			status, body, took, alloc := rawExchange(t, addr, tt.req, tt.halfClose)
			if status != tt.status {
				t.Fatalf("status %d %q, want %d", status, body, tt.status)
			}
			if tt.msg != "" {
				msg, ok := kserve.ParseErrorBody(body)
				if !ok || !strings.Contains(msg, tt.msg) {
					t.Fatalf("body %q: want a KServe error mentioning %q", body, tt.msg)
				}
			}
			// Quickly: well under any timeout the proxy has (10 s headers,
			// 1 min body) even on a loaded CI machine under -race.
			if took > 2*time.Second {
				t.Errorf("answered after %v", took)
			}
			// Bounded memory: a few times the body limit at most, whatever
			// the request claims (a bomb expands to 64 MiB, shapes claim
			// exabytes).
			allocMax := tt.allocMax
			if allocMax == 0 {
				allocMax = 6 * limit
			}
			if alloc > allocMax {
				t.Errorf("the exchange allocated %.1f MiB, more than %.1f MiB; the body limit is %d MiB",
					float64(alloc)/(1<<20), float64(allocMax)/(1<<20), limit>>20)
			}
			worst = max(worst, took)
			t.Logf("%d in %v, %.2f MiB allocated", status, took.Round(time.Microsecond), float64(alloc)/(1<<20))
		})
	}
	t.Logf("slowest hostile answer: %v", worst)
	// The proxy still serves.
	if code, r, _ := post(t, lt.Base+infer, good); code != 200 || checkSimple(r, "ok", 1, 1) != nil {
		t.Fatalf("after the hostile requests: %d %q", code, r.Error)
	}
	l := settled(t, lt, "simple")
	l.balanced(t)
	if queued != 1+len(dataChecked) || l.accepted != float64(queued) {
		t.Fatalf("%v requests reached the queue; want %d: the good one and those whose data values are wrong (%d of %d named)", l.accepted, queued, queued-1, len(dataChecked))
	}
}

// A body that claims to be as large as the limit allows and then stalls
// must not cost that much memory up front: the proxy reserves memory as
// bytes arrive. Without this, a few connections that each declare 64 MiB
// and send nothing hold gigabytes.
func TestHostileLyingLengthCostsBoundedMemory(t *testing.T) {
	const limit, conns = 32 << 20, 4
	em := emulatortest.Start(t, emulator.Options{})
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.Limits.MaxBodyBytes = limit })
	addr := strings.TrimPrefix(lt.Base, "http://")
	before := takeFootprint()
	var open []net.Conn
	for range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
		fmt.Fprintf(c, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{\"inputs\":[", limit)
	}
	// Every connection's goroutine parked in a read of its body, or
	// waiting for its turn in the large-body lane before it: whatever
	// memory the declared length made the proxy reserve, it reserved
	// before either (happens-before through the goroutine's own order).
	waitParkedAny(t, conns, []string{"fasthttp.(*Server).serveConn", "Body", "(*pollDesc).waitRead"},
		[]string{"fasthttp.(*Server).serveConn", "(*lane).enter"})
	during := takeFootprint()
	growth := int64(during.heap) - int64(before.heap)
	t.Logf("%d stalled bodies declaring %d MiB each: live heap +%.2f MiB", conns, limit>>20, float64(growth)/(1<<20))
	for _, c := range open {
		c.Close()
	}
	if growth > conns*(2<<20) {
		t.Fatalf("%d stalled connections that declared %d MiB each hold %.1f MiB: memory must follow the bytes received, not the declared length",
			conns, limit>>20, float64(growth)/(1<<20))
	}
	expectNoLeak(t, before)
}

// Slow-loris: connections that dribble their headers are closed once
// limits.read_header_timeout has passed, and those that stall their body
// once limits.read_timeout has; meanwhile others are served.
func TestHostileSlowClients(t *testing.T) {
	const headerTimeout, readTimeout = 300 * time.Millisecond, time.Second
	em := emulatortest.Start(t, emulator.Options{})
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Limits.ReadHeaderTimeout = headerTimeout
		c.Limits.ReadTimeout = readTimeout
	})
	addr := strings.TrimPrefix(lt.Base, "http://")
	before := takeFootprint()
	tests := []struct {
		name  string
		start string        // sent at once
		drip  string        // then one byte per 50 ms, repeated
		bound time.Duration // the connection must be closed by then
	}{
		{"headers one byte at a time", "POST /v2/models/simple/infer HTTP/1.1\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", headerTimeout},
		{"headers never finished", "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n", "", headerTimeout},
		{"body stalls", "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"inputs\":", " ", readTimeout},
	}
	const perCase = 10
	var wg sync.WaitGroup
	var slowest [3]atomic.Int64
	for i, tt := range tests {
		for range perCase {
			wg.Add(1)
			go func() {
				defer wg.Done()
				took, err := holdOpen(addr, tt.start, tt.drip, 10*time.Second)
				if err != nil {
					t.Errorf("%s: %v", tt.name, err)
					return
				}
				for {
					s := slowest[i].Load()
					if int64(took) <= s || slowest[i].CompareAndSwap(s, int64(took)) {
						break
					}
				}
			}()
		}
	}
	// Served meanwhile: once a slow connection is open and being read (not
	// all of them: the first close at their timeouts while the last open).
	waitParked(t, 1, "fasthttp.(*Server).serveConn", "(*pollDesc).waitRead")
	if code, r, _ := post(t, lt.Base+"/v2/models/simple/infer", simpleBody("x", 1, 1)); code != 200 {
		t.Errorf("a normal request during the slow-loris: %d %q", code, r.Error)
	}
	wg.Wait()
	for i, tt := range tests {
		took := time.Duration(slowest[i].Load())
		t.Logf("%s: %d connections closed after at most %v (timeout %v)", tt.name, perCase, took.Round(time.Millisecond), tt.bound)
		// The server checks deadlines as bytes arrive; a second of slack
		// covers scheduling on a loaded machine.
		if took > tt.bound+time.Second {
			t.Errorf("%s: connection held %v, timeout %v", tt.name, took, tt.bound)
		}
	}
	http.DefaultClient.CloseIdleConnections()
	expectNoLeak(t, before)
}

// waitParked waits until n goroutines are parked with every one of frames
// in their stacks (substrings of the goroutine profile's function names),
// and fails after 10 s. It is the happens-before signal for a check that
// something did not happen: a parked goroutine has done all it does before
// the frame it is parked in.
func waitParked(t *testing.T, n int, frames ...string) {
	t.Helper()
	waitParkedAny(t, n, frames)
}

// waitParkedAny waits until n goroutines are parked in a stack that holds
// every frame of one of stacks.
func waitParkedAny(t *testing.T, n int, stacks ...[]string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var b bytes.Buffer
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		got := 0
		for _, g := range strings.Split(b.String(), "\n\n") {
			if !slices.ContainsFunc(stacks, func(frames []string) bool { return containsAll(g, frames) }) {
				continue
			}
			// "k @ 0x..." counts k goroutines with this stack (the first
			// record follows the profile's header line).
			k, _, _ := strings.Cut(g, " @ ")
			if c, err := strconv.Atoi(k[strings.LastIndex(k, "\n")+1:]); err == nil {
				got += c
			}
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d goroutines parked in %v after 10 s\n%s", got, n, stacks, b.String())
		}
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// holdOpen sends start, then drip one byte every 50 ms, until the server
// closes the connection (or answers, then closes), and returns how long
// that took.
func holdOpen(addr, start, drip string, limit time.Duration) (time.Duration, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	began := time.Now()
	conn.Write([]byte(start))
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		conn.SetReadDeadline(time.Now().Add(limit))
		io.Copy(io.Discard, conn) // until EOF or reset
	}()
	for i := 0; ; i++ {
		select {
		case <-closed:
			return time.Since(began), nil
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(began) > limit {
			return 0, fmt.Errorf("still open after %v", limit)
		}
		if drip != "" {
			conn.Write([]byte{drip[i%len(drip)]})
		}
	}
}

// Security: the admin listener (metrics, status, policy changes) is not the
// data port; changing the policy needs the bearer token; the token never
// shows in the logs (at debug level), the status or the metrics.
func TestSecurityAdminAndSecrets(t *testing.T) {
	const token = "tok-9f86d081884c7d659a2feaa0c55ad015"
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	em := emulatortest.Start(t, emulator.Options{})
	// A password in the upstream URL (Triton behind basic auth) is a
	// secret too.
	const password = "upw-2c26b46b68ffc68ff99b453c1d304134"
	lt := servertest.Start(t, em.Addr(), log, func(c *config.Config) {
		c.AdminToken = token
		c.Upstream = "http://ratebatch:" + password + "@" + em.Addr()
		c.Log.Level = "debug"
	})
	client := newClient()
	do := func(method, url, auth, body string) (int, string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	change := `{"model":"simple","policy":"adhoc"}`

	// The data port serves Triton's API only: admin paths pass through to
	// the upstream, which does not know them.
	for _, path := range []string{"/metrics", "/status", "/policy"} {
		for _, method := range []string{http.MethodGet, http.MethodPut} {
			code, body := do(method, lt.Base+path, "Bearer "+token, change)
			if code < 400 || strings.Contains(body, "ratebatch_") || strings.Contains(body, `"queues"`) {
				t.Errorf("data port %s %s: %d %.100q: admin served on the data port", method, path, code, body)
			}
		}
	}
	if config.Default().AdminListen != "127.0.0.1:9002" {
		t.Errorf("admin_listen defaults to %q; keep it on loopback", config.Default().AdminListen)
	}

	for _, tt := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", 401},
		{"wrong token", "Bearer " + token[:len(token)-1], 401},
		{"token with a suffix", "Bearer " + token + "x", 401},
		{"basic scheme", "Basic " + token, 401},
		{"lower-case scheme (RFC 6750: the scheme is case-insensitive)", "bearer " + token, 200},
		{"no space", "Bearer" + token, 401},
		{"the token", "Bearer " + token, 200},
	} {
		if code, body := do(http.MethodPut, lt.Admin+"/policy", tt.auth, change); code != tt.want {
			t.Errorf("PUT /policy, %s: %d %q, want %d", tt.name, code, body, tt.want)
		}
	}
	if code, _ := do(http.MethodPut, lt.Admin+"/policy?token="+token, "", change); code != 401 {
		t.Errorf("token in the query string: %d, want 401 (only the header counts)", code)
	}

	// Traffic, errors and a failed discovery, to make the proxy log.
	post(t, lt.Base+"/v2/models/simple/infer", simpleBody("a", 1, 1))
	post(t, lt.Base+"/v2/models/nope/infer", simpleBody("b", 1, 1))
	_, status := do(http.MethodGet, lt.Admin+"/status", "", "")
	_, metrics := do(http.MethodGet, lt.Admin+"/metrics", "", "")
	lt.Stop()
	for what, text := range map[string]string{"logs": logs.String(), "/status": status, "/metrics": metrics} {
		if strings.Contains(text, token) || strings.Contains(text, token[:12]) {
			t.Errorf("the admin token appears in the %s", what)
		}
		if strings.Contains(text, password) {
			t.Errorf("the upstream's password appears in the %s", what)
		}
	}
	if !strings.Contains(status, `"admin_token": "REDACTED"`) {
		t.Errorf("status should show the token as REDACTED: %.400s", status)
	}
	if !strings.Contains(logs.String(), "level=DEBUG") {
		t.Fatal("no debug lines logged: the test did not see what debug logging writes")
	}
}

// TestSecurityEmptyTokenRefusesChanges: without admin_token every mutating
// call is refused, even one that sends an empty bearer token.
func TestSecurityEmptyTokenRefusesChanges(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.AdminToken = "" })
	for _, auth := range []string{"", "Bearer ", "Bearer  "} {
		req, _ := http.NewRequest(http.MethodPut, lt.Admin+"/policy", strings.NewReader(`{"policy":"adhoc"}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Errorf("no admin_token, Authorization %q: %d, want 401", auth, resp.StatusCode)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A flood of made-up model names: each unknown name makes the proxy look
// the model up upstream once and remember that it tried, so that repeats
// cost nothing. The memory of tries is bounded, and so are the lookups a
// flood can cause; every request is still answered (by the upstream's 404).
func TestHostileUnknownModelFlood(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	var lookups atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/config") && strings.Contains(r.URL.Path, "/flood-") {
			lookups.Add(1)
		}
		em.Handler().ServeHTTP(w, r)
	}))
	defer counting.Close()
	lt := servertest.Start(t, strings.TrimPrefix(counting.URL, "http://"), nil, nil)
	client := newClient()
	const names, workers = 3 * registry.MaxOnDemandLookups / 2, 8
	var wg sync.WaitGroup
	var wrong atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < names; i += workers {
				url := fmt.Sprintf("%s/v2/models/flood-%d/infer", lt.Base, i)
				resp, err := client.Post(url, "application/json", bytes.NewReader(simpleBody("x", 1, 1)))
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if _, ok := kserve.ParseErrorBody(body); resp.StatusCode != 404 || !ok {
					wrong.Add(1)
				}
			}
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	t.Logf("%d made-up model names: %d upstream lookups", names, lookups.Load())
	if wrong.Load() > 0 {
		t.Fatalf("%d requests for unknown models were not answered with the upstream's 404", wrong.Load())
	}
	if n := lookups.Load(); n > registry.MaxOnDemandLookups {
		t.Fatalf("%d made-up names caused %d upstream lookups (and as many remembered names), want at most %d", names, n, registry.MaxOnDemandLookups)
	}
}
