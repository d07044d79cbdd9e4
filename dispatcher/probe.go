package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/hostclient"
	"github.com/ratebatch/ratebatch/kserve"
)

// Active recovery. Passive detection (outlier.go, health.go) learns from
// the batches the callers send; but a failing model refuses its callers,
// and a pod taken out of its Service gets none, so with passive checks
// alone a healed upstream is never found: readiness would wait for a client
// that readiness keeps away. While a model fails, or the upstream refuses
// connections, the proxy therefore tests it on its own, as Envoy's and
// Caddy's active health checks do: one probe inference at a time (the
// model's ModelSpec.Probe), first within half a second, then with
// jittered pauses growing to Outlier.ProbeInterval, each bounded by its own
// timeout so that a hung upstream is tried again rather than waited on.
// A probe takes the probe role a client batch would take (modelHealth's
// probing, upstreamHealth's), so it never goes beside one, and its outcome
// counts exactly as that batch's would (endBatch, reached).

// Pacing of the active probes: the first after about firstProbe, the next
// ones after pauses doubling up to Outlier.ProbeInterval (at least
// minProbeInterval), each drawn from the upper half of its range; busyProbe
// is the look again while a client batch holds the probe role.
const (
	firstProbe       = 500 * time.Millisecond
	minProbeInterval = 100 * time.Millisecond
	busyProbe        = 100 * time.Millisecond
	minProbeTimeout  = 250 * time.Millisecond
)

// ProbeID is the "id" of every probe inference the proxy builds: an
// upstream's log tells the proxy's probes from its callers' requests.
const ProbeID = "ratebatch-probe"

// ProbeReport is the outcome of an active probe.
type ProbeReport struct {
	At time.Time `json:"at"`
	// OK is set when the probe found the upstream answering: the model (or
	// the upstream) is healthy again.
	OK bool `json:"ok"`
	// Outcome is ok, rejected (a 4xx: the probe's body does not fit the
	// model; taken as an answer), error (a 5xx), timeout or connection.
	Outcome string  `json:"outcome"`
	Detail  string  `json:"detail,omitempty"`
	TookMs  float64 `json:"took_ms"`
}

// probePause is the pause before probe number n (1, 2, ...).
func probePause(interval time.Duration, n int) time.Duration {
	interval = max(interval, minProbeInterval)
	d := min(firstProbe, interval)
	for i := 1; i < n && d < interval; i++ {
		d *= 2
	}
	d = min(d, interval)
	return d/2 + rand.N(d/2+1)
}

// nextProbeIn is the wait before probe number n after the last one took
// took: its pause counts from the last one's start, so that a probe that
// ran into its timeout is followed soon (the upstream may have healed
// meanwhile), but never at once: a quarter of the pause at least, so that
// the upstream has dropped the request given up on before the next comes.
func nextProbeIn(interval time.Duration, n int, took time.Duration) time.Duration {
	p := probePause(interval, n)
	return max(p-took, p/4)
}

// probes is the dispatcher's active prober: which probe loops run, and
// what the last probes found.
type probes struct {
	mu      sync.Mutex
	wg      sync.WaitGroup
	stopped bool
	running map[string]bool // probe loops by model; "" for the upstream's
	last    map[string]ProbeReport
	counts  map[[2]string]int64 // by model and outcome
	// downSince and downErr describe the upstream refusing connections
	// (downErr for the admin port's /status); downCause is downErr in a
	// client's words (hostclient.Cause), for readiness on the data port.
	downSince time.Time
	downErr   string
	downCause string
}

func newProbes() *probes {
	return &probes{running: map[string]bool{}, last: map[string]ProbeReport{}, counts: map[[2]string]int64{}}
}

// start runs loop for key unless one runs or the dispatcher is closing.
// Called with p.mu held.
func (p *probes) start(d *Dispatcher, key string, loop func()) {
	if p.stopped || p.running[key] {
		return
	}
	p.running[key] = true
	p.wg.Go(func() {
		// A panic here would end the process; a lost loop would leave its
		// model failing for good: recover, and let the next failure start
		// it again.
		defer func() {
			if v := recover(); v != nil {
				guard.Recovered(d.o.Logger, "probe", v)
				p.mu.Lock()
				delete(p.running, key)
				p.mu.Unlock()
			}
		}()
		loop()
	})
}

