package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/kserve"
)

// execute sends one batch and answers each of its callers, telling the
// model's observers of its start and end.
func (q *modelQueue) execute(b *batch) {
	for _, c := range b.Calls {
		q.series.queueWait.Observe(b.Formed.Sub(c.arrived).Seconds())
	}
	q.series.batchSize.Observe(float64(b.Rows))

	// The observers are other packages' code on the batch's way: a panic
	// there is contained (contain), and the batch and its callers go on.
	b.Ctx = context.Background()
	if b.obs != nil {
		b.Started = q.d.now()
		q.contain("observe", func() { b.obs.BatchStarted(&b.Batch) })
	}
	var (
		results []Result
		latency time.Duration
		ok      bool
	)
	probe, failing := q.startBatch()
	if failing != nil {
		// The model fails and its probe is out: a prompt 503, no upstream call.
		results = make([]Result, len(b.Calls))
		for i := range results {
			results[i] = Result{Err: failing}
		}
		q.d.o.Metrics.rejected(q.name, "model_failing")
	} else {
		stop := q.watchHung(b)
		results, latency, ok = q.sendContained(b)
		if stop != nil {
			stop()
		}
		q.endBatch(probe, results)
	}
	if ok {
		q.series.upstream.Observe(latency.Seconds())
	}
	end := BatchEnd{Rows: b.Rows, Calls: len(b.Calls), OK: ok}
	for i, c := range b.Calls {
		if results[i].Err == nil {
			end.Served += c.Rows
		}
	}
	// The callers' connections are free to send again from here: a
	// decision from now on counts them as partners that may come.
	q.freeSources(b.Calls)
	var answered time.Time
	learn := ok && b.obs != nil
	if learn {
		answered = q.d.now()
	}
	for i, c := range b.Calls {
		r := results[i]
		r.Queued = b.Formed.Sub(c.arrived)
		r.BatchRows = b.Rows
		if learn {
			r.obs, r.model, r.answered, r.calls = b.obs, q.name, answered, len(b.Calls)
		}
		q.deliver(c, r)
	}
	// The callers have their answers and may reuse their calls.
	b.Calls = nil

	q.mu.Lock()
	q.inFlight--
	q.inFlightRows -= b.Rows
	q.mu.Unlock()
	if b.obs == nil {
		return
	}
	end.At = q.d.now()
	if ok {
		// The instance was the batch's from its forming to here: what the
		// round trip does not cover held it too.
		end.RoundTrip, end.Hold = latency, max(end.At.Sub(b.Formed)-latency, 0)
	}
	q.contain("observe", func() { b.obs.BatchEnded(&b.Batch, end) })
	// No signal: the caller that ran the batch decides next (afterOwnBatch).
}

// sendContained is send with its panics contained: a panic (a codec bug
// hit by a merge, a split or an upstream's answer) fails this batch's
// callers with a 500 and nothing else; the batch runner goes on to answer
// them and free the instance as after any failure.
func (q *modelQueue) sendContained(b *batch) (results []Result, latency time.Duration, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			err := &kserve.Error{Status: http.StatusInternalServerError,
				Msg: guard.Recovered(q.d.o.Logger, "batch", v).Error()}
			results = make([]Result, len(b.Calls))
			for i := range results {
				results[i] = Result{Err: err}
			}
			latency, ok = 0, false
		}
	}()
	if hook := testHookSend.Load(); hook != nil {
		(*hook)(q.name, b.Calls)
	}
	return q.send(b)
}

// contain runs f, recovering and counting a panic of it under site.
func (q *modelQueue) contain(site string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			guard.Recovered(q.d.o.Logger, site, v)
		}
	}()
	f()
}

// testHookSend, set only by tests, runs as each batch is about to be sent:
// tests make it panic. An atomic pointer: tests set it while batches run.
var testHookSend atomic.Pointer[func(model string, calls []*Call)]

