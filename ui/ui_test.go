package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
	"github.com/ratebatch/ratebatch/regression"
	"github.com/ratebatch/ratebatch/whatif"
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
	think, feedback := 2.5, 0.9
	closed := 1 + f.step%3
	f.state.Phase, f.state.PhaseReason = "learning", fmt.Sprintf("%d of 1,000 round trips", 100*f.step)
	f.state.Sources = dispatcher.SourceStats{Known: true, Population: closed + 1, ClosedLoop: closed, OpenLoop: 1,
		Busy: 1, Idle: closed, Partners: closed + 1, ThinkMs: &think, Feedback: &feedback}
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
	// The callers: 1 + 7%3 = 2 closed-loop and one open-loop at the last
	// sample, 1 + 6%3 = 1 closed-loop the sample before.
	if last.ClosedLoop != 2 || last.OpenLoop != 1 || last.ThinkMs == nil || *last.ThinkMs != 2.5 || m.Points[3].ClosedLoop != 1 {
		t.Errorf("callers in the points: last %+v, before %+v", last, m.Points[3])
	}
	if m.Sources.Population != 3 || m.Sources.ClosedLoop != 2 || !m.Sources.Known {
		t.Errorf("callers now %+v: want 3, two closed-loop", m.Sources)
	}
	if m.Phase != "learning" || m.PhaseReason != "700 of 1,000 round trips" {
		t.Errorf("phase %q (%q), want the last sample's learning, 700 of 1,000 round trips", m.Phase, m.PhaseReason)
	}
}

// TestHistoryListsModes: the page's document lists every model the
// proxy knows, batched or passed through, with why.
func TestHistoryListsModes(t *testing.T) {
	f := newFakeProxy()
	modes := []Mode{{Model: "resnet", Mode: "batched"}, {Model: "llm", Mode: "passed through", Reason: "decoupled model: responses stream"}}
	r := NewRecorder(Options{States: f.states, Modes: func() []Mode { return modes }})
	r.Sample()
	if h := r.History(); len(h.Modes) != 2 || h.Modes[1] != modes[1] {
		t.Fatalf("modes %+v, want %+v", h.Modes, modes)
	}
	if h := NewRecorder(Options{States: f.states}).History(); h.Modes == nil {
		t.Fatal("modes without a reader: null, want an empty list")
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
	r := NewRecorder(Options{States: f.states, Gatherer: f.reg, Modes: func() []Mode {
		return []Mode{{Model: "resnet", Mode: "batched"}, {Model: "llm", Mode: "passed through", Reason: "decoupled model: responses stream"}}
	}})
	r.Sample()
	for range 5 {
		f.advance()
		r.Sample()
	}
	page := pageURL(t, r)

	first := dumpDOM(t, browser, page)
	if !strings.Contains(first, `data-model="resnet"`) {
		t.Fatalf("the page did not draw the model:\n%.2000s", first)
	}
	drawn := map[string]int{}
	for _, m := range chartPoints.FindAllStringSubmatch(first, -1) {
		n, _ := strconv.Atoi(m[2])
		drawn[m[1]] = n
	}
	for _, c := range []string{"rate", "batch", "latency", "rpj", "sources", "fit"} {
		if drawn[c] == 0 {
			t.Errorf("chart %s drew no points (charts: %v)", c, drawn)
		}
	}
	if !strings.Contains(first, `data-model="llm" data-mode="passed through"`) || !strings.Contains(first, "decoupled model: responses stream") {
		t.Error("the models' modes are not listed")
	}
	if !strings.Contains(first, "<path") || !strings.Contains(first, "<circle") {
		t.Error("no lines or batch points in the SVG")
	}
	if !strings.Contains(first, "tau(b) = 0.50·b + 2.00 ms") {
		t.Error("the fit's line is not stated")
	}
	// After five steps: 1 + 5%3 = 3 closed-loop callers and one open-loop.
	if !strings.Contains(first, `<span data-k="population">4</span>: 3 closed-loop (think time 2.50 ms`) {
		t.Error("the callers now are not stated")
	}
	if !strings.Contains(first, `Feedback <span data-k="feedback">0.90</span>`) || strings.Contains(first, `data-k="tentative"`) {
		t.Error("the callers' feedback is not stated, or the closed loop it confirms is called tentative")
	}

	for range 5 {
		f.advance()
		r.Sample()
	}
	second := dumpDOM(t, browser, page)
	if second == first {
		t.Fatal("the page did not change as the data did")
	}
	if a, b := chartPoints.FindAllString(first, -1), chartPoints.FindAllString(second, -1); strings.Join(a, "") == strings.Join(b, "") {
		t.Errorf("chart point counts did not move: %v then %v", a, b)
	}
}

// twoModels is a proxy serving an idle model whose name sorts first and a
// busy one with an energy line and server statistics behind its fit.
type twoModels struct {
	reg        *prometheus.Registry
	lat        *prometheus.HistogramVec
	busy, idle State
}

func newTwoModels() *twoModels {
	f := &twoModels{reg: prometheus.NewRegistry()}
	f.lat = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: LatencyMetric, Buckets: prometheus.ExponentialBuckets(0.0002, 2, 18)}, []string{"model", "protocol"})
	f.reg.MustRegister(f.lat)
	overhead := 2.5
	f.busy = State{Model: "zeta", Policy: "budget", MaxBatch: 8, Instances: 1, AlphaMs: 0.5, Tau0Ms: 2, R2: 0.99,
		FitSource: "server statistics", OverheadMs: &overhead, Energy: &batchcost.Energy{BetaMJ: 10, Zeta0MJ: 30}}
	f.idle = State{Model: "alpha", Policy: "budget", MaxBatch: 8, Instances: 1, AlphaMs: 0.5, Tau0Ms: 2, FitSource: "round trip"}
	return f
}

