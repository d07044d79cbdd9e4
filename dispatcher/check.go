package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/hostclient"
	"github.com/ratebatch/ratebatch/internal/triton"
)

// The active health check. Passive detection (health.go, outlier.go) and
// the probes (probe.go) learn of trouble from batches, so a Triton that
// dies while no client calls goes unseen: readiness stays green and the
// balancer keeps the pod. The check reads the upstream's own readiness
// (Triton's /v2/health/ready, then each batched model's
// /v2/models/M/ready) every HealthCheck.Interval, traffic or not, as
// Envoy's active health checks do for healthy hosts too. A refused
// connection marks the upstream down as a batch's would (the outage hold,
// the upstream's probes); an answer other than ready, or none within the
// check's timeout, takes the proxy out of service (Unready); a model the
// upstream calls not ready counts as out, and when every batched model is
// out the proxy is not ready either. Each change is logged: a WARN when it
// goes, an INFO when it comes back.

// Checker reads the upstream's readiness (package internal/triton's
// Client). Each read returns nil when the upstream says ready, a
// *triton.StatusError when it answers anything else, and another error
// when it does not answer.
type Checker interface {
	ServerReady(ctx context.Context) error
	ModelReady(ctx context.Context, model string) error
}

// HealthCheck configures the active health check.
type HealthCheck struct {
	Checker Checker
	// Interval is the pause between checks; 0 (or no Checker): off. Each
	// read's timeout is the interval, at least minCheckTimeout: a verdict
	// on a dead or hung upstream within two intervals.
	Interval time.Duration
}

// DefaultCheckInterval is the check's default interval, which config
// repeats as upstream_client.health_check_interval.
const DefaultCheckInterval = time.Second

const minCheckTimeout = 250 * time.Millisecond

func (c HealthCheck) on() bool { return c.Checker != nil && c.Interval > 0 }

func (c HealthCheck) timeout() time.Duration { return max(c.Interval, minCheckTimeout) }

// checks is what the last health checks found.
type checks struct {
	mu   sync.Mutex
	wg   sync.WaitGroup
	last time.Time // the last check's end; zero before the first
	// server is why the upstream's readiness check failed ("" when it
	// passed, or when the upstream refuses connections: its down state
	// says so).
	server string
	// models holds each batched model checked: "" ready, else why not.
	models map[string]string
}

// startChecks runs the check loop until the dispatcher closes (Drain).
func (d *Dispatcher) startChecks() {
	if !d.o.Check.on() {
		return
	}
	d.checks.wg.Go(func() { guard.Loop(d.ctx, d.o.Logger, "health_check", d.checkLoop) })
}

