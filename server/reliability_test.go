package server_test

// Reliability: the proxy keeps working and loses nothing while its upstream
// dies, stalls, fails or drops connections, while clients walk away, and
// through a burst of fifty times the normal load. Every test runs the real
// `ratebatch serve` in-process against the emulator on loopback and checks
// three books against each other: the client's (every request sent got an
// answer), the proxy's (accepted = answered ok + answered with an error) and
// the process's (goroutines and live heap back where they were).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
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
	"github.com/ratebatch/ratebatch/internal/stats"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// ledger is the proxy's account of one model, read from its registry.
type ledger struct {
	accepted, ok, failed float64            // admitted to the queue; answered ok; answered with an error
	rejected             map[string]float64 // ratebatch_requests_rejected_total by reason
	errors               map[int]float64    // error answers written by the front door, by status
	upstream             map[string]float64 // ratebatch_upstream_errors_total by kind
	queued, inFlight     int
}

func ledgerOf(t *testing.T, lt *servertest.Proxy, model string) ledger {
	t.Helper()
	l := ledger{rejected: map[string]float64{}, errors: map[int]float64{}, upstream: map[string]float64{}}
	// The queue first: a batch's answers are counted before it stops being
	// in flight, so counters read after an idle queue include them.
	for _, s := range lt.Dispatcher().Snapshots() {
		if s.Model == model {
			l.queued, l.inFlight = s.QueuedRows, s.InFlight
		}
	}
	fams, err := lt.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["model"] != model {
				continue
			}
			v := m.GetCounter().GetValue()
			switch mf.GetName() {
			case "ratebatch_requests_accepted_total":
				l.accepted += v
			case "ratebatch_requests_answered_total":
				if labels["outcome"] == "ok" {
					l.ok += v
				} else {
					l.failed += v
				}
			case "ratebatch_requests_rejected_total":
				l.rejected[labels["reason"]] += v
			case "ratebatch_request_errors_total":
				s, _ := strconv.Atoi(labels["status"])
				l.errors[s] += v
			case "ratebatch_upstream_errors_total":
				l.upstream[labels["kind"]] += v
			}
		}
	}
	return l
}