// second is one second of traffic: the busy model sends 50 batches of 4
// rows (200 req/s) answered in 4 to 8 ms.
func (f *twoModels) second() {
	f.busy.RateRPS = 200
	f.busy.BatchSize = 4
	f.busy.BatchesSent += 50
	f.busy.RowsSent += 200
	rpj := 24.0
	f.busy.RequestsPerJoule = &rpj
	f.busy.Batches = append(f.busy.Batches, regression.Sample{Batch: 4, LatencyMs: 0.5*4 + 2 + 2.5})
	for i := range 200 {
		f.lat.WithLabelValues("zeta", "http").Observe(float64(4+i%5) / 1000)
	}
}

func (f *twoModels) states() []State { return []State{f.idle, f.busy} }

// TestHeadline: the busiest model comes first, with its last minute's
// figures: rows per batch, load, latency percentiles and the gain over
// ad-hoc from the energy line: zeta(b)/b = 10 + 30/b mJ at ad-hoc's batch
// against zeta(4)/4 = 17.5 mJ.
func TestHeadline(t *testing.T) {
	f := newTwoModels()
	now := time.Unix(1000, 0)
	r := NewRecorder(Options{States: f.states, Gatherer: f.reg, Now: func() time.Time { return now }})
	r.Sample()
	for range 12 {
		now = now.Add(time.Second)
		f.second()
		r.Sample()
	}
	h := r.History()
	if len(h.Models) != 2 || h.Models[0].Model != "zeta" || h.Models[1].Model != "alpha" {
		t.Fatalf("order %v, want the busy zeta before the idle alpha", []string{h.Models[0].Model, h.Models[1].Model})
	}
	hl := h.Models[0].Headline
	if hl.Seconds != 12 || hl.SentRPS != 200 || hl.SentBatch == nil || *hl.SentBatch != 4 {
		t.Errorf("headline %+v: want 12 s at 200 rows/s in batches of 4", hl)
	}
	// rho = 200/s * tau(4) 4 ms / 4 rows = 0.2
	if hl.Rho == nil || math.Abs(*hl.Rho-0.2) > 1e-9 {
		t.Errorf("rho %v, want 0.2", deref(hl.Rho))
	}
	// Ad-hoc at 0.2 requests/ms on tau(b) = 0.5*b + 2 ms: the device idles
	// (the fluid b = 0.2*2/(1 - 0.2*0.5) = 0.44 < 1), but a request finds
	// another waiting when one arrived during the batch before it, so the
	// mean is above 1; it is the chain's (smdp.AdHocMeanBatch).
	ab := smdp.AdHocMeanBatch(batchcost.Latency{AlphaMs: 0.5, Tau0Ms: 2}, 8, 0.2)
	if hl.AdhocBatch == nil || *hl.AdhocBatch != ab || !(ab > 1 && ab < 2) {
		t.Errorf("ad-hoc's batch %v, want the chain's %v, between 1 and 2", deref(hl.AdhocBatch), ab)
	}
	if want := (10 + 30/ab) / 17.5; hl.Gain == nil || math.Abs(*hl.Gain-want) > 1e-9 || math.Abs(*hl.AdhocMJ-(10+30/ab)) > 1e-9 || *hl.BatchedMJ != 17.5 {
		t.Errorf("gain %v (%v vs %v mJ), want %v", deref(hl.Gain), deref(hl.AdhocMJ), deref(hl.BatchedMJ), want)
	}
	if hl.P50Ms == nil || *hl.P50Ms < 4 || *hl.P50Ms > 8 || hl.P99Ms == nil || *hl.P99Ms < *hl.P50Ms || *hl.P99Ms > 12.8 {
		t.Errorf("p50 %v p99 %v, want within the 4-8 ms observed (p99 within 8 ms's bucket, up to 12.8)", deref(hl.P50Ms), deref(hl.P99Ms))
	}
	if idle := h.Models[1].Headline; idle.Gain != nil || idle.SentBatch != nil || idle.SentRPS != 0 {
		t.Errorf("idle model's headline %+v: want no batch, no gain", idle)
	}
}

