package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// status of a GET on url, or 0 on a transport error.
func getStatus(c *http.Client, url string) int {
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// readiness is what an orchestrator sees: the admin /readyz, the data
// port's /v2/health/ready and the model's /v2/models/simple/ready.
func readiness(c *http.Client, lt *servertest.Proxy) [3]int {
	return [3]int{getStatus(c, lt.Admin+"/readyz"), getStatus(c, lt.Base+"/v2/health/ready"), getStatus(c, lt.Base+"/v2/models/simple/ready")}
}

// onlySimple batches the emulator's model simple alone, passing the
// others through: when simple fails, every batched model does, and the
// proxy as a whole is not ready.
func onlySimple(c *config.Config, em *emulator.Server) {
	c.Models = map[string]config.Model{}
	for _, m := range em.Models() {
		if m != "simple" {
			c.Models[m] = config.Model{Policy: config.Passthrough}
		}
	}
}

var (
	allReady    = [3]int{200, 200, 200}
	allNotReady = [3]int{503, 400, 400}
)

// An upstream that answers 500 to every inference (a crashed backend):
// after upstream_client.failing_after batches, and the probe inference
// the proxy then sends failing too, the model is failing, every
// readiness endpoint says not ready, callers get a prompt 503 instead of
// the GPU's 500, and when the upstream heals a probe finds it and all is
// ready again. Accepted = answered throughout.
func TestReliabilityUpstreamFailingAndRecovering(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(emulator.BatchInfo) emulator.Fault {
		if broken.Load() {
			return emulator.Fault{Status: 500, Message: "CUDA error: device lost"}
		}
		return emulator.Fault{}
	}})
	const probe = 200 * time.Millisecond
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Policy.Name = "adhoc"
		c.Upstreams.FailingAfter = 3
		c.Upstreams.ProbeInterval = probe
		onlySimple(c, em)
	})
	client := newClient()
	url := lt.Base + "/v2/models/simple/infer"
	// Ready once discovery has read the models (the model may be known a
	// moment before).
	testpoll.Until(t, "the proxy is ready", func() bool { return readiness(client, lt) == allReady })
	for i := range 3 {
		if code, r, _ := postSimple(t, client, url, fmt.Sprint("e", i), i, 1); code != 500 || !strings.Contains(r.Error, "device lost") {
			t.Fatalf("call %d: %d %q, want the upstream's 500", i, code, r.Error)
		}
	}
	// Triton's 500 may be one request's: the probe the 3rd sends decides.
	testpoll.Until(t, "not ready after 3 server errors and a failed probe", func() bool { return readiness(client, lt) == allNotReady })
	var slowest time.Duration
	for i := range 20 {
		code, r, took := postSimple(t, client, url, fmt.Sprint("f", i), i, 1)
		if code != 503 && !(code == 500 && strings.Contains(r.Error, "device lost")) { // a probe may go
			t.Fatalf("call while failing: %d %q, want 503 (or a probe's 500)", code, r.Error)
		}
		slowest = max(slowest, took)
	}
	broken.Store(false)
	healed := time.Now()
	testpoll.Until(t, "a probe finds the upstream healed", func() bool {
		code, _, _ := postSimple(t, client, url, "probe", 1, 1)
		return code == 200
	})
	recovered := time.Since(healed)
	if r := readiness(client, lt); r != allReady {
		t.Fatalf("readiness after recovery %v, want %v", r, allReady)
	}
	for i := range 5 {
		if code, r, _ := postSimple(t, client, url, fmt.Sprint("r", i), i, 2); code != 200 || checkSimple(r, fmt.Sprint("r", i), i, 2) != nil {
			t.Fatalf("after recovery: %d %q", code, r.Error)
		}
	}
	l := settled(t, lt, "simple")
	l.balanced(t)
	if l.rejected["model_failing"] == 0 {
		t.Fatalf("no model_failing refusal counted: %v", l.rejected)
	}
	t.Logf("not ready at the 3rd error; slowest of 20 answers while failing %v; a request succeeded %v after the upstream healed (probe interval %v)",
		slowest.Round(time.Millisecond), recovered.Round(time.Millisecond), probe)
}

// An upstream whose batches hang (a stuck GPU): a batch running past
// upstream_client.hung_min (and hung_factor x tau(b)) marks the model
// failing, so the callers queued behind it get 503 within about hung_min
// instead of waiting for the upstream timeout, and readiness turns.
func TestReliabilityUpstreamHungBatch(t *testing.T) {
	var hang atomic.Bool
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(emulator.BatchInfo) emulator.Fault {
		return emulator.Fault{Hang: hang.Load()}
	}})
	const (
		timeout = 5 * time.Second
		hungMin = 300 * time.Millisecond
	)
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Policy.Name = "adhoc"
		onlySimple(c, em)
		c.Upstreams.Timeout = timeout
		c.Upstreams.HungMin = hungMin
		c.Upstreams.ProbeInterval = 100 * time.Millisecond
	})
	client := newClient()
	url := lt.Base + "/v2/models/simple/infer"
	if code, _, _ := postSimple(t, client, url, "warm", 0, 1); code != 200 { // arms hung detection
		t.Fatalf("warm-up: %d", code)
	}
	hang.Store(true)
	first := make(chan int, 1)
	go func() { code, _, _ := postSimple(t, client, url, "hung", 0, 1); first <- code }()
	testpoll.Until(t, "the first batch is in flight", func() bool { return lt.Dispatcher().Snapshots()[0].InFlight == 1 })
	const callers = 8
	var wg sync.WaitGroup
	var slowest atomic.Int64
	codes := make([]int, callers)
	for i := range callers {
		wg.Go(func() {
			code, _, took := postSimple(t, client, url, fmt.Sprint("q", i), i, 1)
			codes[i] = code
			for s := slowest.Load(); int64(took) > s && !slowest.CompareAndSwap(s, int64(took)); s = slowest.Load() {
			}
		})
	}
	wg.Wait()
	for i, code := range codes {
		if code != 503 && code != 504 { // in flight beside the first (instances > 1): the timeout's 504
			t.Fatalf("caller %d behind the hung batch: %d, want 503", i, code)
		}
	}
	if s := time.Duration(slowest.Load()); s >= timeout {
		t.Fatalf("callers behind the hung batch waited %v, the upstream timeout", s)
	}
	if r := readiness(client, lt); r != allNotReady {
		t.Fatalf("readiness with a hung batch %v, want %v", r, allNotReady)
	}
	hang.Store(false)
	if code := <-first; code != 504 {
		t.Fatalf("the hung batch's caller: %d, want 504 at the upstream timeout", code)
	}
	testpoll.Until(t, "a probe finds the upstream answering", func() bool {
		code, _, _ := postSimple(t, client, url, "probe", 1, 1)
		return code == 200
	})
	if r := readiness(client, lt); r != allReady {
		t.Fatalf("readiness after recovery %v, want %v", r, allReady)
	}
	settled(t, lt, "simple").balanced(t)
	t.Logf("%d callers behind a hung batch answered within %v (hung_min %v, upstream timeout %v)", callers,
		time.Duration(slowest.Load()).Round(time.Millisecond), hungMin, timeout)
}