// settled waits until the model has nothing queued or in flight (answers
// to clients that left are delivered when their batch ends) and returns
// the ledger then.
func settled(t *testing.T, lt *servertest.Proxy, model string) ledger {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last ledger
	for {
		l := ledgerOf(t, lt, model)
		// A caller leaving the queue is counted just after its rows leave,
		// so the counters must also have stopped moving.
		if l.queued == 0 && l.inFlight == 0 && l.same(last) {
			return l
		}
		last = l
		if time.Now().After(deadline) {
			t.Fatalf("model %s never settled: %d rows queued, %d batches in flight", model, l.queued, l.inFlight)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (l ledger) same(o ledger) bool {
	return l.accepted == o.accepted && l.ok == o.ok && l.failed == o.failed && maps.Equal(l.rejected, o.rejected)
}

// balanced checks the proxy's own invariant: every admitted request was
// answered exactly once, with a result or an error.
func (l ledger) balanced(t *testing.T) {
	t.Helper()
	if l.accepted != l.ok+l.failed {
		t.Fatalf("accounting: accepted %v != answered ok %v + answered with an error %v", l.accepted, l.ok, l.failed)
	}
}

// preQueue is the requests the proxy refused before they reached a queue.
func (l ledger) preQueue() float64 {
	return l.rejected["queue_full"] + l.rejected["batch_size"] + l.rejected["shutdown"]
}

// checkBooks checks a load run end to end: the client got an HTTP answer
// for every request it sent (no timeout, reset or wrong answer), each
// status is 200 or one of allowed, and the client's and the proxy's counts
// agree exactly. It assumes no client left early.
func checkBooks(t *testing.T, s loadgen.Summary, l ledger, allowed ...int) {
	t.Helper()
	l.balanced(t)
	if s.Sent != s.OK+s.Errors {
		t.Fatalf("client: sent %d != ok %d + errors %d", s.Sent, s.OK, s.Errors)
	}
	for kind, n := range s.ErrorsByKind {
		if kind != "http_status" {
			t.Errorf("client: %d requests ended as %q: lost, hung or answered wrongly (first mismatch aside)", n, kind)
		}
	}
	for status, n := range s.StatusCounts {
		if status != http.StatusOK && !slices.Contains(allowed, status) {
			t.Errorf("client: %d answers with status %d; allowed: 200 and %v", n, status, allowed)
		}
		if status != http.StatusOK && float64(n) != l.errors[status] {
			t.Errorf("status %d: client saw %d, proxy wrote %v", status, n, l.errors[status])
		}
	}
	if float64(s.OK) != l.ok {
		t.Errorf("client got %d results, proxy answered %v ok", s.OK, l.ok)
	}
	if float64(s.Sent) != l.accepted+l.preQueue() {
		t.Errorf("client sent %d, proxy accepted %v and refused %v before queueing", s.Sent, l.accepted, l.preQueue())
	}
	if t.Failed() {
		t.FailNow()
	}
}

// footprint is what a leak would grow: goroutines and the live heap.
type footprint struct {
	goroutines int    // excluding idle keep-alive server connections
	idleConns  int    // server goroutines waiting for a connection's next request
	heap       uint64 // bytes live after a full collection
}

func (f footprint) String() string {
	return fmt.Sprintf("%d goroutines (+%d idle connections), %.1f MiB live heap", f.goroutines, f.idleConns, float64(f.heap)/(1<<20))
}

func takeFootprint() footprint {
	runtime.GC()
	runtime.GC() // the second one frees what the first one's finalizers let go
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var f footprint
	for _, g := range strings.Split(string(buf), "\n\n") {
		if isIdleConn(g) {
			f.idleConns++
		} else {
			f.goroutines++
		}
	}
	f.heap = ms.HeapAlloc
	return f
}

// isIdleConn reports whether a goroutine's stack is a server connection
// between requests: a keep-alive connection, kept by a client's pool (the
// proxy's fasthttp pool to the upstream, at most upstream_client.max_conns,
// each closed after 90 s idle; the test's own clients to the proxy), or an
// idle worker of the proxy's fasthttp server, which its pool ends after
// 10 s; or a client pool's own: a pooled net/http client connection's
// read and write loops, a fasthttp host client's cleaner, which ends once
// its pool is empty (an upstream restarted in the soak leaves a pool of
// new connections beside the old one's cleaner for a while). Such
// goroutines are bounded by the pools, not leaked; one serving a request
// is counted.
func isIdleConn(stack string) bool {
	switch {
	case strings.Contains(stack, "net/http.(*conn).serve"):
		return !strings.Contains(stack, "ServeHTTP")
	case strings.Contains(stack, "fasthttp.(*workerPool).workerFunc"):
		return !strings.Contains(stack, "ServeFastHTTP") && !strings.Contains(stack, "ErrorHandler")
	case strings.Contains(stack, "net/http.(*persistConn).readLoop"), strings.Contains(stack, "net/http.(*persistConn).writeLoop"),
		strings.Contains(stack, "fasthttp.(*HostClient).connsCleaner"):
		return true
	}
	return false
}

// Leak margins. Goroutines: timers and pollers of the runtime and of the
// libraries come and go, so a few more is not a leak; a leak is one per
// request or per batch, at least a dozen in each of these tests. Heap:
// sync.Pool buffers, the monitor's windows and histogram buckets may stay;
// a leak of request bodies is megabytes.
const (
	goroutineSlack = 4
	heapSlack      = 8 << 20
)

func withinMargins(before, now footprint) bool {
	return now.goroutines <= before.goroutines+goroutineSlack && now.heap <= before.heap+heapSlack
}

// The leak check sees a leak of the size these tests would cause.
func TestLeakCheckSeesLeaks(t *testing.T) {
	before := takeFootprint()
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 * goroutineSlack {
		wg.Go(func() { <-release })
	}
	if now := takeFootprint(); withinMargins(before, now) {
		t.Fatalf("%d blocked goroutines not seen: before %v, now %v", 2*goroutineSlack, before, now)
	}
	close(release)
	wg.Wait()
	kept := make([][]byte, 0, 32)
	for range 32 {
		kept = append(kept, make([]byte, heapSlack/16))
	}
	if now := takeFootprint(); withinMargins(before, now) {
		t.Fatalf("%d MiB kept live not seen: before %v, now %v", 2*heapSlack>>20, before, now)
	}
	runtime.KeepAlive(kept)
	kept = nil
	expectNoLeak(t, before)
}

// expectNoLeak waits up to 10 s for the goroutines and the live heap to come
// back within the margins of before, and fails with the goroutines' stacks
// if they do not.
func expectNoLeak(t *testing.T, before footprint) footprint {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		now := takeFootprint()
		if withinMargins(before, now) {
			t.Logf("footprint: before %v, after %v", before, now)
			return now
		}
		if time.Now().After(deadline) {
			var stacks bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&stacks, 1)
			t.Fatalf("leak: before %v, after %v (margins %d goroutines, %d MiB)\n%s",
				before, now, goroutineSlack, heapSlack>>20, stacks.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// offerLoad offers load to the proxy's "simple" model and verifies every
// answer. It reports failures with t.Error, so it may run in a goroutine.
func offerLoad(t *testing.T, base string, rate loadgen.Rate, d time.Duration, seed uint64) loadgen.Result {
	t.Helper()
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Target: base, Model: "simple", Rate: rate, Duration: d, Seed: seed,
		Verify: true, Timeout: 10 * time.Second,
		Inputs: simpleInputs,
	})
	if err != nil {
		t.Errorf("load run: %v", err)
	}
	if res.FirstVerifyError != "" {
		t.Errorf("a wrong answer: %s", res.FirstVerifyError)
	}
	return res
}

// simpleInputs spares each run a metadata lookup through the proxy.
var simpleInputs = []kserve.TensorMetadata{
	{Name: "INPUT0", Datatype: "INT32", Shape: []int64{-1, 16}},
	{Name: "INPUT1", Datatype: "INT32", Shape: []int64{-1, 16}},
}

// client is an HTTP client whose idle connections a test can close before it
// counts goroutines.
func newClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableCompression = true
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// postSimple sends simpleBody and returns the status, the decoded answer and
// how long it took; a transport error fails the test.
func postSimple(t *testing.T, c *http.Client, url, id string, base, rows int) (int, inferReply, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := c.Post(url, "application/json", bytes.NewReader(simpleBody(id, base, rows)))
	if err != nil {
		t.Errorf("%s: %v", id, err)
		return 0, inferReply{}, time.Since(start)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var r inferReply
	if err := json.Unmarshal(data, &r); err != nil {
		t.Errorf("%s: status %d, body %q is not JSON: %v", id, resp.StatusCode, data, err)
	}
	if resp.StatusCode != http.StatusOK && r.Error == "" {
		t.Errorf("%s: status %d without a KServe error body: %q", id, resp.StatusCode, data)
	}
	return resp.StatusCode, r, time.Since(start)
}

// okAfter reports how many requests were sent at or after from, and how many
// of those failed.
func okAfter(records []loadgen.Record, from time.Duration) (sent, failed int) {
	for _, r := range records {
		if r.Err == loadgen.KindDropped || r.Start < from {
			continue
		}
		sent++
		if r.Err != loadgen.KindNone {
			failed++
		}
	}
	return sent, failed
}

// The upstream is killed while batches run on it and restarted: callers of
// the lost batches and those arriving while it is down get 502/503, nothing
// hangs or vanishes, and the proxy serves again as soon as it is back.
func TestReliabilityUpstreamKilledMidBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(emulator.BatchInfo) emulator.Fault {
		return emulator.Fault{Delay: 15 * time.Millisecond} // every batch is in flight for a while
	}})
	addr := em.Addr()
	// No hold: this test is about the errors of an outage the callers are
	// not held through (TestReliabilityUpstreamRestartHeld holds them).
	lt := servertest.Start(t, addr, nil, func(c *config.Config) { c.Upstreams.Timeout, c.Upstreams.Hold = 3*time.Second, 0 })
	const killAt, restartAt, d = 700 * time.Millisecond, 1200 * time.Millisecond, 2500 * time.Millisecond
	res, l, before := runOutage(t, lt, em, addr, loadgen.ConstantRate(150), killAt, restartAt-killAt, d, 2)
	checkBooks(t, res.Summary, l, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout)
	if res.Summary.Errors == 0 || l.upstream["connection"] == 0 {
		t.Fatalf("the upstream's death went unnoticed (%d client errors, %v failed upstream calls): the test did not test", res.Summary.Errors, l.upstream["connection"])
	}
	// The proxy's idle connections to the dead upstream are stale: the
	// first use of each fails and is retried on a fresh one, so nobody
	// notices the restart once it is done.
	sent, failed := okAfter(res.Records, restartAt+300*time.Millisecond)
	if sent == 0 || failed > 0 {
		t.Fatalf("%d of %d requests sent from 300ms after the restart failed", failed, sent)
	}
	t.Logf("kill %v..%v: %d sent, %d ok, errors by status %v, upstream errors %v",
		killAt, restartAt, res.Summary.Sent, res.Summary.OK, res.Summary.StatusCounts, l.upstream)
	expectNoLeak(t, before)
}

// The upstream is killed under 400 req/s and restarted 1.5 s later, within
// the hold (upstream_client.hold, 5 s by default): the outage costs the
// callers latency, not errors. Their batches wait while one probe at a time
// tries the upstream, and resume once it is back; every request sent is
// answered, and all but a handful (at most 0.5%: those whose batch was on
// the connection that the kill broke, past their retry) with 200. With
// RATEBATCH_TEST_HOLD=0 the same run shows the outage without the hold.
func TestReliabilityUpstreamRestartHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	hold := 5 * time.Second
	if v := os.Getenv("RATEBATCH_TEST_HOLD"); v != "" {
		var err error
		if hold, err = time.ParseDuration(v); err != nil {
			t.Fatalf("RATEBATCH_TEST_HOLD: %v", err)
		}
	}
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	addr := em.Addr()
	lt := servertest.Start(t, addr, nil, func(c *config.Config) { c.Upstreams.Timeout, c.Upstreams.Hold = 3*time.Second, hold })
	const killAt, down, d = 700 * time.Millisecond, 1500 * time.Millisecond, 3500 * time.Millisecond
	res, l, before := runOutage(t, lt, em, addr, loadgen.ConstantRate(400), killAt, down, d, 3)
	checkBooks(t, res.Summary, l, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout)
	if l.upstream["marked_down"] == 0 {
		t.Fatalf("the upstream was never marked down (upstream errors %v): the test did not test", l.upstream)
	}
	t.Logf("hold %v, down %v..%v: %d sent, %d ok, errors by status %v, p50 %.1f ms, p99 %.1f ms, max %.1f ms, upstream errors %v",
		hold, killAt, killAt+down, res.Summary.Sent, res.Summary.OK, res.Summary.StatusCounts,
		res.Summary.P50LatencyMs, res.Summary.P99LatencyMs, res.Summary.MaxLatencyMs, l.upstream)
	if hold > down && float64(res.Summary.Errors) > 0.005*float64(res.Summary.Sent) {
		t.Fatalf("%d of %d requests failed across an outage shorter than the hold", res.Summary.Errors, res.Summary.Sent)
	}
	expectNoLeak(t, before)
}