// send runs a batch upstream: connection errors are retried as configured
// and held out while the upstream is down (see attempt); when the upstream
// rejects a batch of several callers as a bad request, each caller goes
// again on its own, at most the model's instance limit at once, so that
// only the bad one fails. ok reports a whole-batch success, whose latency
// teaches the monitor.
func (q *modelQueue) send(b *batch) (results []Result, latency time.Duration, ok bool) {
	calls := b.Calls
	version := calls[0].Version
	if len(calls) == 1 {
		results, latency, status := q.sendAlone(b.Ctx, version, calls[0], b.halfOutputs)
		return results, latency, status == http.StatusOK
	}
	var bad []error
	for i, c := range calls {
		if err := c.readData(); err != nil {
			if bad == nil {
				bad = make([]error, len(calls))
			}
			bad[i] = err
		}
	}
	if bad != nil {
		return q.sendWithout(b, bad), 0, false
	}
	reqs := make([]*kserve.Request, len(calls))
	for i, c := range calls {
		reqs[i] = c.Req
	}
	results, latency, status := q.sendMerged(b.Ctx, version, reqs, q.holdUntil(calls...))
	if status == http.StatusBadRequest {
		q.d.o.Metrics.UpstreamErrors.WithLabelValues(q.name, "bad_member_retry").Inc()
		q.resendEach(b, results)
		return results, 0, false
	}
	return results, latency, status == http.StatusOK
}

// resendEach sends each of a refused batch's callers alone, at most the
// batch's instance limit at once, putting their answers in results.
func (q *modelQueue) resendEach(b *batch, results []Result) {
	slots := make(chan struct{}, max(b.instances, 1))
	var wg sync.WaitGroup
	for i, c := range b.Calls {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			defer func() { // this goroutine's panic would end the process
				if v := recover(); v != nil {
					results[i] = Result{Err: &kserve.Error{Status: http.StatusInternalServerError,
						Msg: guard.Recovered(q.d.o.Logger, "batch_resend", v).Error()}}
				}
			}()
			rs, _, _ := q.sendAlone(b.Ctx, c.Version, c, b.halfOutputs)
			results[i] = rs[0]
		})
	}
	wg.Wait()
}

// sendWithout answers the calls whose data does not decode (bad[i] set)
// with their error and sends the others as a batch of their own. The batch
// is not the one the planner counted, so it teaches the monitor nothing.
func (q *modelQueue) sendWithout(b *batch, bad []error) []Result {
	results := make([]Result, len(b.Calls))
	good := *b
	good.Calls, good.Rows = make([]*Call, 0, len(b.Calls)), 0
	for i, c := range b.Calls {
		if bad[i] != nil {
			results[i] = Result{Err: bad[i]}
			continue
		}
		good.Calls = append(good.Calls, c)
		good.Rows += c.Rows
	}
	if len(good.Calls) == 0 {
		return results
	}
	sent, _, _ := q.send(&good)
	for i := range results {
		if bad[i] == nil {
			results[i], sent = sent[0], sent[1:]
		}
	}
	return results
}

// sendAlone sends a batch of one call: as it came when it came over HTTP
// in a form Triton reads and answers as asked (kserve.HalfInJSON), else
// merged from its decoded request.
func (q *modelQueue) sendAlone(ctx context.Context, version string, c *Call, halfOutputs []string) ([]Result, time.Duration, int) {
	if c.Wire.Body != nil && !c.Req.HalfInJSON(halfOutputs) {
		return q.sendWire(ctx, version, c, q.holdUntil(c))
	}
	if err := c.readData(); err != nil {
		return []Result{{Err: err}}, 0, 0
	}
	return q.sendMerged(ctx, version, []*kserve.Request{c.Req}, q.holdUntil(c))
}

// holdUntil is how long calls may wait for an upstream that is down: the
// earliest of their deadlines, each the earlier of its Expire and its
// arrival plus Options.Hold. Zero means no hold.
func (q *modelQueue) holdUntil(calls ...*Call) time.Time {
	var until time.Time
	for _, c := range calls {
		d := c.Expire
		if h := c.arrived.Add(q.d.o.Hold); q.d.o.Hold > 0 && (d.IsZero() || h.Before(d)) {
			d = h
		}
		if d.IsZero() {
			return time.Time{}
		}
		if until.IsZero() || d.Before(until) {
			until = d
		}
	}
	return until
}

