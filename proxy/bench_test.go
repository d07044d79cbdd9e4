package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/dispatcher/dispatchertest"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/kservetest"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/proxy"
)

// The benchmarks here measure the front door's cost per inference request
// (one op = one request answered 200), with callers sending concurrently so
// that batches form:
//
//   - BenchmarkHandler calls the proxy's handler in-process (no sockets):
//     routing, reading and decoding the body, Submit (the real dispatcher,
//     adhoc rule, one instance), merge and split (for a batch of several;
//     a lone caller's request and answer go as they came) and writing the
//     answer. Its upstream answers at once from prebuilt replies; in
//     passthrough mode (model not batched) the request goes to a Forwarder
//     that answers at once.
//   - BenchmarkServer is the whole hot path over loopback: a fasthttp client
//     (as `ratebatch load`) -> the proxy's fasthttp server -> a fasthttp
//     server that answers at once; "direct" is the client and that server
//     alone, the baseline the proxy's cost is added to.
//
// Each reports rows/batch (batching mode) and alloc-B/req-B, bytes
// allocated per request over the request's wire size: for the image model
// (602 KB requests) it counts the copies of the request bytes the proxy
// makes, whose target is one (reading the body).

type benchTensor struct {
	name  string
	dt    kserve.Datatype
	shape []int64 // without the batch dimension
}

type benchModel struct {
	name     string
	maxBatch int
	inputs   []benchTensor
	outputs  []benchTensor
	binary   bool
}

var (
	benchSimpleIn  = []benchTensor{{"INPUT0", kserve.Int32, []int64{16}}, {"INPUT1", kserve.Int32, []int64{16}}}
	benchSimpleOut = []benchTensor{{"OUTPUT0", kserve.Int32, []int64{16}}, {"OUTPUT1", kserve.Int32, []int64{16}}}

	benchSimpleJSON   = benchModel{"simple", 8, benchSimpleIn, benchSimpleOut, false}
	benchSimpleBinary = benchModel{"simple", 8, benchSimpleIn, benchSimpleOut, true}
	benchImageBinary  = benchModel{"image", 8,
		[]benchTensor{{"INPUT__0", kserve.FP32, []int64{3, 224, 224}}},
		[]benchTensor{{"OUTPUT__0", kserve.FP32, []int64{1000}}}, true}
)

func (m benchModel) form() string {
	if m.binary {
		return "binary"
	}
	return "json"
}

func (t benchTensor) tensor(rows int64, binary bool) kserve.Tensor {
	shape := append([]int64{rows}, t.shape...)
	n, _ := kserve.ElementCount(shape)
	data := make([]byte, n*int64(t.dt.Size()))
	for i := range data {
		data[i] = byte(i%7 + 1)
	}
	return kserve.Tensor{Name: t.name, Datatype: t.dt, Shape: shape, Data: data, Binary: binary}
}

// benchRequest is one caller's wire body, as `ratebatch load` sends it.
type benchRequest struct {
	body      []byte
	headerLen string // Inference-Header-Content-Length, "" in JSON form
}

func (m benchModel) request(tb testing.TB, id string) benchRequest {
	tb.Helper()
	r := &kserve.Request{ID: id}
	if m.binary {
		r.Parameters = kserve.Parameters{kserve.ParamBinaryDataOutput: true}
	}
	for _, in := range m.inputs {
		r.Inputs = append(r.Inputs, in.tensor(1, m.binary))
	}
	body, hl, err := kserve.AppendRequest(nil, r, m.binary)
	if err != nil {
		tb.Fatal(err)
	}
	if !m.binary {
		return benchRequest{body: body}
	}
	return benchRequest{body: body, headerLen: strconv.Itoa(hl)}
}

// reply is the upstream's answer to rows rows, binary or JSON.
func (m benchModel) reply(tb testing.TB, rows int, binary bool) (body []byte, headerLen string) {
	tb.Helper()
	resp := &kserve.Response{ModelName: m.name, ModelVersion: "1"}
	for _, out := range m.outputs {
		resp.Outputs = append(resp.Outputs, out.tensor(int64(rows), binary))
	}
	body, hl, err := kserve.AppendResponse(nil, resp)
	if err != nil {
		tb.Fatal(err)
	}
	if hl < 0 {
		return body, ""
	}
	return body, strconv.Itoa(hl)
}