// runOutage warms the proxy up, then offers load at rate for d while the
// emulator serving at addr is killed at killAt and restarted down later. It
// returns the load's result, the proxy's ledger of the run and the
// footprint before it, for expectNoLeak.
func runOutage(t *testing.T, lt *servertest.Proxy, em *emulator.Server, addr string, rate loadgen.Rate, killAt, down, d time.Duration, seed uint64) (loadgen.Result, ledger, footprint) {
	t.Helper()
	offerLoad(t, lt.Base, loadgen.ConstantRate(100), 300*time.Millisecond, 1) // warm up
	before := takeFootprint()
	warm := settled(t, lt, "simple")
	done := make(chan loadgen.Result)
	go func() { done <- offerLoad(t, lt.Base, rate, d, seed) }()
	time.Sleep(killAt)
	em.Close()
	time.Sleep(down)
	if err := em.Start(addr, ""); err != nil {
		t.Fatalf("restarting the emulator: %v", err)
	}
	res := <-done
	return res, settled(t, lt, "simple").minus(warm), before
}

// minus is the ledger of what happened since base.
func (l ledger) minus(base ledger) ledger {
	out := ledger{accepted: l.accepted - base.accepted, ok: l.ok - base.ok, failed: l.failed - base.failed,
		rejected: map[string]float64{}, errors: map[int]float64{}, upstream: map[string]float64{},
		queued: l.queued, inFlight: l.inFlight}
	for k, v := range l.rejected {
		out.rejected[k] = v - base.rejected[k]
	}
	for k, v := range l.errors {
		out.errors[k] = v - base.errors[k]
	}
	for k, v := range l.upstream {
		out.upstream[k] = v - base.upstream[k]
	}
	return out
}