// sendMerged merges reqs, posts them and splits the answer. status is the
// upstream's HTTP status, or 0 when there was none.
func (q *modelQueue) sendMerged(ctx context.Context, version string, reqs []*kserve.Request, holdUntil time.Time) ([]Result, time.Duration, int) {
	name := q.name
	failAll := func(err error) []Result {
		out := make([]Result, len(reqs))
		for i := range out {
			out[i] = Result{Err: err}
		}
		return out
	}
	b, err := kserve.MergeSameKey(reqs) // the queue holds one key only
	if err != nil {
		return failAll(&kserve.Error{Status: http.StatusInternalServerError, Msg: "forming the batch: " + err.Error()}), 0, 0
	}
	reply, latency, status, err := q.post(ctx, version, b, holdUntil)
	if err != nil {
		return failAll(err), latency, status
	}
	fail := func(format string, err error) ([]Result, time.Duration, int) {
		reply.Free()
		q.d.o.Metrics.UpstreamErrors.WithLabelValues(name, "bad_response").Inc()
		return failAll(fault("bad_response", &kserve.Error{Status: http.StatusBadGateway, Msg: fmt.Sprintf(format, name, err)})), 0, 0
	}
	resp, err := kserve.DecodeResponse(reply.Body, reply.HeaderLen)
	if err != nil {
		return fail("upstream's answer for model '%s' is malformed: %v", err)
	}
	parts, err := b.Split(resp)
	if err != nil {
		return fail("upstream's answer for model '%s' does not fit the batch: %v", err)
	}
	sh := &shared{free: reply.Free}
	sh.refs.Store(int32(len(parts)))
	out := make([]Result, len(parts))
	for i, p := range parts {
		out[i] = Result{Resp: p, release: sh}
	}
	return out, latency, http.StatusOK
}

// sendWire posts a lone call's request as it came and hands it the
// upstream's answer as it came: what the caller would have had from Triton
// directly, without merging or splitting.
func (q *modelQueue) sendWire(ctx context.Context, version string, c *Call, holdUntil time.Time) ([]Result, time.Duration, int) {
	var body Body = wireBody{&c.Wire}
	if c.CopyTurn != nil {
		tb := &turnBody{w: &c.Wire, turn: c.CopyTurn}
		defer tb.done()
		body = tb
	}
	reply, latency, status, err := q.post(ctx, version, body, holdUntil)
	if err != nil {
		return []Result{{Err: err}}, latency, status
	}
	a := &wireAnswer{shared: shared{free: reply.Free}, wire: Wire{Body: reply.Body, HeaderLen: reply.HeaderLen}}
	a.refs.Store(1)
	a.results[0] = Result{Wire: &a.wire, release: &a.shared}
	return a.results[:], latency, http.StatusOK
}

// wireAnswer is a lone caller's answer, its release and the one-element
// results that carry it, in one allocation.
type wireAnswer struct {
	shared
	wire    Wire
	results [1]Result
}

// post sends a batch's body upstream (see attempt) and returns its answer
// when the status is 200. Otherwise err is the *kserve.Error each of the
// batch's callers gets, and status the upstream's HTTP status (0 when
// there was none).
func (q *modelQueue) post(ctx context.Context, version string, body Body, holdUntil time.Time) (reply *Reply, latency time.Duration, status int, err error) {
	name := q.name
	m := q.d.o.Metrics
	fail := func(status int, format string, args ...any) (*Reply, time.Duration, int, error) {
		return nil, latency, 0, &kserve.Error{Status: status, Msg: fmt.Sprintf(format, args...)}
	}
	reply, latency, err = q.attempt(ctx, version, body, holdUntil)
	switch {
	case errors.Is(err, ErrUpstreamTimeout):
		m.UpstreamErrors.WithLabelValues(name, "timeout").Inc()
		return nil, latency, 0, fault("timeout", &kserve.Error{Status: http.StatusGatewayTimeout,
			Msg: fmt.Sprintf("upstream did not answer model '%s' in time", name)})
	case errors.Is(err, errUpstreamDown):
		m.UpstreamErrors.WithLabelValues(name, "connection").Inc()
		return fail(http.StatusServiceUnavailable, "upstream for model '%s' is down: %v", name, err)
	case err != nil:
		m.UpstreamErrors.WithLabelValues(name, "connection").Inc()
		return fail(http.StatusBadGateway, "upstream unreachable for model '%s': %v", name, err)
	}
	if reply.Status != http.StatusOK {
		defer reply.Free()
		m.UpstreamErrors.WithLabelValues(name, "status_"+statusClass(reply.Status)).Inc()
		msg, ok := kserve.ParseErrorBody(reply.Body)
		if !ok {
			msg = fmt.Sprintf("upstream answered %d for model '%s'", reply.Status, name)
		}
		q.unknownModel(msg)
		if reply.Status >= 500 {
			return nil, latency, reply.Status, fault("status_5xx", &kserve.Error{Status: reply.Status, Msg: msg})
		}
		return nil, latency, reply.Status, &kserve.Error{Status: reply.Status, Msg: msg}
	}
	return reply, latency, http.StatusOK, nil
}

