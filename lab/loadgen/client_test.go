package loadgen

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/internal/procs"
	"github.com/ratebatch/ratebatch/kserve"
)

// fastUpstream is a loopback server that answers every infer request with
// one prebuilt simple response and costs next to nothing, so benchmarks
// measure the client. It answers metadata too, so Run can discover inputs.
func fastUpstream(b testing.TB) string {
	b.Helper()
	resp := &kserve.Response{ModelName: "simple", ModelVersion: "1", Outputs: []kserve.Tensor{
		{Name: "OUTPUT0", Datatype: kserve.Int32, Shape: []int64{1, 16}, Data: make([]byte, 64)},
		{Name: "OUTPUT1", Datatype: kserve.Int32, Shape: []int64{1, 16}, Data: make([]byte, 64)},
	}}
	answer, _, err := kserve.AppendResponse(nil, resp)
	if err != nil {
		b.Fatal(err)
	}
	meta := []byte(`{"name":"simple","inputs":[{"name":"INPUT0","datatype":"INT32","shape":[-1,16]},` +
		`{"name":"INPUT1","datatype":"INT32","shape":[-1,16]}]}`)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		if ctx.IsGet() {
			ctx.SetBody(meta)
			return
		}
		ctx.SetBody(answer)
	}}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

func benchPayload(b *testing.B) *payload {
	ps, err := buildPayloads(simpleMetadata.Inputs, 1, 1, false, 1, maxPayloadBytes)
	if err != nil {
		b.Fatal(err)
	}
	return &ps[0]
}

// BenchmarkClient compares the two HTTP clients on the request path (one
// prebuilt JSON body, whole answer read) against a loopback server, with
// GOMAXPROCS*8 concurrent senders. fasthttp is what Run uses. cpu-us/op is
// the process's CPU time per request, server included: on a shared machine
// it is steadier than ns/op.
func BenchmarkClient(b *testing.B) {
	target := fastUpstream(b)
	ep, err := parseEndpoint(target, "simple", "")
	if err != nil {
		b.Fatal(err)
	}
	p := benchPayload(b)
	b.Run("fasthttp", func(b *testing.B) {
		c := newHTTPClient(ep, 1024, 5*time.Second)
		defer c.close()
		b.SetParallelism(8)
		b.ReportAllocs()
		defer reportCPU(b)()
		b.RunParallel(func(pb *testing.PB) {
			s := c.newSession(false)
			for pb.Next() {
				a, err := s.post(p)
				if err != nil || a.status != 200 {
					b.Errorf("post: %v, status %d", err, a.status)
					return
				}
			}
		})
	})
	b.Run("net-http", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: 10 * time.Second,
			DisableCompression: true}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		b.SetParallelism(8)
		b.ReportAllocs()
		defer reportCPU(b)()
		b.RunParallel(func(pb *testing.PB) {
			var buf bytes.Buffer
			for pb.Next() {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, ep.inferURI, bytes.NewReader(p.body))
				if err != nil {
					b.Error(err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Errorf("post: %v", err)
					return
				}
				buf.Reset()
				_, err = buf.ReadFrom(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					b.Errorf("read: %v, status %d", err, resp.StatusCode)
					return
				}
			}
		})
	})
}

// BenchmarkServe is the whole request path of a run as one worker goes
// through it: send, read, classify, record. allocs/op is what each request
// costs the garbage collector (the in-process server included).
func BenchmarkServe(b *testing.B) {
	target := fastUpstream(b)
	for _, verify := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "verify"}[verify], func(b *testing.B) {
			ep, err := parseEndpoint(target, "simple", "")
			if err != nil {
				b.Fatal(err)
			}
			r := &runner{client: newHTTPClient(ep, 4, 5*time.Second), payloads: []payload{*benchPayload(b)}, start: time.Now()}
			defer r.client.close()
			if verify {
				// The fast upstream answers zeros: count the decode and
				// the check, whose result does not matter here.
				r.verifier = VerifierFunc(verifySimple)
			}
			s := r.client.newSession(false)
			recs := make([]Record, 1)
			ctx := context.Background()
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				r.serve(ctx, s, nil, job{rec: &recs[0], p: &r.payloads[0]})
			}
			if recs[0].Status != 200 {
				b.Fatalf("status %d", recs[0].Status)
			}
		})
	}
}

// BenchmarkOpenLoop runs Run for 2 s at 20,000 requests/s against the fast
// loopback upstream and reports what it achieved: ok/s, drops, latency, how
// late the client sent (lag) and the CPU time per request of the process
// (client and upstream). Run with -benchtime 1x; the machine's other load
// shows in the lag and the latency, much less in cpu-us/req.
func BenchmarkOpenLoop(b *testing.B) {
	target := fastUpstream(b)
	for b.Loop() {
		cpu := processCPU()
		res, err := Run(context.Background(), Config{Target: target, Model: "simple",
			Rate: ConstantRate(20_000), Duration: 2 * time.Second, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		s := res.Summary
		b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(max(s.Sent, 1)), "cpu-us/sent")
		b.ReportMetric(s.ThroughputRPS, "ok/s")
		b.ReportMetric(float64(s.Dropped), "dropped")
		b.ReportMetric(float64(s.Errors), "errors")
		b.ReportMetric(s.P50LatencyMs, "p50-ms")
		b.ReportMetric(s.P99LatencyMs, "p99-ms")
		b.ReportMetric(s.LagP99Ms, "lag-p99-ms")
	}
}

// processCPU is the CPU time (user + system) the test process has used; on
// a shared machine it measures a request's cost better than wall time. Where
// it cannot be read it is 0, and the benchmarks report 0 CPU per request.
func processCPU() time.Duration {
	d, _ := procs.CPUTime()
	return d
}

// reportCPU starts measuring CPU time; the returned func reports it per op.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		b.ReportMetric(float64(processCPU()-start)/float64(time.Microsecond)/float64(b.N), "cpu-us/op")
	}
}