// A slow upstream (every batch ten times longer) serves the same load with
// larger batches: everything is still answered, correctly, with a bounded
// p99.
func TestReliabilityUpstreamSlow(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	type run struct {
		p99Ms, meanBatch float64
	}
	var runs []run
	for _, scale := range []float64{1, 10} {
		em := emulatortest.Start(t, emulator.Options{TimeScale: scale})
		lt := servertest.Start(t, em.Addr(), nil, nil)
		before := takeFootprint()
		// googlenet-p4 at x10: tau(8) = 35 ms, so 120 req/s keeps the
		// device about half busy with full batches.
		res := offerLoad(t, lt.Base, loadgen.ConstantRate(120), 1500*time.Millisecond, 3)
		l := settled(t, lt, "simple")
		checkBooks(t, res.Summary, l)
		var batches, rows int64
		for _, s := range lt.Dispatcher().Snapshots() {
			batches, rows = batches+s.BatchesSent, rows+s.RowsSent
		}
		r := run{p99Ms: res.Summary.P99LatencyMs, meanBatch: float64(rows) / float64(batches)}
		runs = append(runs, r)
		t.Logf("latency x%v: %d ok, p50 %.1f ms, p99 %.1f ms, mean batch %.2f", scale, res.Summary.OK, res.Summary.P50LatencyMs, r.p99Ms, r.meanBatch)
		lt.Stop()
		em.Close()
		expectNoLeak(t, before)
	}
	// tau(8) x10 is 35 ms; a request waits for the batch in service, for
	// its own batch to fill and run: about 100 ms (measured 114-131 ms at
	// p99 under -race), with room for a loaded CI machine.
	if runs[1].p99Ms > 250 {
		t.Errorf("p99 %.1f ms with a 10x slower upstream, want <= 250", runs[1].p99Ms)
	}
	if runs[1].meanBatch <= runs[0].meanBatch {
		t.Errorf("mean batch %.2f at x10 latency, %.2f at x1: the policy did not batch more when the upstream slowed", runs[1].meanBatch, runs[0].meanBatch)
	}
}

