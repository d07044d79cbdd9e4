package dispatcher

import (
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/kserve"
)

// Outlier configures passive outlier detection per model, as Envoy's
// outlier detection and Caddy's passive health checks do it: no extra
// traffic, only the batches' own outcomes. The outage hold (Options.Hold)
// handles an upstream that refuses connections; this handles one that
// answers, but wrongly (5xx to every batch: a crashed backend, a lost GPU)
// or not at all (a hung batch).
type Outlier struct {
	// ConsecutiveErrors is how many batches in a row failing with a server
	// error (an upstream 502, 503, 504, a timeout, a malformed answer) mark
	// the model failing. A member's own bad input (4xx) and connection
	// errors (the outage hold's) do not count, nor does Triton's 500 with a
	// message, which may be one request's (a merged batch that gets it is
	// split, and only its failing members fail): that many batches in a
	// row whose every caller got one send the model's probe inference,
	// whose failure marks the model failing (endBatch). 0: off.
	ConsecutiveErrors int
	// A batch whose upstream call runs longer than HungFactor times the
	// model's predicted tau(b), and at least HungMin, marks the model
	// failing at once: its queued callers get 503 instead of waiting on a
	// hung GPU until the upstream timeout. Only after the model has
	// answered a batch (a cold start may be slow), and not while the
	// upstream is down (the outage hold's). HungFactor 0: off.
	HungFactor float64
	HungMin    time.Duration
	// ProbeInterval is the pause after a failed probe before the next: while
	// a model fails, one batch at a time (the probe) tests it, and the
	// callers that would wait for it get 503 at once.
	ProbeInterval time.Duration
}

// Defaults of Outlier, which config repeats as upstream_client.*.
const (
	DefaultConsecutiveErrors = 5
	DefaultHungFactor        = 10
	DefaultHungMin           = 2 * time.Second
	DefaultProbeInterval     = time.Second
)

// Predictor is what a Planner may also offer: its predicted round trip of
// a batch of rows (package monitor's fit of tau(b)). Hung batches are
// judged by it; without it by Outlier.HungMin alone.
type Predictor interface {
	Predict(rows int) time.Duration
}

// modelHealth is one model's outlier state, under its queue's lock.
type modelHealth struct {
	consecutive int
	failing     bool
	reason      string
	since       time.Time
	nextProbe   time.Time
	probing     bool // the probe batch is in flight
	answered    bool // a batch was answered once: hung detection is armed
	suspects    int  // suspect batches in a row (endBatch)
}

// faultError is an error the upstream is to blame for (its 5xx, a timeout,
// an answer that does not decode): the outlier detector counts it. It is
// the *kserve.Error the caller gets, unchanged. member marks Triton's 500
// with a message of its own: what a backend answers for one request it
// cannot serve (a Python backend's TritonError) as much as what a sick
// model answers to all, so a merged batch that gets it is split (split)
// and the model is blamed only when the split and a probe say so
// (endBatch).
type faultError struct {
	err    *kserve.Error
	kind   string
	member bool
}

func (e *faultError) Error() string { return e.err.Error() }
func (e *faultError) Unwrap() error { return e.err }

func fault(kind string, err *kserve.Error) error { return &faultError{err: err, kind: kind} }

// verdict is what a batch's answers say of its model.
type verdict int

const (
	// neutral: nothing about the model (connection errors, the hold's
	// 503s, a panic).
	neutral verdict = iota
	// healthy: the upstream answered a caller properly (200, or a 4xx of
	// its own input).
	healthy
	// suspect: every caller failed with a 500 that may be its own (a
	// faultError's member): a sick model, or callers that are all bad.
	suspect
	// faulty: a caller got a server's error (a 502, 503 or 504, another
	// 5xx without Triton's message, a timeout, a malformed answer).
	faulty
)

// outcome classifies a batch by its callers' results: faulty when any
// caller got a server's error (whole batches fail together), else healthy
// when the upstream answered any caller properly, else suspect when a 500
// of Triton's own words is all the callers got, else neutral.
func outcome(results []Result) (v verdict, faultKind string) {
	for _, r := range results {
		if r.Err == nil {
			v = healthy
			continue
		}
		var fe *faultError
		if errors.As(r.Err, &fe) {
			if !fe.member {
				return faulty, fe.kind
			}
			if v == neutral {
				v, faultKind = suspect, fe.kind
			}
			continue
		}
		if s := kserve.ErrorStatus(r.Err); s >= 400 && s < 500 {
			v = healthy
		}
	}
	return v, faultKind
}