// stop ends the probe loops (Drain) and waits for them.
func (p *probes) stop() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.wg.Wait()
}

// done marks key's loop ended. Called with p.mu held.
func (p *probes) done(key string) { delete(p.running, key) }

func (p *probes) record(key string, r ProbeReport) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[key] = r
	p.counts[[2]string{key, r.Outcome}]++
}

func (p *probes) lastOf(key string) (ProbeReport, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.last[key]
	return r, ok
}

// startModel starts q's probe loop if its model has a probe. Called by
// markFailing, with q.mu held.
func (q *modelQueue) startProbing() {
	if q.spec.Probe.Body == nil {
		return
	}
	p := q.d.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start(q.d, q.name, q.probeLoop)
}

// probeLoop probes the failing model until a probe finds it healthy, the
// model stops failing otherwise (a client's probe batch), or the
// dispatcher closes.
func (q *modelQueue) probeLoop() {
	wait := probePause(q.d.o.Outlier.ProbeInterval, 1)
	for n := 1; ; {
		if !sleep(q.d.ctx, wait) {
			q.endProbing()
			return
		}
		body, timeout, state := q.takeProbe()
		switch state {
		case probeEnd:
			return
		case probeBusy:
			wait = busyProbe
			continue
		}
		start := time.Now()
		res, report := q.d.sendProbe(q.name, body, timeout)
		q.d.probes.record(q.name, report)
		q.endBatch(true, []Result{res})
		n++
		wait = nextProbeIn(q.d.o.Outlier.ProbeInterval, n, time.Since(start))
		if report.OK {
			wait = 0 // the next look ends the loop
		}
	}
}

type probeState int

const (
	probeGo   probeState = iota
	probeBusy            // a client batch holds the probe role, or is forming
	probeEnd             // the model is healthy, has no probe, or is draining
)

// takeProbe takes the model's probe role for an active probe, and returns
// its body and timeout. When the loop is to end, it is marked ended under
// the queue's lock, so a markFailing after it starts a new one.
func (q *modelQueue) takeProbe() (Wire, time.Duration, probeState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := &q.health
	if !h.failing || q.draining || q.spec.Probe.Body == nil {
		q.d.probes.mu.Lock()
		q.d.probes.done(q.name)
		q.d.probes.mu.Unlock()
		return Wire{}, 0, probeEnd
	}
	if h.probing || q.rows > 0 {
		return Wire{}, 0, probeBusy
	}
	h.probing = true
	return q.spec.Probe, q.probeTimeout(), probeGo
}

func (q *modelQueue) endProbing() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.d.probes.mu.Lock()
	q.d.probes.done(q.name)
	q.d.probes.mu.Unlock()
}

// probeTimeout bounds one probe: the probe interval, and at least the time
// a one-row batch may take before it would be taken for hung. Called with
// q.mu held.
func (q *modelQueue) probeTimeout() time.Duration {
	o := q.d.o.Outlier
	t := max(o.ProbeInterval, minProbeTimeout)
	if p, ok := q.spec.Planner.(Predictor); ok {
		f := o.HungFactor
		if f <= 0 {
			f = DefaultHungFactor
		}
		t = max(t, time.Duration(f*float64(p.Predict(1))))
	}
	return t
}

// TimedUpstream is an Upstream that can bound one call by a timeout of its
// own (HTTPUpstream): a probe must not wait the batches' long timeout on a
// hung upstream. An Upstream without it probes with Infer.
type TimedUpstream interface {
	InferWithin(model, version string, body Body, timeout time.Duration) (*Reply, error)
}

// InferWithin implements TimedUpstream.
func (u *HTTPUpstream) InferWithin(model, version string, body Body, timeout time.Duration) (*Reply, error) {
	var own []byte
	for k, v := range u.OwnHeader {
		own = EndHeader(append(AppendHeaderName(own, k), v...))
	}
	return u.infer(context.Background(), model, version, body, Outgoing{Header: string(own)}, timeout)
}