// newBenchUpstream answers every batch at once with the model's prebuilt
// binary reply for its rows, and a lone JSON caller's request, sent as it
// came, with a JSON reply for one row.
func newBenchUpstream(tb testing.TB, m benchModel) *dispatchertest.InstantUpstream {
	jsonBody, _ := m.reply(tb, 1, false)
	return dispatchertest.NewInstantUpstream(m.maxBatch, func(rows int) ([]byte, int) {
		body, hl := m.reply(tb, rows, true)
		n, _ := strconv.Atoi(hl)
		return body, n
	}, jsonBody)
}

// benchForward answers a passthrough request at once, in the form it
// was sent, after reading its body.
type benchForward struct {
	body             []byte
	headerLen, ctype string
}

func (f *benchForward) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, _ time.Time) error {
	if st := req.BodyStream(); st != nil {
		io.Copy(io.Discard, st)
	}
	resp.Reset()
	resp.SetStatusCode(http.StatusOK)
	resp.Header.SetContentType(f.ctype)
	if f.headerLen != "" {
		resp.Header.Set(kserve.HeaderContentLength, f.headerLen)
	}
	resp.SetBodyRaw(f.body)
	return nil
}

// benchPlanner always answers with the work-conserving rule; no observer
// learns from the queue (as the planner before the observer seam, whose
// feedback did nothing).
type benchPlanner struct{}

func (benchPlanner) Rule() policy.Rule        { return policy.Fill{Policy: policy.NameAdhoc} }
func (benchPlanner) Changed() <-chan struct{} { return nil }

// newBenchDispatcher batches m through up; batched false leaves it unknown, so
// the proxy passes its requests through.
func newBenchDispatcher(tb testing.TB, m benchModel, up dispatcher.Upstream, batched bool) *dispatcher.Dispatcher {
	tb.Helper()
	d := dispatcher.New(dispatcher.Options{Upstream: up, Retries: 1, Metrics: dispatcher.NewMetrics(nil)})
	if batched {
		if err := d.SetModel(dispatcher.ModelSpec{Name: m.name, MaxBatch: m.maxBatch, Instances: 1, QueueRows: 1 << 16, Planner: benchPlanner{}}); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d.Drain(ctx)
	})
	return d
}

type benchCase struct {
	mode string // batching or passthrough
	m    benchModel
	conc int
}

func (c benchCase) String() string {
	return fmt.Sprintf("%s/%s-%s/callers=%d", c.mode, c.m.name, c.m.form(), c.conc)
}

var benchCases = []benchCase{
	{"batching", benchSimpleJSON, 64}, {"batching", benchSimpleBinary, 64}, {"batching", benchImageBinary, 16},
	{"batching", benchSimpleJSON, 1}, {"batching", benchSimpleBinary, 1}, // every batch of one caller
	{"passthrough", benchSimpleJSON, 64}, {"passthrough", benchSimpleBinary, 64}, {"passthrough", benchImageBinary, 16},
}

// newBenchHandler is the front door for a case, with everything upstream of it
// answering at once.
func newBenchHandler(tb testing.TB, c benchCase) (*proxy.Server, *dispatcher.Dispatcher) {
	tb.Helper()
	body, hl := c.m.reply(tb, 1, c.m.binary)
	fw := &benchForward{body: body, headerLen: hl, ctype: "application/json"}
	if c.m.binary {
		fw.ctype = "application/octet-stream"
	}
	d := newBenchDispatcher(tb, c.m, newBenchUpstream(tb, c.m), c.mode == "batching")
	h := proxy.New(proxy.Options{Backend: door.Backend{Batcher: d}, Upstream: mustURL("http://upstream.invalid:8000"),
		MaxBodyBytes: 64 << 20, RetryAfter: time.Second, Forward: fw})
	return h, d
}

// benchHeaders are a request's headers as `ratebatch load` sends them.
func benchHeaders(rq benchRequest) map[string]string {
	if rq.headerLen != "" {
		return map[string]string{"Content-Type": "application/octet-stream", kserve.HeaderContentLength: rq.headerLen}
	}
	return map[string]string{"Content-Type": "application/json"}
}

// BenchmarkHandler is the proxy's own work per request, in-process: the
// handler is called with the body as a stream, as the server hands it over.
func BenchmarkHandler(b *testing.B) {
	for _, c := range benchCases {
		b.Run(c.String(), func(b *testing.B) {
			h, d := newBenchHandler(b, c)
			measureHandler(b, h, d, c)
		})
	}
}