// memberError reports whether err, a merged batch's upstream error with
// the upstream's HTTP status, may belong to one of its members: a 4xx, or
// Triton's 500 with a message (faultError.member). Such a batch is split.
// Not a refusal of who may call or of what is called (401, 403, 404):
// the members share their credentials and their model (their key says
// so), so each would hear the same.
func memberError(status int, err error) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return false
	}
	if status >= 400 && status < 500 {
		return true
	}
	var fe *faultError
	return status == http.StatusInternalServerError && errors.As(err, &fe) && fe.member
}

// admitFailing is enqueue's check while the model fails, with q.mu held:
// a call is admitted only to form the next probe (nothing in flight or
// queued, the probe interval over); the others get a prompt 503.
func (q *modelQueue) admitFailing(now time.Time) error {
	h := &q.health
	if !h.failing || (!h.probing && q.inFlight == 0 && q.rows == 0 && !now.Before(h.nextProbe)) {
		return nil
	}
	return q.failingError()
}

// failingError is the 503 of a call refused or dropped while the model
// fails. Called with q.mu held.
func (q *modelQueue) failingError() error {
	return &kserve.Error{Status: http.StatusServiceUnavailable,
		Msg: fmt.Sprintf("model '%s' is failing upstream (%s); retry later", q.name, q.health.reason)}
}

// startBatch is a batch's check as it is about to be sent: while the model
// fails it goes as the probe if none is out, else its callers get 503
// without an upstream call (err set). probe reports the role.
func (q *modelQueue) startBatch() (probe bool, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := &q.health
	if !h.failing {
		return false, nil
	}
	if h.probing {
		return false, q.failingError()
	}
	h.probing = true
	return true, nil
}

// endBatch records a batch's outcome. A faulty batch counts towards
// Outlier.ConsecutiveErrors; a suspect one (every caller failed with a
// 500 in Triton's words, the split finding no member it could answer)
// proves nothing alone, since a stream of bad requests looks the same:
// that many suspect batches in a row send the model's probe inference (a
// request it accepts, ModelSpec.Probe), and only its failure too marks
// the model failing (verify).
func (q *modelQueue) endBatch(probe bool, results []Result) {
	o := q.d.o.Outlier
	v, kind := outcome(results)
	q.mu.Lock()
	defer q.mu.Unlock()
	h := &q.health
	if probe {
		h.probing = false
	}
	now := q.d.now()
	switch v {
	case faulty:
		h.consecutive++
		if h.failing {
			h.nextProbe = now.Add(o.ProbeInterval)
		} else if o.ConsecutiveErrors > 0 && h.consecutive >= o.ConsecutiveErrors {
			q.markFailing(now, fmt.Sprintf("%d batches in a row failed: %s", h.consecutive, kind), "errors")
		}
	case suspect:
		h.suspects++
		if h.failing {
			h.nextProbe = now.Add(o.ProbeInterval)
		} else if o.ConsecutiveErrors > 0 && h.suspects >= o.ConsecutiveErrors {
			q.verify()
		}
	case healthy:
		h.answered = true
		h.consecutive, h.suspects = 0, 0
		if h.failing {
			h.failing, h.reason = false, ""
			q.d.o.Logger.Info("model recovered: its probe batch was answered", "model", q.name, "failing_for", now.Sub(h.since))
		}
	}
}

// verify sends the model's probe inference once, on its own goroutine,
// after suspect batches in a row: its failure marks the model failing,
// its answer clears the suspicion (the callers' requests were bad, not
// the model). A model without a probe is never marked failing on suspect
// batches: its callers get Triton's own answers. Called with q.mu held.
func (q *modelQueue) verify() {
	if q.spec.Probe.Body == nil {
		return
	}
	body, timeout, key := q.spec.Probe, q.probeTimeout(), "verify "+q.name
	p := q.d.probes
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start(q.d, key, func() {
		res, report := q.d.sendProbe(q.name, body, timeout)
		q.d.probes.record(q.name, report)
		v, _ := outcome([]Result{res})
		q.mu.Lock()
		defer q.mu.Unlock()
		p.mu.Lock()
		p.done(key)
		p.mu.Unlock()
		h := &q.health
		switch {
		case v == faulty && !h.failing:
			q.markFailing(q.d.now(), fmt.Sprintf("%d batches in a row failed with the upstream's 500 and so did the probe inference (%s)",
				h.suspects, report.Detail), "errors")
		case v == healthy:
			h.suspects = 0
		}
	})
}

