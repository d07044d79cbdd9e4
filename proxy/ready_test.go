package proxy_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/proxy"
)

type fakeHealth struct{ model, all atomic.Bool }

func (h *fakeHealth) Failing(model string) (bool, string) {
	return model == "simple" && h.model.Load(), "5 batches in a row failed"
}
func (h *fakeHealth) Unready() string {
	if h.all.Load() {
		return "every batched model is failing upstream"
	}
	return ""
}

// The readiness endpoints say not ready (400, as Triton) while the outlier
// detector finds the model or the upstream failing, and pass through to
// Triton otherwise.
func TestReadinessFollowsTheOutlierDetector(t *testing.T) {
	h := &fakeHealth{}
	base := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}, Health: h}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: fuzzBodyLimit, Forward: fakeUpstream{}, ReadTimeout: 5 * time.Second})
	get := func(path string) wireAnswer {
		return exchange(t, base, []byte("GET "+path+" HTTP/1.1\r\nHost: p\r\n\r\n"), false)
	}
	passed := func(a wireAnswer) bool { return a.status == http.StatusNotFound } // the fake upstream's answer
	for _, p := range []string{"/v2/health/ready", "/v2/models/simple/ready", "/v2/models/simple/versions/1/ready"} {
		if a := get(p); !passed(a) {
			t.Fatalf("%s while healthy: %d %q, want it passed through", p, a.status, a.body)
		}
	}
	h.model.Store(true)
	for _, p := range []string{"/v2/models/simple/ready", "/v2/models/simple/versions/1/ready"} {
		a := get(p)
		if msg, ok := kserve.ParseErrorBody(a.body); a.status != http.StatusBadRequest || !ok || !strings.Contains(msg, "in a row") {
			t.Fatalf("%s while the model fails: %d %q", p, a.status, a.body)
		}
	}
	if a := get("/v2/models/other/ready"); !passed(a) {
		t.Fatalf("another model's readiness: %d", a.status)
	}
	if a := get("/v2/health/ready"); !passed(a) {
		t.Fatalf("server readiness with one model failing: %d", a.status)
	}
	h.all.Store(true)
	if a := get("/v2/health/ready"); a.status != http.StatusBadRequest {
		t.Fatalf("server readiness with the upstream failing: %d %q", a.status, a.body)
	}
}
