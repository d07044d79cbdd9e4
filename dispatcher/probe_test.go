package dispatcher

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/policy"
)

// checkProbeMetrics compares what the dispatcher's collector exports of
// the probes and of readiness (through a pedantic registry: every series
// collected is described).
func checkProbeMetrics(t *testing.T, d *Dispatcher, lastOK, unready int) {
	t.Helper()
	want := fmt.Sprintf(`
# HELP ratebatch_probe_last_ok 1 if the last active probe found the model (the upstream) answering, else 0.
# TYPE ratebatch_probe_last_ok gauge
ratebatch_probe_last_ok{model="simple"} %d
# HELP ratebatch_upstream_unready 1 while the upstream's state takes the proxy out of service (/readyz 503): it refuses connections, fails its health check, or every batched model is failing or not ready.
# TYPE ratebatch_upstream_unready gauge
ratebatch_upstream_unready %d
`, lastOK, unready)
	if err := testutil.CollectAndCompare(d.Collector(), strings.NewReader(want), "ratebatch_probe_last_ok", "ratebatch_upstream_unready"); err != nil {
		t.Error(err)
	}
}

// The pacing of the active probes: the first within half a second, the
// next ones growing to the probe interval and never past it.
func TestProbePause(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		n        int
		lo, hi   time.Duration
	}{
		{time.Second, 1, 250 * time.Millisecond, 500 * time.Millisecond},
		{time.Second, 2, 500 * time.Millisecond, time.Second},
		{time.Second, 9, 500 * time.Millisecond, time.Second},
		{200 * time.Millisecond, 1, 100 * time.Millisecond, 200 * time.Millisecond},
		{200 * time.Millisecond, 5, 100 * time.Millisecond, 200 * time.Millisecond},
		{0, 3, minProbeInterval / 2, minProbeInterval},
		{10 * time.Second, 20, 5 * time.Second, 10 * time.Second},
	} {
		for range 50 {
			if p := probePause(tc.interval, tc.n); p < tc.lo || p > tc.hi {
				t.Fatalf("probe %d with interval %v: pause %v, want within [%v, %v]", tc.n, tc.interval, p, tc.lo, tc.hi)
			}
		}
	}
}

// standIn is a stand-in Triton over HTTP: it answers every inference with
// mode's behaviour and counts the requests in progress at once.
type standIn struct {
	*httptest.Server
	mode     atomic.Int32 // standOK, stand500, standHang
	requests atomic.Int32
	probes   atomic.Int32 // requests carrying ProbeID
	running  atomic.Int32
	peak     atomic.Int32
	delay    atomic.Int64 // nanoseconds each answer takes
}

const (
	standOK = iota
	stand500
	standHang
)