// markFailing marks the model failing and answers its queued callers 503
// at once. Called with q.mu held.
func (q *modelQueue) markFailing(now time.Time, reason, metric string) {
	h := &q.health
	h.failing, h.reason, h.since = true, reason, now
	h.nextProbe = now.Add(q.d.o.Outlier.ProbeInterval)
	q.d.o.Metrics.Ejections.WithLabelValues(q.name, metric).Inc()
	q.d.o.Logger.Warn("model marked failing: queued callers get 503, one probe batch at a time tests it", "model", q.name, "reason", reason)
	q.startProbing()
	err := q.failingError()
	for key, k := range q.keys {
		calls, rows := k.take(int(^uint(0)>>1), nil)
		q.rows -= rows
		for _, c := range calls {
			q.d.o.Metrics.rejected(q.name, "model_failing")
			q.deliver(c, Result{Err: err, Queued: now.Sub(c.arrived)})
		}
		delete(q.keys, key)
	}
}

// watchHung arms the hung-batch timer of a batch of rows sent now, if
// outlier detection judges hung batches; stop disarms it.
//
// It stays one function: the timer and the closure it runs share the batch's
// state.
func (q *modelQueue) watchHung(b *batch) (stop func() bool) {
	o := q.d.o.Outlier
	if o.HungFactor <= 0 {
		return nil
	}
	q.mu.Lock()
	armed := q.health.answered && !q.health.failing
	q.mu.Unlock()
	if !armed {
		return nil
	}
	bound := o.HungMin
	if p, ok := b.planner.(Predictor); ok {
		bound = max(bound, time.Duration(o.HungFactor*float64(p.Predict(b.Rows))))
	}
	var (
		stopped atomic.Bool
		timer   atomic.Pointer[time.Timer]
		fire    func()
		// start is when the batch's run began: its send, or, once it was
		// seen held, the first look after the outage. Only fire touches
		// it after this function returns, one timer at a time.
		start = q.d.now()
		held  bool
	)
	fire = func() {
		// The timer's own goroutine: a panic here would end the process
		// and every caller with it; a lost verdict costs only this batch's.
		defer func() {
			if v := recover(); v != nil {
				guard.Recovered(q.d.o.Logger, "hung watch", v)
			}
		}()
		if stopped.Load() {
			return
		}
		if q.d.health.isDown.Load() {
			// Held for an upstream that refuses connections: the outage
			// hold's business, not a hung GPU. Look again later.
			held = true
			timer.Store(time.AfterFunc(bound, fire))
			return
		}
		if held {
			// The outage ended within the last bound: the batch's run
			// begins now, and gets a whole bound (CI saw a batch marked
			// hung 206 ms after its send, its hold counted as its run).
			held, start = false, q.d.now()
			timer.Store(time.AfterFunc(bound, fire))
			return
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		if !q.health.failing {
			q.markFailing(q.d.now(), fmt.Sprintf("a batch of %d rows has run %v, over %v", b.Rows,
				q.d.now().Sub(start).Round(time.Millisecond), bound.Round(time.Millisecond)), "hung")
		}
	}
	timer.Store(time.AfterFunc(bound, fire))
	return func() bool {
		stopped.Store(true)
		return timer.Load().Stop()
	}
}

// Failing reports whether model is marked failing, and why.
func (d *Dispatcher) Failing(model string) (failing bool, reason string) {
	d.mu.RLock()
	q, ok := d.models[model]
	d.mu.RUnlock()
	if !ok {
		return false, ""
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.health.failing, q.health.reason
}

// UpstreamFailing reports whether every batched model is marked failing:
// the upstream as a whole is then taken for sick, and the proxy reports
// not ready.
func (d *Dispatcher) UpstreamFailing() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if len(d.models) == 0 {
		return false
	}
	for _, q := range d.models {
		q.mu.Lock()
		f := q.health.failing
		q.mu.Unlock()
		if !f {
			return false
		}
	}
	return true
}
