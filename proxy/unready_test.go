package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebatch/ratebatch/admin"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/proxy"
)

// unreadyHealth says why the proxy is not ready, as the dispatcher does.
type unreadyHealth struct {
	fakeHealth
	why atomic.Value
}

func (h *unreadyHealth) Unready() string { s, _ := h.why.Load().(string); return s }

// /readyz and /v2/health/ready name the cause of not being ready, and
// follow the dispatcher's Unready verdict (an upstream refusing
// connections too).
func TestReadinessSaysWhy(t *testing.T) {
	h := &unreadyHealth{}
	h.why.Store("")
	adminPort := admin.New(admin.Options{Gatherer: prometheus.NewRegistry(), Unready: h.Unready,
		Ready: func() bool { return true }})
	base := startFront(t, proxy.Options{Backend: door.Backend{Batcher: echoBatcher{}, Health: h}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: fuzzBodyLimit, Forward: fakeUpstream{}, ReadTimeout: 5 * time.Second})
	readyz := func() (int, string) {
		w := httptest.NewRecorder()
		adminPort.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/readyz", nil))
		msg, _ := kserve.ParseErrorBody(w.Body.Bytes())
		return w.Code, msg
	}
	serverReady := func() (int, string) {
		a := exchange(t, base, []byte("GET /v2/health/ready HTTP/1.1\r\nHost: p\r\n\r\n"), false)
		msg, _ := kserve.ParseErrorBody(a.body)
		return a.status, msg
	}
	if code, _ := readyz(); code != http.StatusOK {
		t.Fatalf("/readyz while ready: %d", code)
	}
	if code, _ := serverReady(); code != http.StatusNotFound { // passed to the fake upstream
		t.Fatalf("/v2/health/ready while ready: %d, want it passed through", code)
	}
	const why = "upstream refusing connections for 1.2s (dial tcp 127.0.0.1:8080: connect: connection refused)"
	h.why.Store(why)
	if code, msg := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(msg, why) {
		t.Fatalf("/readyz while unready: %d %q, want 503 naming the cause", code, msg)
	}
	if code, msg := serverReady(); code != http.StatusBadRequest || !strings.Contains(msg, why) {
		t.Fatalf("/v2/health/ready while unready: %d %q, want 400 naming the cause", code, msg)
	}
}