// measureHandler sends c's requests to h in-process from c.conc callers
// and reports the dispatcher's figures (dispatchertest.Measure).
func measureHandler(b *testing.B, h *proxy.Server, d *dispatcher.Dispatcher, c benchCase) {
	target := "/v2/models/" + c.m.name + "/infer"
	reqs := make([]benchRequest, c.conc)
	headers := make([]map[string]string, c.conc)
	ctxs := make([]fasthttp.RequestCtx, c.conc)
	for i := range reqs {
		reqs[i] = c.m.request(b, "lg-"+strconv.Itoa(i))
		headers[i] = benchHeaders(reqs[i])
	}
	dispatchertest.Measure(b, d, len(reqs[0].body), c.conc, func(w int) error {
		ctx := &ctxs[w]
		serveInProcess(h, ctx, http.MethodPost, target, headers[w], reqs[w].body)
		if st := ctx.Response.StatusCode(); st != http.StatusOK || len(ctx.Response.Body()) == 0 {
			return fmt.Errorf("status %d: %.200s", st, ctx.Response.Body())
		}
		return nil
	})
}

// benchReplyServer is a loopback server answering infer requests at once:
// binary requests get a binary answer for the rows in their header, JSON
// ones a JSON answer for one row.
func benchReplyServer(tb testing.TB, m benchModel) string {
	jsonBody, _ := m.reply(tb, 1, false)
	return kservetest.Server(tb, m.maxBatch, func(rows int) ([]byte, int) {
		body, hl := m.reply(tb, rows, true)
		n, err := strconv.Atoi(hl)
		if err != nil {
			tb.Fatalf("reply header length %q: %v", hl, err)
		}
		return body, n
	}, jsonBody)
}

// BenchmarkServer is the whole hot path over loopback sockets. Its ns/op is
// the wall time per request over all callers (client, proxy and upstream
// share the machine); compare a mode with "direct" for what the proxy adds.
func BenchmarkServer(b *testing.B) {
	for _, mode := range []string{"direct", "passthrough", "batching"} {
		for _, m := range []benchModel{benchSimpleJSON, benchSimpleBinary} {
			c := benchCase{mode, m, 64}
			b.Run(c.String(), func(b *testing.B) {
				upAddr := benchReplyServer(b, m)
				target := "http://" + upAddr
				var d *dispatcher.Dispatcher
				if mode != "direct" {
					client, err := dispatcher.NewHTTPUpstream(target, 256, 10*time.Second)
					if err != nil {
						b.Fatal(err)
					}
					d = newBenchDispatcher(b, m, client, mode == "batching")
					target = startFront(b, proxy.Options{Backend: door.Backend{Batcher: d}, Upstream: mustURL(target), MaxBodyBytes: 64 << 20, RetryAfter: time.Second})
				}
				benchSendAll(b, d, m, target, c.conc)
			})
		}
	}
}

// benchSendAll sends b.N requests from conc fasthttp sessions, one
// connection each, as `ratebatch load` does.
func benchSendAll(b *testing.B, d *dispatcher.Dispatcher, m benchModel, target string, conc int) {
	u, _ := url.Parse(target)
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: conc, NoDefaultUserAgentHeader: true}
	b.Cleanup(hc.CloseIdleConnections)
	type session struct {
		req  fasthttp.Request
		resp fasthttp.Response
	}
	sessions := make([]session, conc)
	var reqBytes int
	for i := range sessions {
		rq := m.request(b, "lg-"+strconv.Itoa(i))
		s := &sessions[i]
		s.req.SetRequestURI(target + "/v2/models/" + m.name + "/infer")
		s.req.Header.SetMethod(fasthttp.MethodPost)
		s.req.Header.SetContentType("application/json")
		if rq.headerLen != "" {
			s.req.Header.SetContentType("application/octet-stream")
			s.req.Header.Set(kserve.HeaderContentLength, rq.headerLen)
		}
		s.req.SetBodyRaw(rq.body)
		reqBytes = len(rq.body)
	}
	dispatchertest.Measure(b, d, reqBytes, conc, func(w int) error {
		s := &sessions[w]
		s.resp.Reset()
		if err := hc.DoTimeout(&s.req, &s.resp, 10*time.Second); err != nil {
			return err
		}
		if s.resp.StatusCode() != http.StatusOK || len(s.resp.Body()) == 0 {
			return fmt.Errorf("status %d: %.200s", s.resp.StatusCode(), s.resp.Body())
		}
		return nil
	})
}