// TestHeadlineAdhocBatchesUnderLoad: "vs ad-hoc" compares with ad-hoc as
// the product means it, everything waiting whenever the device is free, not
// each request alone. At 1000 rows/s on tau(b) = 0.5*b + 2 ms ad-hoc sends
// about b = lambda*tau(b) = 1*(0.5*b + 2), b = 4 (the fluid fixed point; the
// spread of Poisson arrivals around it adds a little), so about zeta(4)/4 =
// (10*4 + 30)/4 = 17.5 mJ a request; batches of 8 spend (10*8 + 30)/8 =
// 13.75 mJ: a gain near 17.5/13.75 = 1.27, not zeta(1)/13.75 = 40/13.75.
func TestHeadlineAdhocBatchesUnderLoad(t *testing.T) {
	f := newTwoModels()
	now := time.Unix(1000, 0)
	r := NewRecorder(Options{States: f.states, Gatherer: f.reg, Now: func() time.Time { return now }})
	r.Sample()
	for range 5 {
		now = now.Add(time.Second)
		f.busy.BatchesSent += 125
		f.busy.RowsSent += 1000
		r.Sample()
	}
	hl := r.History().Models[0].Headline
	if hl.SentRPS != 1000 || hl.SentBatch == nil || *hl.SentBatch != 8 {
		t.Fatalf("headline %+v: want 1000 rows/s in batches of 8", hl)
	}
	if hl.AdhocBatch == nil || *hl.AdhocBatch < 4 || *hl.AdhocBatch > 4.2 {
		t.Fatalf("ad-hoc's batch %v, want 4 to 4.2", deref(hl.AdhocBatch))
	}
	ab := *hl.AdhocBatch
	if want := (10 + 30/ab) / 13.75; hl.Gain == nil || math.Abs(*hl.Gain-want) > 1e-9 || *hl.BatchedMJ != 13.75 {
		t.Errorf("gain %v (%v vs %v mJ), want (10 + 30/%v)/13.75 = %v", deref(hl.Gain), deref(hl.AdhocMJ), deref(hl.BatchedMJ), ab, want)
	}
	if *hl.Gain > 1.28 {
		t.Errorf("gain %v: more than batches of 4 against 8 give (1.27)", *hl.Gain)
	}
}