func newStandIn(t *testing.T) *standIn {
	s := &standIn{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.requests.Add(1)
		if strings.Contains(string(body), ProbeID) {
			s.probes.Add(1)
		}
		n := s.running.Add(1)
		defer s.running.Add(-1)
		for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
		}
		time.Sleep(time.Duration(s.delay.Load()))
		switch s.mode.Load() {
		case stand500:
			w.WriteHeader(http.StatusInternalServerError)
			w.Write(kserve.AppendErrorBody(nil, "CUDA error: device lost"))
		case standHang:
			<-r.Context().Done() // until the client gives up: a stuck GPU
		default:
			w.Write([]byte(`{"model_name":"simple","outputs":[]}`))
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// probeWire is a probe for the test model simple.
func probeWire(t *testing.T) Wire {
	t.Helper()
	c := call(t, 0, 1)
	c.Req.ID = ProbeID
	body, hl, err := kserve.AppendRequest(nil, c.Req, true)
	if err != nil {
		t.Fatal(err)
	}
	return Wire{Body: body, HeaderLen: hl}
}

// newProbeDispatcher serves simple (with a probe) through the HTTP client
// to the stand-in, with the default probe interval.
func newProbeDispatcher(t *testing.T, url string, o Outlier, hold time.Duration) *Dispatcher {
	t.Helper()
	up, err := NewHTTPUpstream(url, 8, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	d := New(Options{Upstream: up, Outlier: o, Hold: hold})
	if err := d.SetModel(ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: newPlanner(policy.Fill{Policy: "test", Batch: 1}),
		Probe: probeWire(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Drain(ctx)
	})
	return d
}

// failModel sends calls that the stand-in answers 500 until the model is
// failing: Triton's 500 may be one request's, so after the suspect
// batches the model's probe, answered 500 too, marks it (verify).
func failModel(t *testing.T, d *Dispatcher) {
	t.Helper()
	i := 0
	testpoll.Until(t, "the model failing after server errors", func() bool {
		if f, _ := d.Failing("simple"); f {
			return true
		}
		d.Submit(context.Background(), "simple", call(t, int32(i), 1))
		i++
		return false
	})
}

// backWithin polls, with no client traffic, until the model and the
// upstream are healthy and ready, and fails past bound.
func backWithin(t *testing.T, d *Dispatcher, from time.Time, bound time.Duration) time.Duration {
	t.Helper()
	for {
		f, _ := d.Failing("simple")
		if !f && d.Unready() == "" {
			return time.Since(from)
		}
		if time.Since(from) > bound {
			t.Fatalf("not back %v after the upstream healed: failing %v, unready %q", bound, f, d.Unready())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An upstream answering 500 to every inference, then healing: with no
// client traffic at all, the proxy's own probes find it within 2 s.
func TestProbeFindsTheHealedUpstream(t *testing.T) {
	s := newStandIn(t)
	s.mode.Store(stand500)
	d := newProbeDispatcher(t, s.URL, Outlier{ConsecutiveErrors: 3}, 0)
	failModel(t, d)
	if why := d.Unready(); !strings.Contains(why, "failing") {
		t.Fatalf("every model failing, unready %q", why)
	}
	// Probes go, and fail, while it is broken.
	testpoll.Until(t, "the condition", func() bool { return s.probes.Load() >= 2 })
	if f, _ := d.Failing("simple"); !f {
		t.Fatal("a probe answered 500 made the model healthy")
	}
	r, ok := d.probes.lastOf("simple")
	if !ok || r.OK || r.Outcome != "error" || !strings.Contains(r.Detail, "device lost") {
		t.Fatalf("last probe %+v, want a failed one naming the upstream's error", r)
	}
	if why := d.Unready(); !strings.Contains(why, "device lost") {
		t.Fatalf("unready %q does not say what the last probe found", why)
	}
	checkProbeMetrics(t, d, 0, 1)
	s.mode.Store(standOK)
	took := backWithin(t, d, time.Now(), 2*time.Second)
	if r, _ := d.probes.lastOf("simple"); !r.OK {
		t.Fatalf("back, but the last probe %+v did not succeed", r)
	}
	if snap := d.Snapshots()[0]; snap.LastProbe == nil || !snap.LastProbe.OK {
		t.Fatalf("snapshot's last probe %+v", snap.LastProbe)
	}
	checkProbeMetrics(t, d, 1, 0)
	t.Logf("back %v after healing, %d probes", took.Round(time.Millisecond), s.probes.Load())
}

// A hung upstream: each probe gives up at its own timeout and the next
// one goes, so once the upstream answers again the model is back within
// 2 s, though the probe out when it healed never gets its answer. One
// probe at a time throughout.
func TestProbeRetriesAHungUpstream(t *testing.T) {
	s := newStandIn(t)
	s.mode.Store(stand500)
	d := newProbeDispatcher(t, s.URL, Outlier{ConsecutiveErrors: 3}, 0)
	failModel(t, d)
	s.mode.Store(standHang)
	s.peak.Store(0)
	start := s.probes.Load()
	testpoll.Until(t, "the condition", func() bool {
		r, _ := d.probes.lastOf("simple")
		return r.Outcome == "timeout" && s.probes.Load() >= start+2 && s.running.Load() == 1
	})
	// A probe is hung right now: heal the upstream; that one stays hung.
	s.mode.Store(standOK)
	took := backWithin(t, d, time.Now(), 2*time.Second)
	if p := s.peak.Load(); p != 1 {
		t.Fatalf("%d requests at once at the hung upstream, want one probe at a time", p)
	}
	t.Logf("back %v after healing, %d probes", took.Round(time.Millisecond), s.probes.Load())
}

// Clients keep calling the failing model: never two requests at once
// reach it, active probe or client batch; and while a client's batch holds
// the probe role, no active probe goes.
func TestProbeNeverBesideAClientProbe(t *testing.T) {
	s := newStandIn(t)
	s.mode.Store(stand500)
	s.delay.Store(int64(30 * time.Millisecond))
	d := newProbeDispatcher(t, s.URL, Outlier{ConsecutiveErrors: 2, ProbeInterval: 100 * time.Millisecond}, 0)
	failModel(t, d)
	s.peak.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				d.Submit(context.Background(), "simple", call(t, int32(100*w+i), 1))
				time.Sleep(time.Millisecond)
			}
		})
	}
	wg.Wait()
	if p := s.peak.Load(); p != 1 {
		t.Fatalf("%d requests at once at the failing upstream, want 1", p)
	}
	if s.probes.Load() == 0 {
		t.Fatal("no active probe beside the clients' calls")
	}

	// A client's batch holds the probe role (its call in flight): the
	// active probes wait for it, however long.
	q := d.models["simple"]
	testpoll.Until(t, "the condition", func() bool { q.mu.Lock(); defer q.mu.Unlock(); return !q.health.probing })
	if probe, err := q.startBatch(); !probe || err != nil {
		t.Fatalf("a client batch could not take the probe role: %v %v", probe, err)
	}
	held := s.probes.Load()
	time.Sleep(300 * time.Millisecond) // three probe intervals
	if n := s.probes.Load() - held; n != 0 {
		t.Fatalf("%d active probes while a client batch probed", n)
	}
	q.endBatch(true, []Result{{Err: &kserve.Error{Status: http.StatusServiceUnavailable, Msg: "neutral"}}})
	testpoll.Until(t, "the condition", func() bool { return s.probes.Load() > held })
}

// An upstream refusing connections, with no client waiting on it: the
// proxy probes it and is ready again within 2 s of its return, and says
// meanwhile why it is not.
func TestProbeFindsTheUpstreamBack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connections are refused
	d := newProbeDispatcher(t, "http://"+addr, Outlier{ConsecutiveErrors: 3}, 0)
	if r := d.Submit(context.Background(), "simple", call(t, 1, 1)); status(r.Err) != http.StatusServiceUnavailable {
		t.Fatalf("upstream down, no hold: %v, want 503", r.Err)
	}
	if why := d.Unready(); !strings.Contains(why, "refusing connections") || !strings.Contains(why, "refused") {
		t.Fatalf("unready %q, want the refused connection named", why)
	}
	testpoll.Until(t, "the condition", func() bool { r, ok := d.probes.lastOf(""); return ok && r.Outcome == "connection" })
	s := &standIn{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.requests.Add(1)
		w.Write([]byte(`{"model_name":"simple","outputs":[]}`))
	}))
	if s.Listener, err = net.Listen("tcp", addr); err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	s.Start()
	defer s.Close()
	took := backWithin(t, d, time.Now(), 2*time.Second)
	if u := d.Upstream(); u.Down || u.LastProbe == nil {
		t.Fatalf("upstream state %+v after its return", u)
	}
	t.Logf("ready %v after the upstream came back", took.Round(time.Millisecond))
}
