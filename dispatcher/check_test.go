package dispatcher

import (
	"context"
	"log/slog"
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
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/policy"
)

// verdictWithin is the bound the active check's verdict is promised in
// (docs/RELIABILITY.md): two intervals at the default.
const verdictWithin = 2 * DefaultCheckInterval

// healthTriton is a stand-in Triton's health endpoints: each path answers
// the status set for it (200 when none is), or never while hang is set.
type healthTriton struct {
	srv    *httptest.Server
	addr   string
	status sync.Map // path -> int
	hang   atomic.Bool
}

func newHealthTriton(t *testing.T) *healthTriton {
	h := &healthTriton{}
	h.srv = httptest.NewServer(h.handler())
	h.addr = h.srv.Listener.Addr().String()
	t.Cleanup(func() { h.srv.Close() })
	return h
}

func (h *healthTriton) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.hang.Load() {
			<-r.Context().Done()
			return
		}
		if s, ok := h.status.Load(r.URL.Path); ok && s.(int) != http.StatusOK {
			w.WriteHeader(s.(int))
			w.Write([]byte(`{"error":"Request for unknown model: 'simple' has no available versions"}`))
		}
	})
}

// kill closes the server: its port refuses connections.
func (h *healthTriton) kill() { h.srv.Close() }

// revive serves again on the same port.
func (h *healthTriton) revive(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", h.addr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	h.srv = httptest.NewUnstartedServer(h.handler())
	h.srv.Listener.Close()
	h.srv.Listener = ln
	h.srv.Start()
}