// connError finds the *ConnError in err's chain. It is a function of its
// own because errors.As moves its target to the heap: here that happens
// only for an error, not for every batch.
func connError(err error) (*ConnError, bool) {
	if err == nil {
		return nil, false
	}
	var ce *ConnError
	return ce, errors.As(err, &ce)
}

func statusClass(s int) string {
	switch {
	case s >= 500:
		return "5xx"
	case s >= 400:
		return "4xx"
	}
	return "other"
}

// errUpstreamDown ends a batch held past its deadline for an upstream that
// refuses connections: its callers get a 503, as for any unavailable
// service, rather than the 502 of a connection that broke.
var errUpstreamDown = errors.New("refusing connections")

// attempt posts a merged batch until the upstream answers. A connection
// error is retried up to Options.Retries times after a jittered pause. A
// connection that cannot be made marks the upstream down, and while it is
// down the batch does not give up at its retries but is held until
// holdUntil: one held batch at a time tries the upstream (the probe), the
// others wait for its outcome, and all resume once it answers. Past
// holdUntil a batch that cannot reach the upstream fails at once with
// errUpstreamDown. latency is the last attempt's.
func (q *modelQueue) attempt(ctx context.Context, version string, b Body, holdUntil time.Time) (reply *Reply, latency time.Duration, err error) {
	h, m, name := q.d.health, q.d.o.Metrics, q.name
	held := func() bool { return q.d.now().Before(holdUntil) }
	probe := false // this batch holds the probe role
	giveUp := func(err error) (*Reply, time.Duration, error) {
		if probe {
			h.release()
		}
		return nil, latency, err
	}
	for retries, failures := 0, 0; ; {
		if !probe {
			var send bool
			var wait <-chan struct{}
			if send, probe, wait = h.admit(); !send {
				// Another batch is probing the down upstream: wait for its
				// outcome, or give up at the deadline without a try.
				if !held() {
					return giveUp(fmt.Errorf("%w (not back within the caller's deadline)", errUpstreamDown))
				}
				t := time.NewTimer(holdUntil.Sub(q.d.now()))
				select {
				case <-wait:
				case <-t.C:
				case <-q.d.ctx.Done():
					t.Stop()
					return giveUp(fmt.Errorf("%w (proxy shutting down)", errUpstreamDown))
				}
				t.Stop()
				continue
			}
		}
		start := q.d.now()
		reply, err = q.d.o.Upstream.Infer(ctx, name, version, b)
		latency = q.d.now().Sub(start)
		ce, isConn := connError(err)
		if !isConn {
			h.reached() // an answer, or a timeout of a request it took
			return reply, latency, err
		}
		failures++
		if ce.Dial {
			down := h.refused()
			if down {
				m.UpstreamErrors.WithLabelValues(name, "marked_down").Inc()
			}
			q.d.noteRefused(down, ce)
		}
		if probe && !ce.Dial {
			// The connection was made and then broke: the upstream is
			// there or coming up. Let the next batch's try tell.
			h.release()
			probe = false
		}
		switch {
		case ce.Dial && held():
			m.UpstreamErrors.WithLabelValues(name, "held").Inc()
		case retries < q.d.o.Retries:
			retries++
			m.UpstreamErrors.WithLabelValues(name, "connection_retry").Inc()
		case ce.Dial:
			return giveUp(fmt.Errorf("%w: %v", errUpstreamDown, err))
		default:
			return giveUp(err)
		}
		pause := backoff(q.d.o.RetryBackoff, failures)
		if ce.Dial && !holdUntil.IsZero() {
			pause = min(pause, max(holdUntil.Sub(q.d.now()), 0))
		}
		if !sleep(q.d.ctx, pause) {
			return giveUp(fmt.Errorf("%w (proxy shutting down)", errUpstreamDown))
		}
	}
}