// An upstream that never answers: the proxy's upstream timeout fires and
// every caller of every stuck batch gets a 504 with a KServe error, soon
// after the timeout; once the upstream answers again so does the proxy.
func TestReliabilityUpstreamHangs(t *testing.T) {
	var hang atomic.Bool
	hang.Store(true)
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(emulator.BatchInfo) emulator.Fault {
		return emulator.Fault{Hang: hang.Load()}
	}})
	const timeout = 300 * time.Millisecond
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Upstreams.Timeout = timeout
		c.Policy.Name = "adhoc"
	})
	client := newClient()
	url := lt.Base + "/v2/models/simple/infer"
	postSimple(t, client, url, "warm", 0, 1) // the first connection, hung too
	before := takeFootprint()
	base := settled(t, lt, "simple")

	// 12 callers and one instance: a batch of up to 8 hangs, then the rest;
	// each waits at most two timeouts.
	const callers = 12
	var wg sync.WaitGroup
	var slowest atomic.Int64
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, r, took := postSimple(t, client, url, fmt.Sprint("h", i), i, 1)
			if code != http.StatusGatewayTimeout || !strings.Contains(r.Error, "in time") {
				t.Errorf("caller %d: %d %q, want 504 saying the upstream did not answer in time", i, code, r.Error)
			}
			for {
				s := slowest.Load()
				if int64(took) <= s || slowest.CompareAndSwap(s, int64(took)) {
					break
				}
			}
		}()
	}
	wg.Wait()
	if took := time.Duration(slowest.Load()); took > 2*time.Second {
		t.Errorf("slowest 504 after %v; the timeout is %v", took, timeout)
	}
	l := settled(t, lt, "simple").minus(base)
	l.balanced(t)
	if l.failed != callers || l.upstream["timeout"] < 2 {
		t.Fatalf("%v callers answered with an error and %v upstream timeouts, want %d and >= 2", l.failed, l.upstream["timeout"], callers)
	}

	hang.Store(false)
	for i := range 5 {
		if code, r, _ := postSimple(t, client, url, fmt.Sprint("r", i), i, 2); code != http.StatusOK || checkSimple(r, fmt.Sprint("r", i), i, 2) != nil {
			t.Fatalf("after the upstream recovered: %d %q", code, r.Error)
		}
	}
	t.Logf("12 callers of hung batches answered 504 within %v (upstream timeout %v)", time.Duration(slowest.Load()).Round(time.Millisecond), timeout)
	client.CloseIdleConnections()
	expectNoLeak(t, before)
}