var (
	headlineCell = regexp.MustCompile(`<div class="hl" data-k="(\w+)"><div class="hl-label">[^<]*</div><div class="hl-value">([^<]*)</div>`)
	chartRange   = regexp.MustCompile(`data-chart="(\w+)" data-points="\d+" data-x0="([-\d.]+)" data-x1="([-\d.]+)"`)
)

// TestPageHeadlineInBrowser loads the page in headless Chromium after a
// 12-second run of two models and checks what it shows: the busy model
// first, its headline figures filled, the fit chart saying what its dots
// and line are, and time axes that span the 12 s, not ten minutes. It saves
// a screenshot in $RATEBATCH_TEST_ARTIFACTS (or the test's temporary
// directory) and logs its path.
func TestPageHeadlineInBrowser(t *testing.T) {
	browser := chromium(t)
	f := newTwoModels()
	// The history ends now, as the page's "seconds before now" reads it.
	clock := time.Now().Add(-12 * time.Second)
	r := NewRecorder(Options{States: f.states, Gatherer: f.reg, Now: func() time.Time { return clock }})
	r.Sample()
	for range 12 {
		clock = clock.Add(time.Second)
		f.second()
		r.Sample()
	}
	page := pageURL(t, r)

	dom := dumpDOM(t, browser, page)
	zeta, alpha := strings.Index(dom, `<h2 id="m-zeta"`), strings.Index(dom, `<h2 id="m-alpha"`)
	if zeta < 0 || alpha < 0 || zeta > alpha {
		t.Fatalf("model sections at %d (zeta) and %d (alpha): want the busy zeta first:\n%.3000s", zeta, alpha, dom)
	}
	if !strings.Contains(dom, `id="chooser"`) {
		t.Error("no model chooser")
	}
	cells := map[string]string{}
	for _, m := range headlineCell.FindAllStringSubmatch(dom[zeta:alpha], -1) {
		cells[m[1]] = m[2]
	}
	ab := smdp.AdHocMeanBatch(batchcost.Latency{AlphaMs: 0.5, Tau0Ms: 2}, 8, 0.2)
	gain := "+" + jsFmt(100*((10+30/ab)/17.5-1)) + "%" // app.js's pct

	if !strings.Contains(dom[zeta:alpha], `<div class="hl" data-k="gain"><div class="hl-label">vs ad-hoc, modelled</div>`) {
		t.Error("the gain over ad-hoc is not labelled as modelled")
	}
	want := map[string]string{"rpj": "24.0", "gain": gain, "batch": "4.00", "rho": "0.20"}
	for k, v := range want {
		if cells[k] != v {
			t.Errorf("headline %s shows %q, want %q (cells %v)", k, cells[k], v, cells)
		}
	}
	for _, k := range []string{"p50", "p99"} {
		if !strings.HasSuffix(cells[k], " ms") {
			t.Errorf("headline %s shows %q, want a latency in ms", k, cells[k])
		}
	}
	for _, phrase := range []string{"round trips measured by the proxy", "tau(b) fitted on Triton's statistics",
		"tau(b) + 2.50 ms overhead", "Modelled: the gain over ad-hoc, which sends everything waiting whenever the device is free (at this load",
		"Measured: requests per joule"} {
		if !strings.Contains(dom[zeta:alpha], phrase) {
			t.Errorf("the busy model's section does not say %q", phrase)
		}
	}
	for _, m := range chartRange.FindAllStringSubmatch(dom[zeta:alpha], -1) {
		if m[1] == "fit" {
			continue
		}
		if x0, _ := strconv.ParseFloat(m[2], 64); x0 != -15 || m[3] != "0" {
			t.Errorf("chart %s spans %s..%s s, want -15..0 for a 13 s history", m[1], m[2], m[3])
		}
	}

	dir := os.Getenv("RATEBATCH_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	shot := filepath.Join(dir, "ui-headline.png")
	screenshot(t, browser, page, shot, 1500)
	t.Logf("screenshot: %s", shot)
}

// TestPageSaysWhenEnergyIsNotMeasured: with a meter that reads nothing,
// each model's section says energy is not measured and why, and what its
// policy optimises instead of joules; with one that measures, it says so.
func TestPageSaysWhenEnergyIsNotMeasured(t *testing.T) {
	browser := chromium(t)
	f := newTwoModels()
	const why = "power: triton: http://triton:8002/metrics has no nv_energy_consumption or nv_gpu_power_usage series"
	const objective = "requests per GPU-second within the latency budget"
	f.idle.EnergyUnavailable, f.idle.Objective = why, objective
	f.busy.Objective = "requests per joule within the latency budget"
	r := NewRecorder(Options{States: f.states, Gatherer: f.reg})
	r.Sample()
	f.second()
	r.Sample()
	page := pageURL(t, r)
	dom := dumpDOM(t, browser, page)
	alpha, zeta := section(t, dom, "alpha"), section(t, dom, "zeta")
	for _, want := range []string{`data-measured="0"`, "not measured</b> (" + why, `<span data-k="objective">` + objective} {
		if !strings.Contains(alpha, want) {
			t.Errorf("the unmeasured model's section does not say %q:\n%.3000s", want, alpha)
		}
	}
	if !strings.Contains(zeta, `data-measured="1"`) || !strings.Contains(zeta, "requests per joule within the latency budget") {
		t.Errorf("the measured model's section does not say energy is measured and joules are the objective:\n%.3000s", zeta)
	}
}

// pageURL serves r's page until the test ends and returns its address.
func pageURL(t *testing.T, r *Recorder) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/ui/", r.Handler("/ui"))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/ui/"
}