func (d *Dispatcher) checkLoop(ctx context.Context) {
	t := time.NewTicker(d.o.Check.Interval)
	defer t.Stop()
	for {
		d.checkOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkOnce reads the upstream's readiness, then, if it answered, each
// batched model's.
func (d *Dispatcher) checkOnce(ctx context.Context) {
	c := d.o.Check
	read := func(f func(context.Context) error) error {
		ctx, cancel := context.WithTimeout(ctx, c.timeout())
		defer cancel()
		return f(ctx)
	}
	err := read(c.Checker.ServerReady)
	if ctx.Err() != nil {
		return
	}
	answered := d.checkedServer(err)
	if answered {
		for _, name := range d.modelNames() {
			err := read(func(ctx context.Context) error { return c.Checker.ModelReady(ctx, name) })
			if ctx.Err() != nil {
				return
			}
			d.checkedModel(name, err)
		}
	}
	d.checks.mu.Lock()
	d.checks.last = d.now()
	d.checks.mu.Unlock()
}

// checkedServer records the upstream's readiness check and reports whether
// the upstream answered it.
func (d *Dispatcher) checkedServer(err error) (answered bool) {
	var se *triton.StatusError
	switch {
	case err == nil:
		d.reached()
		d.setServerCheck("", nil)
		return true
	case errors.As(err, &se):
		d.reached()
		d.setServerCheck("its readiness check answers "+answer(se), nil)
		return true
	case IsRefused(err):
		d.noteRefused(d.health.refused(), err)
		d.checks.mu.Lock()
		d.checks.server = "" // the down state speaks, and logs, for it
		d.checks.mu.Unlock()
		return false
	}
	// The reason reaches clients (the data port's readiness): the kind of
	// failure, not the upstream's address, which the log has.
	cause := hostclient.Cause(err)
	if errors.Is(err, context.DeadlineExceeded) {
		cause = "timed out"
	}
	d.setServerCheck(fmt.Sprintf("no answer to its readiness check within %v (%s)", d.o.Check.timeout(), cause), err)
	return false
}

// answer is an upstream's answer as a reason says it: its status, and its
// message when it gave one.
func answer(se *triton.StatusError) string {
	if se.Msg == "" {
		return fmt.Sprint(se.Status)
	}
	return fmt.Sprintf("%d: %s", se.Status, se.Msg)
}

// setServerCheck records why the upstream's readiness check failed ("":
// it passed) and logs the change when the verdict turns, with err, the
// failure in full (its address), when there is one.
func (d *Dispatcher) setServerCheck(why string, err error) {
	c := &d.checks
	c.mu.Lock()
	was := c.server
	c.server = why
	c.mu.Unlock()
	switch {
	case was == "" && why != "":
		d.o.Logger.Warn("upstream not ready: the proxy reports not ready until it is", "why", why, "err", err)
	case was != "" && why == "":
		d.o.Logger.Info("upstream ready again", "was", was)
	}
}

// checkedModel records a model's readiness check. No answer leaves the
// model's verdict alone: the upstream's check speaks for that.
func (d *Dispatcher) checkedModel(name string, err error) {
	var se *triton.StatusError
	why := ""
	switch {
	case err == nil:
	case errors.As(err, &se):
		why = "not ready upstream (" + answer(se) + ")"
	default:
		return
	}
	c := &d.checks
	c.mu.Lock()
	if c.models == nil {
		c.models = map[string]string{}
	}
	was, seen := c.models[name]
	c.models[name] = why
	c.mu.Unlock()
	switch {
	case was == "" && why != "":
		d.o.Logger.Warn("model not ready upstream: its calls are passed on, and when no batched model is ready the proxy is not either", "model", name, "why", why)
	case seen && was != "" && why == "":
		d.o.Logger.Info("model ready upstream again", "model", name)
	}
}

// modelNames are the batched models, sorted.
func (d *Dispatcher) modelNames() []string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return slices.Sorted(maps.Keys(d.models))
}

// modelNotReady is why the last check found model not ready upstream, ""
// when it did not.
func (c *checks) modelNotReady(model string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.models[model]
}

// serverNotReady is why the last check found the upstream not ready, ""
// when it did not.
func (c *checks) serverNotReady() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.server
}

// CheckStatus is what the active health check found, for /status.
type CheckStatus struct {
	IntervalMs float64    `json:"interval_ms"`
	Last       *time.Time `json:"last,omitempty"`
	// NotReady is why the upstream failed its last check, if it did.
	NotReady string `json:"not_ready,omitempty"`
	// ModelsNotReady are the batched models the upstream calls not ready,
	// each with why.
	ModelsNotReady map[string]string `json:"models_not_ready,omitempty"`
}

// checkStatus is the check's state; nil when it is off.
func (d *Dispatcher) checkStatus() *CheckStatus {
	if !d.o.Check.on() {
		return nil
	}
	c := &d.checks
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &CheckStatus{IntervalMs: float64(d.o.Check.Interval.Microseconds()) / 1000, NotReady: c.server}
	if !c.last.IsZero() {
		last := c.last
		s.Last = &last
	}
	for m, why := range c.models {
		if why != "" {
			if s.ModelsNotReady == nil {
				s.ModelsNotReady = map[string]string{}
			}
			s.ModelsNotReady[m] = why
		}
	}
	return s
}

var (
	descUpstreamReady = prometheus.NewDesc("ratebatch_upstream_ready",
		"1 if the upstream passed its last active health check (/v2/health/ready answered 200), else 0; absent with the check off or before its first.", nil, nil)
	descModelReady = prometheus.NewDesc("ratebatch_upstream_model_ready",
		"1 if the upstream called the batched model ready at the last active health check (/v2/models/M/ready answered 200), else 0; absent with the check off.", []string{"model"}, nil)
)

// checkDescs are the series collectChecks exports.
var checkDescs = []*prometheus.Desc{descUpstreamReady, descModelReady}

// collectChecks exports what the health checks found (part of Collector).
func (d *Dispatcher) collectChecks(ch chan<- prometheus.Metric) {
	c := &d.checks
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(descUpstreamReady, prometheus.GaugeValue, gauge01(c.server == "" && !d.health.isDown.Load()))
	for m, why := range c.models {
		ch <- prometheus.MustNewConstMetric(descModelReady, prometheus.GaugeValue, gauge01(why == ""), m)
	}
}