// sendProbe sends one probe and returns the result a batch of it would
// have had (for endBatch: a fault, an answer, or neither) and its report.
// It keeps the upstream's down state as a batch's attempt does.
func (d *Dispatcher) sendProbe(model string, w Wire, timeout time.Duration) (Result, ProbeReport) {
	start := time.Now()
	var (
		reply *Reply
		err   error
	)
	body := wireBody{&w}
	if t, ok := d.o.Upstream.(TimedUpstream); ok {
		reply, err = t.InferWithin(model, "", body, timeout)
	} else {
		reply, err = d.o.Upstream.Infer(context.Background(), model, "", body, Outgoing{})
	}
	r := ProbeReport{At: d.now(), TookMs: float64(time.Since(start).Microseconds()) / 1000}
	fail := func(outcome, detail string, res error) (Result, ProbeReport) {
		r.Outcome, r.Detail = outcome, detail
		return Result{Err: res}, r
	}
	if ce, ok := connError(err); ok {
		if ce.Dial {
			d.noteRefused(d.health.refused(), ce)
		}
		return fail("connection", ce.Error(), &kserve.Error{Status: http.StatusServiceUnavailable, Msg: ce.Error()})
	}
	switch {
	case errors.Is(err, ErrUpstreamTimeout):
		d.reached()
		return fail("timeout", fmt.Sprintf("no answer within %v", timeout),
			fault("timeout", &kserve.Error{Status: http.StatusGatewayTimeout, Msg: "probe: no answer in time"}))
	case err != nil:
		return fail("connection", err.Error(), &kserve.Error{Status: http.StatusBadGateway, Msg: err.Error()})
	}
	defer reply.Free()
	d.reached()
	outcome := "ok" // as Triton's statistics count it (Metrics.Upstream)
	if reply.Status != http.StatusOK {
		outcome = "error"
	}
	d.o.Metrics.Upstream.WithLabelValues(model, outcome).Inc()
	msg, _ := kserve.ParseErrorBody(reply.Body)
	switch {
	case reply.Status == http.StatusOK:
		r.OK, r.Outcome = true, "ok"
		return Result{}, r
	case reply.Status >= 500:
		return fail("error", fmt.Sprintf("%d %s", reply.Status, msg),
			fault("status_5xx", reply.asError(msg)))
	}
	// The upstream read the probe and refused its input: it answers, which
	// is what the probe asks; a body that does not fit the model must not
	// keep it failing for good. Said in the report and the log.
	r.OK, r.Outcome, r.Detail = true, "rejected", fmt.Sprintf("%d %s", reply.Status, msg)
	d.o.Logger.Warn("the upstream refused the probe inference: the model is taken for healthy; set models.NAME.probe to a request it accepts",
		"model", model, "status", reply.Status, "error", msg)
	return Result{Err: reply.asError(msg)}, r
}

// noteRefused records a connection the upstream refused (markedDown: the
// first of an outage) and starts the upstream's probe loop: held batches
// probe it while they wait, but with none waiting nothing else would.
func (d *Dispatcher) noteRefused(markedDown bool, err error) {
	if markedDown {
		d.o.Logger.Warn("upstream refusing connections: the proxy is not ready, batched calls are held for it, and it is probed until it answers",
			"err", err, "hold", d.o.Hold)
	}
	p := d.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	if markedDown || p.downSince.IsZero() {
		p.downSince = d.now()
	}
	p.downErr, p.downCause = err.Error(), hostclient.Cause(err)
	p.start(d, "", d.probeUpstreamLoop)
}

// reached records an answer from the upstream (upstreamHealth.reached),
// and logs the end of an outage.
func (d *Dispatcher) reached() {
	if !d.health.reached() {
		return
	}
	p := d.probes
	p.mu.Lock()
	since := p.downSince
	p.mu.Unlock()
	var downFor time.Duration
	if !since.IsZero() {
		downFor = d.now().Sub(since).Round(time.Millisecond)
	}
	d.o.Logger.Info("upstream answering again", "down_for", downFor)
}