// section is model's part of the page's DOM: from its heading to the next.
func section(t *testing.T, dom, model string) string {
	t.Helper()
	i := strings.Index(dom, `<h2 id="m-`+model+`"`)
	if i < 0 {
		t.Fatalf("no section of model %s:\n%.3000s", model, dom)
	}
	if j := strings.Index(dom[i+1:], "<h2 id="); j >= 0 {
		return dom[i : i+1+j]
	}
	return dom[i:]
}

// TestPageCallersPanel: the Callers panel says what the dispatcher
// learnt: a pool of connections under an open stream (feedback below
// 0.25) is open-loop, and connections that look closed-loop by their own
// gaps before the feedback is known are said to be that and no more.
func TestPageCallersPanel(t *testing.T) {
	browser := chromium(t)
	pooled, think := 0.05, 3.0
	states := []State{
		{Model: "pool", Policy: "budget", MaxBatch: 8, AlphaMs: 0.5, Tau0Ms: 2,
			Sources: dispatcher.SourceStats{Known: true, Population: 8, OpenLoop: 8, Idle: 8, Partners: 8, Feedback: &pooled}},
		{Model: "early", Policy: "budget", MaxBatch: 8, AlphaMs: 0.5, Tau0Ms: 2,
			Sources: dispatcher.SourceStats{Known: true, Population: 8, ClosedLoop: 8, ClosedLoopCallers: 8, Idle: 8, Partners: 8, ThinkMs: &think}},
	}
	r := NewRecorder(Options{States: func() []State { return states }})
	r.Sample()
	page := pageURL(t, r)
	dom := dumpDOM(t, browser, page)
	pool, early := section(t, dom, "pool"), section(t, dom, "early")
	for _, want := range []string{`<span data-k="population">8</span>: 0 closed-loop, 8 open-loop`, "count, and are planned, as open-loop"} {
		if !strings.Contains(pool, want) {
			t.Errorf("the pooled open stream's panel does not say %q:\n%.4000s", want, pool)
		}
	}
	if want := `8 closed-loop by their own gaps (<span data-k="tentative">not yet told from a pool`; !strings.Contains(early, want) {
		t.Errorf("the unconfirmed closed loop's panel does not say %q:\n%.4000s", want, early)
	}
}