// The upstream fails batches with a status, or drops the connection. A 500
// reaches every caller of the batch with the upstream's message; a 400 for
// a batch of several is retried caller by caller so only a bad request
// fails; a dropped connection is retried once, then answered 502.
func TestReliabilityUpstreamErrors(t *testing.T) {
	tests := []struct {
		name     string
		fault    func(emulator.BatchInfo) emulator.Fault
		status   int    // what every caller gets
		msg      string // in the error, when status is not 200
		upstream string // an upstream error kind that must have been counted
		allRetry bool   // every upstream error was followed by a retry that succeeded
	}{
		{"500 for every batch", func(emulator.BatchInfo) emulator.Fault {
			return emulator.Fault{Status: 500, Message: "model crashed"}
		}, 500, "model crashed", "status_5xx", false},
		{"400 for every batch", func(emulator.BatchInfo) emulator.Fault {
			return emulator.Fault{Status: 400, Message: "bad input"}
		}, 400, "bad input", "status_4xx", false},
		{"400 for batches of several", func(b emulator.BatchInfo) emulator.Fault {
			if b.Rows > 1 {
				return emulator.Fault{Status: 400, Message: "one of you is bad"}
			}
			return emulator.Fault{}
		}, 200, "", "bad_member_retry", true},
		{"connection reset on every batch", func(emulator.BatchInfo) emulator.Fault {
			return emulator.Fault{Drop: true}
		}, 502, "upstream unreachable", "connection", false},
		{"connection reset on every other attempt", func(b emulator.BatchInfo) emulator.Fault {
			return emulator.Fault{Drop: b.Seq%2 == 1}
		}, 200, "", "connection_retry", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(b emulator.BatchInfo) emulator.Fault {
				f := tt.fault(b)
				f.Delay = 5 * time.Millisecond // let batches form
				return f
			}})
			lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.Policy.Name = "adhoc" })
			client := newClient()
			before := takeFootprint()
			url := lt.Base + "/v2/models/simple/infer"
			const callers = 16
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					id := fmt.Sprint("c", i)
					code, r, _ := postSimple(t, client, url, id, 100*i, 1)
					switch {
					case code != tt.status:
						t.Errorf("%s: status %d %q, want %d", id, code, r.Error, tt.status)
					case code == 200:
						if err := checkSimple(r, id, 100*i, 1); err != nil {
							t.Errorf("%s: %v", id, err)
						}
					case !strings.Contains(r.Error, tt.msg):
						t.Errorf("%s: error %q does not carry %q", id, r.Error, tt.msg)
					}
				}()
			}
			wg.Wait()
			l := settled(t, lt, "simple")
			l.balanced(t)
			if l.accepted != callers || l.upstream[tt.upstream] == 0 {
				t.Fatalf("accepted %v (want %d); upstream errors %v lack %q", l.accepted, callers, l.upstream, tt.upstream)
			}
			if tt.status != 200 && l.errors[tt.status] != callers {
				t.Fatalf("front door wrote %v errors with status %d, want %d", l.errors[tt.status], tt.status, callers)
			}
			if tt.name == "connection reset on every batch" && l.upstream["connection_retry"] != l.upstream["connection"] {
				t.Fatalf("%v batches failed on the connection but %v were retried: want one retry each", l.upstream["connection"], l.upstream["connection_retry"])
			}
			client.CloseIdleConnections()
			expectNoLeak(t, before)
		})
	}
}