// newCheckedDispatcher batches models against h with the active check at
// its default interval, logging to the returned buffer.
func newCheckedDispatcher(t *testing.T, h *healthTriton, models ...string) (*Dispatcher, *syncBuffer) {
	t.Helper()
	up, err := NewHTTPUpstream("http://"+h.addr, 8, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	d := New(Options{Upstream: up, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Check: HealthCheck{Checker: triton.NewClient("http://"+h.addr, nil), Interval: DefaultCheckInterval}})
	for _, m := range models {
		if err := d.SetModel(ModelSpec{Name: m, MaxBatch: 8, QueueRows: 64, Planner: newPlanner(policy.Fill{Policy: "test", Batch: 1})}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		d.Drain(ctx)
	})
	testpoll.Until(t, "the first check", func() bool { return d.Upstream().Check.Last != nil })
	if why := d.Unready(); why != "" {
		t.Fatalf("unready %q with a healthy upstream", why)
	}
	return d, logs
}

func checkMetrics(t *testing.T, d *Dispatcher, want string, names ...string) {
	t.Helper()
	if err := testutil.CollectAndCompare(d.Collector(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// The upstream killed with no client traffic: the check finds it refusing
// connections within 2 s (not ready, upstream_down 1, a WARN), and ready
// again within 2 s of its return (an INFO), still with no client call.
func TestCheckSeesTheUpstreamDieWithoutTraffic(t *testing.T) {
	h := newHealthTriton(t)
	d, logs := newCheckedDispatcher(t, h, "simple")
	h.kill()
	took := testpoll.Within(t, "not ready, the refused connection named", verdictWithin, func() bool {
		return strings.Contains(d.Unready(), "refusing connections")
	})
	if why := d.Unready(); strings.Contains(why, h.addr) {
		t.Errorf("unready %q names the upstream's address: clients read it on the data port", why)
	}
	checkMetrics(t, d, `
# HELP ratebatch_upstream_down 1 while the upstream refuses connections (requests are held, the proxy is not ready), else 0.
# TYPE ratebatch_upstream_down gauge
ratebatch_upstream_down 1
# HELP ratebatch_upstream_ready 1 if the upstream passed its last active health check (/v2/health/ready answered 200), else 0; absent with the check off or before its first.
# TYPE ratebatch_upstream_ready gauge
ratebatch_upstream_ready 0
`, "ratebatch_upstream_down", "ratebatch_upstream_ready")
	logged(t, logs, "level=WARN msg=\"upstream refusing connections")
	h.revive(t)
	back := testpoll.Within(t, "ready after the upstream's return", verdictWithin, func() bool { return d.Unready() == "" })
	logged(t, logs, `level=INFO msg="upstream answering again"`)
	t.Logf("not ready %v after the kill, ready %v after the return", took.Round(time.Millisecond), back.Round(time.Millisecond))
}

// The upstream answering its readiness check with anything but 200, or
// not at all: not ready with the cause, a WARN; ready again once it
// passes, an INFO.
func TestCheckFollowsTheUpstreamsReadiness(t *testing.T) {
	for _, tc := range []struct {
		name, why string
		fault     func(*healthTriton)
		heal      func(*healthTriton)
	}{
		{"not ready", "its readiness check answers 400",
			func(h *healthTriton) { h.status.Store("/v2/health/ready", http.StatusBadRequest) },
			func(h *healthTriton) { h.status.Delete("/v2/health/ready") }},
		{"hung", "no answer to its readiness check within 1s",
			func(h *healthTriton) { h.hang.Store(true) },
			func(h *healthTriton) { h.hang.Store(false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHealthTriton(t)
			d, logs := newCheckedDispatcher(t, h, "simple")
			tc.fault(h)
			testpoll.Within(t, "not ready: "+tc.why, verdictWithin+time.Second/2, func() bool {
				return strings.Contains(d.Unready(), "upstream not ready: "+tc.why)
			})
			if d.Upstream().Down {
				t.Error("an upstream that accepts connections marked down: its calls would be held")
			}
			if why := d.Unready(); strings.Contains(why, h.addr) {
				t.Errorf("unready %q names the upstream's address: clients read it on the data port", why)
			}
			logged(t, logs, "level=WARN msg=\"upstream not ready")
			tc.heal(h)
			testpoll.Within(t, "ready once it passes its check", verdictWithin, func() bool { return d.Unready() == "" })
			logged(t, logs, `level=INFO msg="upstream ready again"`)
		})
	}
}

// A model the upstream unloads (its ready endpoint answers 400): the model
// not ready in the metrics and /status, a WARN; the proxy stays ready while
// another batched model is, and is not when none is.
func TestCheckSeesAModelUnloaded(t *testing.T) {
	h := newHealthTriton(t)
	d, logs := newCheckedDispatcher(t, h, "simple", "other")
	h.status.Store("/v2/models/simple/ready", http.StatusBadRequest)
	testpoll.Within(t, "simple not ready", verdictWithin, func() bool {
		return d.Upstream().Check.ModelsNotReady["simple"] != ""
	})
	if why := d.Unready(); why != "" {
		t.Errorf("unready %q with another batched model ready", why)
	}
	checkMetrics(t, d, `
# HELP ratebatch_upstream_model_ready 1 if the upstream called the batched model ready at the last active health check (/v2/models/M/ready answered 200), else 0; absent with the check off.
# TYPE ratebatch_upstream_model_ready gauge
ratebatch_upstream_model_ready{model="other"} 1
ratebatch_upstream_model_ready{model="simple"} 0
`, "ratebatch_upstream_model_ready")
	logged(t, logs, `level=WARN msg="model not ready upstream`)
	h.status.Store("/v2/models/other/ready", http.StatusNotFound)
	testpoll.Within(t, "not ready with no batched model ready", verdictWithin, func() bool {
		return strings.HasPrefix(d.Unready(), "no batched model is ready upstream: other: not ready upstream (404")
	})
	h.status.Delete("/v2/models/simple/ready")
	testpoll.Within(t, "ready with simple loaded again", verdictWithin, func() bool { return d.Unready() == "" })
	logged(t, logs, `level=INFO msg="model ready upstream again" model=simple`)
}

// With the check off (interval 0) there is no check state: no series,
// nothing in /status.
func TestCheckOff(t *testing.T) {
	d := New(Options{Upstream: &fakeUpstream{}, Check: HealthCheck{Checker: triton.NewClient("http://127.0.0.1:1", nil)}})
	defer d.Drain(context.Background())
	if s := d.Upstream().Check; s != nil {
		t.Errorf("check status %+v with the check off", s)
	}
	if n := testutil.CollectAndCount(d.Collector(), "ratebatch_upstream_ready", "ratebatch_upstream_model_ready"); n != 0 {
		t.Errorf("%d check series with the check off", n)
	}
}

// logged waits for a log line containing s: the check logs a change just
// after it publishes it.
func logged(t *testing.T, logs *syncBuffer, s string) {
	t.Helper()
	testpoll.Until(t, "a log line with "+s, func() bool { return strings.Contains(logs.String(), s) })
}