// screenshot saves a PNG of url as headless Chromium draws it, height
// pixels tall.
func screenshot(t *testing.T, browser, url, path string, height int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=2000", fmt.Sprintf("--window-size=1400,%d", height), "--screenshot="+path, url)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	png, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("%s is not a PNG: %v", path, err)
	}
}

// Rows a model sent before its first sample (a burst right after start)
// count in its headline, from zero one interval before that sample.
func TestHeadlineCountsRowsBeforeFirstSample(t *testing.T) {
	s := State{Model: "m", MaxBatch: 8, AlphaMs: 0.5, Tau0Ms: 2, BatchesSent: 10, RowsSent: 40}
	now := time.Unix(1000, 0)
	r := NewRecorder(Options{States: func() []State { return []State{s} }, Now: func() time.Time { return now }})
	r.Sample()
	now = now.Add(time.Second)
	r.Sample()
	hl := r.History().Models[0].Headline
	if hl.Seconds != 2 || hl.SentRPS != 20 || hl.SentBatch == nil || *hl.SentBatch != 4 {
		t.Errorf("headline %+v (batch %v): want 40 rows in batches of 4 over 2 s", hl, deref(hl.SentBatch))
	}
}

// A sample that panics (here its state reader, the test-only way in) does
// not end the recorder, nor the process: Run recovers, counts the panic
// at site "ui", and samples again after a pause.
func TestRunRecoversFromAPanic(t *testing.T) {
	f := newFakeProxy()
	f.advance()
	var mu sync.Mutex
	panics := 2
	sampled := make(chan struct{}, 1)
	r := NewRecorder(Options{Interval: time.Millisecond, Gatherer: f.reg, States: func() []State {
		mu.Lock()
		panics--
		p := panics >= 0
		mu.Unlock()
		if p {
			panic("injected state reader panic")
		}
		select {
		case sampled <- struct{}{}:
		default:
		}
		return f.states()
	}})
	before := guard.Count("ui")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	select {
	case <-sampled:
	case <-time.After(10 * time.Second):
		t.Fatal("the recorder never sampled again after its panics")
	}
	cancel()
	<-done
	if got := guard.Count("ui") - before; got != 2 {
		t.Fatalf("counted %d ui panics, want 2", got)
	}
	if h := r.History(); len(h.Models) != 1 || h.Models[0].Model != "resnet" {
		t.Fatalf("history after the panics: %+v, want the one model", h.Models)
	}
}