// TestBenchFixtures checks that every benchmark case answers 200 with the
// caller's own answer, so the benchmarks measure the path they claim to.
func TestBenchFixtures(t *testing.T) {
	for _, c := range benchCases {
		t.Run(c.String(), func(t *testing.T) {
			h, _ := newBenchHandler(t, c)
			rq := c.m.request(t, "only")
			var ctx fasthttp.RequestCtx
			serveInProcess(h, &ctx, http.MethodPost, "/v2/models/"+c.m.name+"/infer", benchHeaders(rq), rq.body)
			if st := ctx.Response.StatusCode(); st != http.StatusOK {
				t.Fatalf("status %d: %s", st, ctx.Response.Body())
			}
			hl := -1
			if v := ctx.Response.Header.Peek(kserve.HeaderContentLength); len(v) > 0 {
				hl, _ = strconv.Atoi(string(v))
			}
			if (hl >= 0) != c.m.binary {
				t.Errorf("answer binary = %v, want %v", hl >= 0, c.m.binary)
			}
			resp, err := kserve.DecodeResponse(ctx.Response.Body(), hl)
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Outputs) != len(c.m.outputs) || resp.Outputs[0].Shape[0] != 1 {
				t.Errorf("answer has %d outputs, first shape %v", len(resp.Outputs), resp.Outputs[0].Shape)
			}
			if c.mode == "batching" {
				// A lone caller's request goes as it came and its answer
				// comes back as the upstream gave it.
				if want, _ := c.m.reply(t, 1, c.m.binary); !bytes.Equal(ctx.Response.Body(), want) {
					t.Errorf("lone caller's answer is not the upstream's as it came:\n got %.200q\nwant %.200q", ctx.Response.Body(), want)
				}
			}
		})
	}
}

// sinkBatcher answers every call of model "simple" with a small fixed
// response, so that a benchmark measures reading the request alone.
type sinkBatcher struct{}

func (sinkBatcher) Model(name string) (int, bool) { return 8, name == "simple" }
func (sinkBatcher) Delivered(dispatcher.Result)   {}

func (sinkBatcher) Submit(_ context.Context, _ string, c *dispatcher.Call) dispatcher.Result {
	return dispatcher.Result{Resp: &kserve.Response{ModelName: "simple", Outputs: []kserve.Tensor{
		{Name: "y", Datatype: "INT32", Shape: []int64{1, 1}, Data: []byte{byte(c.Rows), 0, 0, 0}}}}}
}

// BenchmarkLargeBody posts large binary bodies (one INT32 tensor of the
// given size) over loopback to a front door with a 512 MiB memory budget,
// from conc clients at once, with the budget's pool of large buffers
// (pool) and without (new: every body a new buffer, as before the pool).
// gc/op is the collector's cycles per request: what a body's fresh
// allocation costs everyone else.
func BenchmarkLargeBody(b *testing.B) {
	for _, mib := range []int{16, 60} {
		for _, conc := range []int{1, 4} {
			for _, pool := range []bool{false, true} {
				name := fmt.Sprintf("body=%dMiB/conc=%d/buffers=new", mib, conc)
				if pool {
					name = fmt.Sprintf("body=%dMiB/conc=%d/buffers=pool", mib, conc)
				}
				b.Run(name, func(b *testing.B) { benchLargeBody(b, mib<<20, conc, pool) })
			}
		}
	}
}