// probeUpstreamLoop probes the upstream while it is marked down.
func (d *Dispatcher) probeUpstreamLoop() {
	h := d.health
	wait := probePause(d.o.Outlier.ProbeInterval, 1)
	for n := 1; ; {
		if !sleep(d.ctx, wait) {
			d.probes.mu.Lock()
			d.probes.done("")
			d.probes.mu.Unlock()
			return
		}
		if !h.isDown.Load() {
			d.probes.mu.Lock()
			if !h.isDown.Load() { // a refusal after this check starts a new loop
				d.probes.done("")
				d.probes.downSince, d.probes.downErr, d.probes.downCause = time.Time{}, "", ""
				d.probes.mu.Unlock()
				return
			}
			d.probes.mu.Unlock()
		}
		send, probe, _ := h.admit()
		if !send || !probe {
			wait = busyProbe // a held batch probes, or it is up: look again
			continue
		}
		model, body := d.anyProbe()
		start := time.Now()
		var report ProbeReport
		if model == "" {
			h.release()
			report = ProbeReport{At: d.now(), Outcome: "connection", Detail: "no batched model to probe with"}
		} else {
			_, report = d.sendProbe(model, body, max(d.o.Outlier.ProbeInterval, minProbeTimeout))
			if report.Outcome == "connection" {
				h.release() // an answer released it (reached)
			}
		}
		d.probes.record("", report)
		n++
		wait = nextProbeIn(d.o.Outlier.ProbeInterval, n, time.Since(start))
	}
}

// anyProbe is a model and a body to try a down upstream with: any answer
// (even a 400 to an empty request) shows it is back. The first model by
// name with a probe, else the first model with an empty request.
func (d *Dispatcher) anyProbe() (string, Wire) {
	d.mu.RLock()
	names := make([]string, 0, len(d.models))
	for name := range d.models {
		names = append(names, name)
	}
	d.mu.RUnlock()
	slices.Sort(names)
	for _, name := range names {
		d.mu.RLock()
		q := d.models[name]
		d.mu.RUnlock()
		q.mu.Lock()
		w := q.spec.Probe
		q.mu.Unlock()
		if w.Body != nil {
			return name, w
		}
	}
	if len(names) == 0 {
		return "", Wire{}
	}
	return names[0], Wire{Body: []byte(`{"id":"` + ProbeID + `","inputs":[]}`), HeaderLen: -1}
}

// Unready says why the proxy should not be sent traffic, "" when it should:
// the upstream refuses connections, fails its active health check
// (check.go), or every batched model is out: failing while the proxy
// probes it itself, or called not ready by the upstream's health check. A
// failing model without a probe (ModelSpec.Probe) fails only its own
// calls and readiness: with the pod out of its Service no client batch
// would ever find it healed.
func (d *Dispatcher) Unready() string {
	if d.health.isDown.Load() {
		p := d.probes
		p.mu.Lock()
		since, why := p.downSince, p.downCause
		p.mu.Unlock()
		msg := "upstream refusing connections"
		if !since.IsZero() {
			msg += fmt.Sprintf(" for %v", d.now().Sub(since).Round(time.Millisecond))
		}
		if why != "" {
			msg += " (" + why + ")"
		}
		return msg + "; probing it"
	}
	if why := d.checks.serverNotReady(); why != "" {
		return "upstream not ready: " + why
	}
	d.mu.RLock()
	qs := make([]*modelQueue, 0, len(d.models))
	for _, q := range d.models {
		qs = append(qs, q)
	}
	d.mu.RUnlock()
	if len(qs) == 0 {
		return ""
	}
	slices.SortFunc(qs, func(a, b *modelQueue) int { return strings.Compare(a.name, b.name) })
	var why []string
	allFailing := true
	for _, q := range qs {
		s, failing := d.modelOut(q)
		if s == "" {
			return ""
		}
		allFailing = allFailing && failing
		why = append(why, s)
	}
	if allFailing {
		return "every batched model is failing upstream, probing: " + strings.Join(why, "; ")
	}
	return "no batched model is ready upstream: " + strings.Join(why, "; ")
}