// Clients that disconnect while their request waits in the queue leave it
// (counted as client_gone, answered with an error); clients that disconnect
// while their batch runs cost the batch nothing (their answer is dropped
// when it arrives, counted ok). Either way nothing stays queued, nothing
// leaks, and the queue works afterwards.
func TestReliabilityClientsDisconnect(t *testing.T) {
	const callers = 6
	// The static policy with an hour's wait sends exactly batch rows at once.
	tests := []struct {
		name     string
		batch    int
		delay    time.Duration // per batch at the upstream
		leaveAt  time.Duration // the client hangs up this long after sending
		wantGone bool          // left from the queue (else: during the batch)
	}{
		{"while queued", 8, 0, 100 * time.Millisecond, true},                                     // 6 < 8: they wait
		{"while the batch runs", callers, 400 * time.Millisecond, 150 * time.Millisecond, false}, // one batch of 400 ms
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(emulator.BatchInfo) emulator.Fault {
				return emulator.Fault{Delay: tt.delay}
			}})
			lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
				c.Policy.Name = "static"
				c.Policy.Options = c.Policy.Options.With(policy.StaticOptions{Batch: tt.batch, HoldOptions: policy.HoldOptions{MaxWait: time.Hour}})
			})
			before := takeFootprint()
			var wg sync.WaitGroup
			for i := range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Half hang up politely (FIN), half with a reset (RST).
					if err := hangUp(lt.Base, simpleBody(fmt.Sprint(i), i, 1), tt.leaveAt, i%2 == 0); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			l := settled(t, lt, "simple")
			l.balanced(t)
			gone := l.rejected["client_gone"]
			switch {
			case l.accepted != callers:
				t.Fatalf("accepted %v, want %d", l.accepted, callers)
			case tt.wantGone && (gone != callers || l.failed != callers):
				t.Fatalf("%v left the queue (%v answered with an error), want %d", gone, l.failed, callers)
			case !tt.wantGone && (gone != 0 || l.ok != callers):
				t.Fatalf("%v left the queue, %v answered ok; want 0 and %d (their batch ran)", gone, l.ok, callers)
			}
			// The queue still works: a full batch goes.
			client := newClient()
			var ok atomic.Int32
			for i := range tt.batch {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if code, r, _ := postSimple(t, client, lt.Base+"/v2/models/simple/infer", fmt.Sprint("after", i), i, 1); code == 200 && checkSimple(r, fmt.Sprint("after", i), i, 1) == nil {
						ok.Add(1)
					}
				}()
			}
			wg.Wait()
			if int(ok.Load()) != tt.batch {
				t.Fatalf("%d of %d requests after the hang-ups succeeded", ok.Load(), tt.batch)
			}
			client.CloseIdleConnections()
			expectNoLeak(t, before)
		})
	}
}

// hangUp sends an inference request on a raw connection and closes it after
// wait without reading the answer; with reset, the close sends an RST.
func hangUp(base string, body []byte, wait time.Duration, reset bool) error {
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return err
	}
	fmt.Fprintf(conn, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	time.Sleep(wait)
	if reset {
		conn.(*net.TCPConn).SetLinger(0)
	}
	return conn.Close()
}

// Many clients hang up at random moments while others keep the queue busy.
// Each leaver's request carries a parameter of its own, so it is alone in
// its batch key and the queue holds many keys: a decision pass then takes a
// while under the queue's lock, and a leaver often gives up during one. The
// queue's row count, which admission checks against limits.queue_rows, must
// come back to zero, or the proxy slowly refuses everything.
func TestReliabilityHangUpsUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		// Partial batches wait up to 30 ms: leavers mostly leave from the queue.
		c.Policy.Name = "static"
		c.Policy.Options = c.Policy.Options.With(policy.StaticOptions{Batch: 8, HoldOptions: policy.HoldOptions{MaxWait: 30 * time.Millisecond}})
	})
	before := takeFootprint()
	done := make(chan loadgen.Result)
	go func() { done <- offerLoad(t, lt.Base, loadgen.ConstantRate(200), 2*time.Second, 4) }()
	var wg sync.WaitGroup
	const leavers = 600
	for i := range leavers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 3 * time.Millisecond)
			id := fmt.Sprint("leaver", i)
			body := bytes.Replace(simpleBody(id, i, 1+i%3), []byte(`{"id":"`+id+`",`),
				fmt.Appendf(nil, `{"id":%q,"parameters":{"leaver":%d},`, id, i), 1)
			if err := hangUp(lt.Base, body, time.Duration(i%11)*time.Millisecond, i%2 == 0); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	res := <-done
	l := settled(t, lt, "simple")
	l.balanced(t)
	if s := res.Summary; s.OK != s.Sent {
		t.Fatalf("load alongside the hang-ups: %d of %d ok (%v)", s.OK, s.Sent, s.ErrorsByKind)
	}
	t.Logf("%d hang-ups beside %d requests (%d ok): %v left the queue, %v answered ok, %v accepted",
		leavers, res.Summary.Sent, res.Summary.OK, l.rejected["client_gone"], l.ok, l.accepted)
	expectNoLeak(t, before)
}

// stepRate is a constant rate with a burst: rate times factor in [from, to).
type stepRate struct {
	rate, factor float64
	from, to     time.Duration
}

func (s stepRate) RateAt(t time.Duration) float64 {
	if t >= s.from && t < s.to {
		return s.rate * s.factor
	}
	return s.rate
}

