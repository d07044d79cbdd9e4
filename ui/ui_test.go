package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebatch/ratebatch/regression"
)

// fakeProxy is a proxy's state that moves: each step more arrivals, more
// batches, more latency observations.
type fakeProxy struct {
	mu    sync.Mutex
	step  int
	reg   *prometheus.Registry
	lat   *prometheus.HistogramVec
	state State
}

func newFakeProxy() *fakeProxy {
	f := &fakeProxy{reg: prometheus.NewRegistry()}
	f.lat = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: LatencyMetric, Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18)}, []string{"model", "protocol"})
	f.reg.MustRegister(f.lat)
	f.state = State{Model: "resnet", Policy: "batchmonitor+", MaxBatch: 8, AlphaMs: 0.5, Tau0Ms: 2, R2: 0.98}
	return f
}

func (f *fakeProxy) advance() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.step++
	b := 1 + f.step%8
	f.state.RateRPS = float64(100 * f.step)
	f.state.BatchSize = b
	f.state.BatchesSent += 10
	f.state.RowsSent += int64(10 * b)
	rpj := 20 + float64(f.step)
	f.state.RequestsPerJoule = &rpj
	f.state.Batches = append(f.state.Batches, regression.Sample{Batch: b, LatencyMs: 0.5*float64(b) + 2})
	for i := range 50 {
		f.lat.WithLabelValues("resnet", "http").Observe(float64(1+i%10) / 1000)
	}
}

func (f *fakeProxy) states() []State {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.state
	s.Batches = append([]regression.Sample(nil), f.state.Batches...)
	return []State{s}
}

func TestRecorderHistory(t *testing.T) {
	f := newFakeProxy()
	now := time.Unix(1000, 0)
	r := NewRecorder(Options{States: f.states, Gatherer: f.reg, Keep: 5, Now: func() time.Time { return now }})
	r.Sample() // the first sample only sets the baseline of the counters
	for range 7 {
		now = now.Add(time.Second)
		f.advance()
		r.Sample()
	}
	h := r.History()
	if len(h.Models) != 1 || h.Models[0].Model != "resnet" {
		t.Fatalf("models %+v", h.Models)
	}
	m := h.Models[0]
	if len(m.Points) != 5 {
		t.Fatalf("%d points kept, want the ring's 5", len(m.Points))
	}
	last := m.Points[4]
	if last.T != 1007 || last.RateRPS != 700 || last.SentBatch == nil || *last.SentBatch != float64(1+7%8) {
		t.Errorf("last point %+v: want t 1007, rate 700, rows per batch %d", last, 1+7%8)
	}
	// 50 requests a second between 1 and 10 ms: p50 about 5 ms, p99 under 10.4.
	if last.P50Ms == nil || *last.P50Ms < 3 || *last.P50Ms > 7 || last.P99Ms == nil || *last.P99Ms < *last.P50Ms || *last.P99Ms > 13 {
		t.Errorf("latency p50 %v p99 %v, want about 5 and under 13 ms", deref(last.P50Ms), deref(last.P99Ms))
	}
	if len(m.Batches) != 7 || m.AlphaMs != 0.5 {
		t.Errorf("fit %v, %d batch points", m.AlphaMs, len(m.Batches))
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

func TestQuantileMs(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004}
	if q := quantileMs(bounds, []uint64{0, 0, 0, 0}, 0.5); q != nil {
		t.Errorf("no requests: %v, want nil", *q)
	}
	// 10 in (0,1ms], 10 in (1,2ms]: the median is the top of the first bucket.
	if q := quantileMs(bounds, []uint64{10, 20, 20, 20}, 0.5); q == nil || *q != 1 {
		t.Errorf("median %v, want 1 ms", deref(q))
	}
	if q := quantileMs(bounds, []uint64{0, 0, 0, 5}, 0.99); q == nil || *q != 4 {
		t.Errorf("beyond the last bound: %v, want the last bound, 4 ms", deref(q))
	}
}

// chromium finds the headless browser scripts/setup-chromium.sh installs.
// Without it the browser tests skip, unless RATEBATCH_REQUIRE_CHROMIUM is
// set (make test sets it, after installing it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("RATEBATCH_REQUIRE_CHROMIUM") != "" {
		t.Fatal("chromium not found; scripts/setup-chromium.sh installs it")
	}
	t.Skip("chromium not installed (scripts/setup-chromium.sh)")
	return ""
}

// dumpDOM loads url in headless Chromium, lets its scripts run, and returns
// the DOM as they left it.
func dumpDOM(t *testing.T, browser, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=2000", "--dump-dom", url)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	return string(out)
}

var chartPoints = regexp.MustCompile(`data-chart="(\w+)" data-points="(\d+)"`)

// TestPageInBrowser: the page, embedded in the binary, loads in a real
// browser, draws every chart from the live history, and a second look after
// the data moved shows different charts.
func TestPageInBrowser(t *testing.T) {
	browser := chromium(t)
	f := newFakeProxy()
	r := NewRecorder(Options{States: f.states, Gatherer: f.reg})
	r.Sample()
	for range 5 {
		f.advance()
		r.Sample()
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", r.Handler("/ui"))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	first := dumpDOM(t, browser, srv.URL+"/ui/")
	if !strings.Contains(first, `data-model="resnet"`) {
		t.Fatalf("the page did not draw the model:\n%.2000s", first)
	}
	drawn := map[string]int{}
	for _, m := range chartPoints.FindAllStringSubmatch(first, -1) {
		n, _ := strconv.Atoi(m[2])
		drawn[m[1]] = n
	}
	for _, c := range []string{"rate", "batch", "latency", "rpj", "fit"} {
		if drawn[c] == 0 {
			t.Errorf("chart %s drew no points (charts: %v)", c, drawn)
		}
	}
	if !strings.Contains(first, "<path") || !strings.Contains(first, "<circle") {
		t.Error("no lines or batch points in the SVG")
	}
	if !strings.Contains(first, "tau(b) = 0.50·b + 2.00 ms") {
		t.Error("the fit's line is not stated")
	}

	for range 5 {
		f.advance()
		r.Sample()
	}
	second := dumpDOM(t, browser, srv.URL+"/ui/")
	if second == first {
		t.Fatal("the page did not change as the data did")
	}
	if a, b := chartPoints.FindAllString(first, -1), chartPoints.FindAllString(second, -1); strings.Join(a, "") == strings.Join(b, "") {
		t.Errorf("chart point counts did not move: %v then %v", a, b)
	}
}