// jsFmt is app.js's fmt: 0, 1 or 2 decimals by magnitude.
func jsFmt(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// whatifReport is a what-if as GET /whatif answers it: the setting in
// force, ad-hoc, a point on the front recommended and one beaten.
func whatifReport() whatif.Report {
	f := func(v float64) *float64 { return &v }
	return whatif.Report{Model: "resnet", Enough: true, Seconds: 300, To: time.Unix(1300, 0),
		Arrivals:     whatif.ArrivalCounts{Total: 60000, OpenLoop: 60000},
		Lived:        whatif.Lived{Requests: 60000, MeanMs: f(2.1), P99Ms: f(6.2), RequestsPerJoule: f(20.4), BusyShare: f(0.41)},
		CheckVsLived: whatif.Ratios{Mean: f(0.97), P99: f(1.04), RequestsPerJoule: f(1.01)},
		Efficiency:   whatif.EfficiencyRPJ, Recommended: 2,
		Recommendation: "budget mean 1.25x p99 1.25x: the most efficient on the front with its p99 within 8 ms",
		Assumptions:    []string{"Replayed on the line the plan in force was made with.", "Arrivals are taken as independent of the setting."},
		Points: []whatif.Point{
			{Label: "in force: budget", Policy: "budget", Current: true, MeanMs: 2.0, P99Ms: 6.0, MeanBatch: 1.2, RequestsPerJoule: f(20.6), BusyShare: 0.4, Front: true},
			{Label: "adhoc", Policy: "adhoc", MeanMs: 1.9, P99Ms: 5.8, MeanBatch: 1.1, RequestsPerJoule: f(20), BusyShare: 0.42, Front: true,
				Apply: `curl -sS -X PUT -d '{"model":"resnet","policy":"adhoc"}' http://127.0.0.1:9002/policy`},
			{Label: "budget mean 1.25x p99 1.25x", Policy: "budget", MeanMs: 2.4, P99Ms: 7.5, MeanBatch: 1.6, RequestsPerJoule: f(21.5), BusyShare: 0.35, Front: true,
				Apply: `curl -sS -X PUT -d '{"latency_budget":"1.25x","model":"resnet","policy":"budget","tail_budget":"1.25x"}' http://127.0.0.1:9002/policy`},
			{Label: "maxbatch delay 5ms", Policy: "maxbatch", MeanMs: 6, P99Ms: 12, MeanBatch: 3, RequestsPerJoule: f(21), BusyShare: 0.3,
				Apply: `curl -sS -X PUT -d '{"max_queue_delay":"5ms","model":"resnet","policy":"maxbatch"}' http://127.0.0.1:9002/policy`},
		},
	}
}

// TestWhatIfInBrowser: the page asks for the busiest model's what-if on
// its own, follows its 202 until the answer, and draws the trade-off (every
// setting a point, the one in force a square, the front joined, the
// recommended ringed), the table with the command that applies each
// setting, the replay's error on what was lived and its assumptions.
func TestWhatIfInBrowser(t *testing.T) {
	browser := chromium(t)
	f := newFakeProxy()
	r := NewRecorder(Options{States: f.states, Gatherer: f.reg})
	r.Sample()
	f.advance()
	r.Sample()
	body, err := json.Marshal(whatifReport())
	if err != nil {
		t.Fatal(err)
	}
	var asked atomic.Int32
	mux := http.NewServeMux()
	mux.Handle("/ui/", r.Handler("/ui"))
	mux.HandleFunc("/whatif", func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Query().Get("model") != "resnet" {
			http.Error(w, `{"error":"wrong model"}`, http.StatusBadRequest)
			return
		}
		if asked.Add(1) == 1 { // running, the first time
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusAccepted)
			w.Write([]byte(`{"model":"resnet","running":true,"replayed":3,"settings":13,"seconds":2}`))
			return
		}
		w.Write(body)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	dom := dumpDOM(t, browser, srv.URL+"/ui/")
	if asked.Load() < 2 {
		t.Fatalf("the page asked for the what-if %d times, want it to ask again after the 202", asked.Load())
	}
	for _, want := range []string{
		`data-chart="whatif" data-points="4"`, `data-k="wi-current"`, `data-k="wi-front"`, `data-k="wi-recommended"`,
		"budget mean 1.25x p99 1.25x <b>(recommended)</b>",
		`-d '{"latency_budget":"1.25x","model":"resnet","policy":"budget","tail_budget":"1.25x"}' http://127.0.0.1:9002/policy`,
		"mean 0.97x, p99 1.04x, requests/J 1.01x", "Arrivals are taken as independent of the setting.",
	} {
		if !strings.Contains(dom, want) {
			t.Errorf("the what-if section lacks %s", want)
		}
	}
	if n := strings.Count(dom, `data-k="wi-row"`); n != 4 {
		t.Errorf("%d table rows, want 4", n)
	}
	if n := strings.Count(dom, `data-k="wi-apply"`); n != 3 {
		t.Errorf("%d apply commands, want one per setting not in force, 3", n)
	}
	if t.Failed() {
		i := strings.Index(dom, `id="whatif"`)
		t.Logf("what-if section:\n%.4000s", dom[max(i, 0):])
	}
	dir := os.Getenv("RATEBATCH_TEST_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	asked.Store(1) // answered at once from now on
	shot := filepath.Join(dir, "ui-whatif.png")
	screenshot(t, browser, srv.URL+"/ui/", shot, 2600)
	t.Logf("screenshot: %s", shot)
}