func (s stepRate) MaxRate() float64 { return s.rate * max(s.factor, 1) }

// A burst of fifty times the normal rate, five times what the upstream can
// serve: the queue never holds more than limits.queue_rows, the excess gets
// 503 at once (TestServeErrors checks their Retry-After), memory stays bounded, and a second after the
// burst the proxy serves as before.
func TestReliabilityBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	// 40 ms per batch of up to 8: about 195 req/s at most.
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(emulator.BatchInfo) emulator.Fault {
		return emulator.Fault{Delay: 40 * time.Millisecond}
	}})
	const queueRows = 64
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) { c.Limits.QueueRows = queueRows })
	offerLoad(t, lt.Base, loadgen.ConstantRate(20), 300*time.Millisecond, 5) // warm up
	before := takeFootprint()
	base := settled(t, lt, "simple")

	// Sample the queue and the heap while the load runs.
	var maxQueued atomic.Int64
	var maxHeap atomic.Uint64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for _, s := range lt.Dispatcher().Snapshots() {
				if int64(s.QueuedRows) > maxQueued.Load() {
					maxQueued.Store(int64(s.QueuedRows))
				}
			}
			if n%20 == 0 {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				maxHeap.Store(max(maxHeap.Load(), ms.HeapAlloc))
			}
		}
	})
	const burstFrom, burstTo, d = time.Second, 2 * time.Second, 4 * time.Second
	res := offerLoad(t, lt.Base, stepRate{rate: 20, factor: 50, from: burstFrom, to: burstTo}, d, 6)
	close(stop)
	sampler.Wait()
	l := settled(t, lt, "simple").minus(base)
	checkBooks(t, res.Summary, l, http.StatusServiceUnavailable)

	// Refusals are judged against the calls served in the same burst, not
	// against a clock: on a loaded CI host every client-side latency
	// stretches, but a refusal that waited in the queue would take as long
	// as the served calls do.
	var refused, served []time.Duration
	for _, r := range res.Records {
		switch {
		case r.Status == http.StatusServiceUnavailable:
			refused = append(refused, r.Latency)
		case r.Status == http.StatusOK && r.Start >= burstFrom && r.Start < burstTo:
			served = append(served, r.Latency)
		}
	}
	slices.Sort(refused)
	slices.Sort(served)
	p50Refused, p90Refused, p99Refused := stats.Percentile(refused, 50), stats.Percentile(refused, 90), stats.Percentile(refused, 99)
	p50Served := stats.Percentile(served, 50)
	sent, failed := okAfter(res.Records, burstTo+time.Second)
	heapGrowth := int64(maxHeap.Load()) - int64(before.heap)
	t.Logf("burst: %d sent, %d ok (median %v in the burst), %d refused (p50 %v, p90 %v, p99 %v), max queue %d rows, heap +%.1f MiB at most; after: %d sent, %d failed",
		res.Summary.Sent, res.Summary.OK, p50Served, len(refused), p50Refused, p90Refused, p99Refused, maxQueued.Load(), float64(heapGrowth)/(1<<20), sent, failed)
	switch {
	case len(refused) < 100 || l.rejected["queue_full"] != float64(len(refused)):
		t.Fatalf("%d requests refused, %v queue_full rejections: the burst did not overload the queue as it should", len(refused), l.rejected["queue_full"])
	case maxQueued.Load() > queueRows:
		t.Fatalf("the queue held %d rows, above limits.queue_rows %d", maxQueued.Load(), queueRows)
	case len(served) < 20 || p50Refused > p50Served/2:
		// A refusal that waited in the queue would take as long as the
		// calls served: the median of the 503s is held to half theirs.
		// The p90 was held to a third and measured 0.05-0.13 under -race
		// beside lab/sim, until a fresh-clone CI read 0.56 (464 ms
		// against 823): on a starved host the tail of the refusals is the
		// clients' own scheduling and dials, not the queue.
		t.Fatalf("median of the 503s is %v (p90 %v) against a median of %v for the %d calls served in the burst: refusals must not wait in the queue", p50Refused, p90Refused, p50Served, len(served))
	case heapGrowth > 64<<20:
		t.Fatalf("live heap grew by %d MiB during the burst", heapGrowth>>20)
	case sent == 0 || failed > 0:
		t.Fatalf("a second after the burst %d of %d requests failed", failed, sent)
	}
	expectNoLeak(t, before)
}