func benchLargeBody(b *testing.B, size, conc int, pool bool) {
	defer proxy.SetLargeBodyPool(pool)()
	budget := membudget.New(512 << 20)
	b.Cleanup(budget.DropIdle) // the next case starts without this one's buffers
	// The runtime's soft limit as serve sets it (membudget.LimitRuntime).
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(budget.Limit() + 96<<20))
	target := startFront(b, proxy.Options{Backend: door.Backend{Batcher: sinkBatcher{}, Memory: budget}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: 64 << 20, Forward: fakeUpstream{}, LargeBodyLanes: -1})
	n := size / 4
	header := fmt.Sprintf(`{"inputs":[{"name":"x","datatype":"INT32","shape":[1,%d],"parameters":{"binary_data_size":%d}}]}`, n, 4*n)
	body := append([]byte(header), make([]byte, 4*n)...)
	u, _ := url.Parse(target)
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: conc, NoDefaultUserAgentHeader: true}
	b.Cleanup(hc.CloseIdleConnections)
	var gc0, gc1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&gc0)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range conc {
		wg.Go(func() {
			var req fasthttp.Request
			var resp fasthttp.Response
			req.SetRequestURI(target + "/v2/models/simple/infer")
			req.Header.SetMethod(fasthttp.MethodPost)
			req.Header.SetContentType("application/octet-stream")
			req.Header.Set(kserve.HeaderContentLength, strconv.Itoa(len(header)))
			req.SetBodyRaw(body)
			for next.Add(1) <= int64(b.N) {
				resp.Reset()
				if err := hc.DoTimeout(&req, &resp, 30*time.Second); err != nil {
					b.Error(err)
					return
				}
				if resp.StatusCode() != http.StatusOK {
					b.Errorf("status %d: %.200s", resp.StatusCode(), resp.Body())
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	runtime.ReadMemStats(&gc1)
	b.ReportMetric(float64(gc1.NumGC-gc0.NumGC)/float64(b.N), "gc/op")
	b.ReportMetric(float64(gc1.TotalAlloc-gc0.TotalAlloc)/float64(b.N), "heapB/op")
}

// BenchmarkSmallBesideLarge is scripts/memload.sh in miniature, in one
// process: large clients post 60 MiB binary bodies without pause (each
// with "Expect: 100-continue", a refused one trying again at once), while
// b.N small requests are sent one after another, 20 ms apart, to a front
// door with a 512 MiB budget and the runtime's soft limit as serve sets
// it. It reports the small requests' p50 and p99 (ms) and the large
// bodies answered 200 per second, without the large clients (alone),
// and beside them with and without the pool of large buffers and the
// large-body lane. Run it with -benchtime 200x or so; read the ratios of
// its cases, not their figures.
func BenchmarkSmallBesideLarge(b *testing.B) {
	for _, c := range []struct {
		name  string
		large int
		pool  bool
		lanes int
	}{
		{"alone", 0, true, 0},
		{"beside/buffers=new/lanes=none", 8, false, -1}, // as before the pool and the lane
		{"beside/buffers=pool/lanes=none", 8, true, -1},
		{"beside/buffers=new/lanes=1", 8, false, 1},
		{"beside/buffers=pool/lanes=1", 8, true, 1},
		{"beside/buffers=pool/lanes=2", 8, true, 2},
	} {
		b.Run(c.name, func(b *testing.B) { benchSmallBeside(b, c.large, c.pool, c.lanes) })
	}
}

func benchSmallBeside(b *testing.B, large int, pool bool, lanes int) {
	defer proxy.SetLargeBodyPool(pool)()
	budget := membudget.New(512 << 20)
	b.Cleanup(budget.DropIdle)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(budget.Limit() + 96<<20))
	target := startFront(b, proxy.Options{Backend: door.Backend{Batcher: sinkBatcher{}, Memory: budget}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: 64 << 20, Forward: fakeUpstream{}, LargeBodyLanes: lanes, RetryAfter: time.Second})
	addr := target[len("http://"):]
	const size = 60 << 20
	header := fmt.Sprintf(`{"inputs":[{"name":"x","datatype":"INT32","shape":[1,%d],"parameters":{"binary_data_size":%d}}]}`, size/4, size)
	body := append([]byte(header), make([]byte, size)...)
	head := fmt.Appendf(nil, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\nContent-Type: application/octet-stream\r\n"+
		"Inference-Header-Content-Length: %d\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", len(header), len(body))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range large {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if largeOnce(addr, head, body) {
					ok.Add(1)
				}
			}
		})
	}
	u, _ := url.Parse(target)
	hc := &fasthttp.HostClient{Addr: u.Host, MaxConns: 1, NoDefaultUserAgentHeader: true}
	b.Cleanup(hc.CloseIdleConnections)
	var req fasthttp.Request
	var resp fasthttp.Response
	req.SetRequestURI(target + "/v2/models/simple/infer")
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.SetBodyString(inferBody(200))
	lat := make([]time.Duration, 0, b.N)
	t0 := time.Now()
	b.ResetTimer()
	for i := range b.N {
		if d := time.Until(t0.Add(time.Duration(i) * 20 * time.Millisecond)); d > 0 {
			time.Sleep(d) // the stream's pace, as memload.py's
		}
		start := time.Now()
		resp.Reset()
		if err := hc.DoTimeout(&req, &resp, 30*time.Second); err != nil || resp.StatusCode() != http.StatusOK {
			b.Fatalf("small request %d: %v %d %.200s", i, err, resp.StatusCode(), resp.Body())
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	took := time.Since(t0)
	close(stop)
	wg.Wait()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat)-1)+0.5))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50_ms")
	b.ReportMetric(q(0.99), "p99_ms")
	b.ReportMetric(float64(ok.Load())/took.Seconds(), "large_ok/s")
}

// largeOnce posts one large body, waiting for "100 Continue" first, and
// reports whether it was answered 200 (a 503 comes instead of the 100).
func largeOnce(addr string, head, body []byte) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(head); err != nil {
		return false
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusContinue {
		return false
	}
	if _, err := c.Write(body); err != nil {
		return false
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