// modelOut says why q's model is out of service ("" when it is not):
// failing with a probe to find it healed (failing set), or called not
// ready by the upstream's health check.
func (d *Dispatcher) modelOut(q *modelQueue) (why string, failing bool) {
	q.mu.Lock()
	failing, reason, probed := q.health.failing, q.health.reason, q.spec.Probe.Body != nil
	q.mu.Unlock()
	if !failing || !probed {
		if nr := d.checks.modelNotReady(q.name); nr != "" {
			return q.name + ": " + nr, false
		}
		return "", false
	}
	s := q.name + ": " + reason
	if r, ok := d.probes.lastOf(q.name); ok {
		s += fmt.Sprintf("; last probe %v ago: %s", d.now().Sub(r.At).Round(time.Millisecond), r.Outcome)
		if r.Detail != "" {
			s += " (" + r.Detail + ")"
		}
	}
	return s, true
}

// UpstreamStatus is the upstream's state as the dispatcher sees it, for
// /status.
type UpstreamStatus struct {
	// Down is set while the upstream refuses connections (the outage hold).
	Down      bool         `json:"down"`
	DownSince *time.Time   `json:"down_since,omitempty"`
	Error     string       `json:"error,omitempty"`
	LastProbe *ProbeReport `json:"last_probe,omitempty"`
	// Unready is why the proxy reports not ready, "" when it is ready as
	// far as the upstream goes.
	Unready string `json:"unready,omitempty"`
	// Check is what the active health check found; absent when it is off.
	Check *CheckStatus `json:"check,omitempty"`
}

// Upstream reports the upstream's state.
func (d *Dispatcher) Upstream() UpstreamStatus {
	s := UpstreamStatus{Down: d.health.isDown.Load(), Unready: d.Unready(), Check: d.checkStatus()}
	p := d.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.Down && !p.downSince.IsZero() {
		since := p.downSince
		s.DownSince, s.Error = &since, p.downErr
	}
	if r, ok := p.last[""]; ok {
		s.LastProbe = &r
	}
	return s
}

// annotate adds each model's last probe to its snapshot.
func (p *probes) annotate(snaps []Snapshot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range snaps {
		if r, ok := p.last[snaps[i].Model]; ok {
			snaps[i].LastProbe = &r
		}
	}
}

var (
	descProbes = prometheus.NewDesc("ratebatch_probes_total",
		"Active probes of a failing model (model) or of an upstream refusing connections (model=\"\"), by outcome (ok, rejected, error, timeout, connection).", []string{"model", "outcome"}, nil)
	descProbeLast = prometheus.NewDesc("ratebatch_probe_last_timestamp_seconds",
		"When the last active probe of the model (model=\"\": of the upstream) ended.", []string{"model"}, nil)
	descProbeLastOK = prometheus.NewDesc("ratebatch_probe_last_ok",
		"1 if the last active probe found the model (the upstream) answering, else 0.", []string{"model"}, nil)
	descUpstreamDown = prometheus.NewDesc("ratebatch_upstream_down",
		"1 while the upstream refuses connections (requests are held, the proxy is not ready), else 0.", nil, nil)
	descUnready = prometheus.NewDesc("ratebatch_upstream_unready",
		"1 while the upstream's state takes the proxy out of service (/readyz 503): it refuses connections, fails its health check, or every batched model is failing or not ready.", nil, nil)
)

// probeDescs are the series collectProbes exports.
var probeDescs = []*prometheus.Desc{descProbes, descProbeLast, descProbeLastOK, descUpstreamDown, descUnready}

// collectProbes exports the active probes and the upstream's state (part
// of Collector).
func (d *Dispatcher) collectProbes(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descUpstreamDown, prometheus.GaugeValue, gauge01(d.health.isDown.Load()))
	ch <- prometheus.MustNewConstMetric(descUnready, prometheus.GaugeValue, gauge01(d.Unready() != ""))
	p := d.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, n := range p.counts {
		ch <- prometheus.MustNewConstMetric(descProbes, prometheus.CounterValue, float64(n), k[0], k[1])
	}
	for model, r := range p.last {
		ch <- prometheus.MustNewConstMetric(descProbeLast, prometheus.GaugeValue, float64(r.At.UnixNano())/1e9, model)
		ch <- prometheus.MustNewConstMetric(descProbeLastOK, prometheus.GaugeValue, gauge01(r.OK), model)
	}
}
