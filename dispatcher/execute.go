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
	"github.com/ratebatch/ratebatch/internal/hostclient"
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
	results, latency, ok := q.results(b)
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
	q.answer(b, results, ok)

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

// results sends the batch upstream, watched for a hang, and returns each
// call's result, the round trip and whether the upstream answered it all;
// unless the model fails and its probe is out: then each call's result is
// a prompt 503, with no upstream call.
func (q *modelQueue) results(b *batch) (results []Result, latency time.Duration, ok bool) {
	probe, failing := q.startBatch()
	if failing != nil {
		results = make([]Result, len(b.Calls))
		for i := range results {
			results[i] = Result{Err: failing}
		}
		q.d.o.Metrics.rejected(q.name, "model_failing")
		return results, 0, false
	}
	stop := q.watchHung(b)
	results, latency, ok = q.sendContained(b)
	if stop != nil {
		stop()
	}
	q.endBatch(probe, results)
	return results, latency, ok
}

// answer delivers each caller its result, with what the observers learn
// of it when the upstream answered the batch (ok), and then drops the
// calls: the callers have their answers and may reuse them.
func (q *modelQueue) answer(b *batch, results []Result, ok bool) {
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
	b.Calls = nil
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
// fails a batch of several callers with an error that may be one member's
// (memberError: a 4xx, Triton's 500 with a message), the batch is split
// until each error is its own caller's (split). ok reports a whole-batch
// success, whose latency teaches the monitor.
func (q *modelQueue) send(b *batch) (results []Result, latency time.Duration, ok bool) {
	calls := b.Calls
	if len(calls) == 1 {
		results, latency, status := q.sendAlone(b.Ctx, calls[0], b.halfOutputs)
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
	results, latency, status := q.sendPart(b, calls)
	if memberError(status, results[0].Err) {
		q.d.o.Metrics.UpstreamErrors.WithLabelValues(q.name, "bad_member_retry").Inc()
		q.split(b, results)
		// The parts' round trips are not the batch the plan sent: they
		// teach the monitor nothing (as sendWithout's batch).
		return results, 0, false
	}
	return results, latency, status == http.StatusOK
}

// sendPart sends some of a batch's calls as one request: a lone call as
// it came (sendAlone), several merged. status is the upstream's HTTP
// status, 0 when there was none.
func (q *modelQueue) sendPart(b *batch, calls []*Call) ([]Result, time.Duration, int) {
	if len(calls) == 1 {
		return q.sendAlone(b.Ctx, calls[0], b.halfOutputs)
	}
	reqs := make([]*kserve.Request, len(calls))
	for i, c := range calls {
		reqs[i] = c.Req
	}
	return q.sendMerged(q.exchangeOf(b.Ctx, calls), reqs)
}

// split finds the members of a batch whose upstream error may be one
// member's own, as Triton's batcher would have answered them: each caller
// alone. It bisects: both halves go again, at most the batch's instance
// limit of requests at once, and each half that fails with such an error
// again is halved in the next round, until its parts are single callers,
// who then have Triton's own answer to their own request. A half answered
// is its callers' answer; a half failing with the server's error is its
// callers' error (the model's, as for any batch). One bad caller among n
// costs 2*log2(n) extra round trips in log2(n) rounds, and every caller
// bad at most 2(n-1), the halves of a whole binary tree: the bound holds
// by construction, and no good caller keeps a neighbour's error. results
// holds the batch's answers, which split replaces.
func (q *modelQueue) split(b *batch, results []Result) {
	parts := halves(nil, span{0, len(b.Calls)})
	for len(parts) > 0 {
		statuses := q.sendParts(b, parts, results)
		next := parts[len(parts):] // the round's parts are read first: append after them
		for i, p := range parts {
			if p.hi-p.lo > 1 && memberError(statuses[i], results[p.lo].Err) {
				next = halves(next, p)
			}
		}
		parts = next
	}
}

// span is the calls lo to hi (exclusive) of a batch being split.
type span struct{ lo, hi int }

// halves appends p's two halves to dst.
func halves(dst []span, p span) []span {
	mid := (p.lo + p.hi) / 2
	return append(dst, span{p.lo, mid}, span{mid, p.hi})
}

// sendParts sends each part of a batch being split, at most the batch's
// instance limit at once, putting their answers in results, and returns
// each part's upstream status.
func (q *modelQueue) sendParts(b *batch, parts []span, results []Result) []int {
	statuses := make([]int, len(parts))
	slots := make(chan struct{}, max(b.instances, 1))
	var wg sync.WaitGroup
	for i, p := range parts {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			defer func() { // this goroutine's panic would end the process
				if v := recover(); v != nil {
					err := &kserve.Error{Status: http.StatusInternalServerError,
						Msg: guard.Recovered(q.d.o.Logger, "batch_split", v).Error()}
					for j := p.lo; j < p.hi; j++ {
						results[j] = Result{Err: err}
					}
				}
			}()
			rs, _, status := q.sendPart(b, b.Calls[p.lo:p.hi])
			copy(results[p.lo:p.hi], rs)
			statuses[i] = status
		})
	}
	wg.Wait()
	return statuses
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
func (q *modelQueue) sendAlone(ctx context.Context, c *Call, halfOutputs []string) ([]Result, time.Duration, int) {
	x := q.exchangeOf(ctx, []*Call{c})
	if c.Wire.Body != nil && !c.Req.HalfInJSON(halfOutputs) {
		return q.sendWire(x, c)
	}
	if err := c.readData(); err != nil {
		return []Result{{Err: err}}, 0, 0
	}
	return q.sendMerged(x, []*kserve.Request{c.Req})
}

// exchange is what an upstream request for some of a batch's calls needs
// besides its body: the batch's context (Batch.Ctx), the model version,
// how long the calls may be held for an upstream that is down, and what
// the request carries (Outgoing).
type exchange struct {
	ctx       context.Context
	version   string
	holdUntil time.Time
	out       Outgoing
}

// exchangeOf is the exchange of a request for calls, which share a batch
// key (and so a version and forwarded headers). Its Until is the latest
// of their contexts' deadlines, or none when one has none: a request is
// given up only once none of its callers waits for it. A lone call's
// traceparent goes with it; a merged request is no one caller's.
func (q *modelQueue) exchangeOf(ctx context.Context, calls []*Call) exchange {
	x := exchange{ctx: ctx, version: calls[0].Version, holdUntil: q.holdUntil(calls...), out: Outgoing{Header: calls[0].Header}}
	if len(calls) == 1 {
		x.out.Trace = calls[0].Trace
	}
	for i, c := range calls {
		d, ok := c.deadline()
		if !ok {
			x.out.Until = time.Time{}
			break
		}
		if i == 0 || d.After(x.out.Until) {
			x.out.Until = d
		}
	}
	return x
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
func (q *modelQueue) sendMerged(x exchange, reqs []*kserve.Request) ([]Result, time.Duration, int) {
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
	reply, latency, status, err := q.post(x, b, int(b.Rows))
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
func (q *modelQueue) sendWire(x exchange, c *Call) ([]Result, time.Duration, int) {
	var body Body = wireBody{&c.Wire}
	if c.CopyTurn != nil {
		tb := &turnBody{w: &c.Wire, turn: c.CopyTurn}
		defer tb.done()
		body = tb
	}
	reply, latency, status, err := q.post(x, body, c.Rows)
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

// post sends a batch's body of rows rows upstream (see attempt) and
// returns its answer when the status is 200. Otherwise err is the
// *kserve.Error each of the batch's callers gets, and status the
// upstream's HTTP status (0 when there was none). A request the upstream
// answered is counted as Triton's statistics count it (Metrics.Upstream).
//
// It stays one function: one exchange with the upstream, each outcome
// counted where it is known.
func (q *modelQueue) post(x exchange, body Body, rows int) (reply *Reply, latency time.Duration, status int, err error) {
	name := q.name
	m := q.d.o.Metrics
	fail := func(status int, format string, args ...any) (*Reply, time.Duration, int, error) {
		return nil, latency, 0, &kserve.Error{Status: status, Msg: fmt.Sprintf(format, args...)}
	}
	reply, latency, err = q.attempt(x, body)
	switch {
	case errors.Is(err, ErrDeadline):
		// The callers gave up, as they would have on Triton: no 504 of
		// the proxy's own before, and nothing the model is blamed for.
		m.UpstreamErrors.WithLabelValues(name, "deadline").Inc()
		return fail(http.StatusGatewayTimeout, "deadline passed before the upstream answered model '%s'", name)
	case errors.Is(err, ErrUpstreamTimeout):
		m.UpstreamErrors.WithLabelValues(name, "timeout").Inc()
		return nil, latency, 0, fault("timeout", &kserve.Error{Status: http.StatusGatewayTimeout,
			Msg: fmt.Sprintf("upstream did not answer model '%s' in time", name)})
	case errors.Is(err, ErrAnswerCut):
		m.UpstreamErrors.WithLabelValues(name, "bad_response").Inc()
		q.d.o.Logger.Warn("upstream's answer broke off", "model", name, "err", err)
		return nil, latency, 0, fault("bad_response", &kserve.Error{Status: http.StatusBadGateway,
			Msg: fmt.Sprintf("upstream's answer for model '%s' broke off: %s", name, hostclient.Cause(err))})
	case errors.Is(err, errUpstreamDown):
		m.UpstreamErrors.WithLabelValues(name, "connection").Inc()
		return fail(http.StatusServiceUnavailable, "upstream for model '%s' is down: %v", name, err)
	case err != nil && !isConnError(err): // an answer whose header is malformed
		m.UpstreamErrors.WithLabelValues(name, "bad_response").Inc()
		return nil, latency, 0, fault("bad_response", &kserve.Error{Status: http.StatusBadGateway,
			Msg: fmt.Sprintf("upstream's answer for model '%s' is malformed: %v", name, err)})
	case err != nil:
		// The error names the upstream's address: the log gets it, the
		// callers only what kind of failure it was.
		m.UpstreamErrors.WithLabelValues(name, "connection").Inc()
		q.d.o.Logger.Warn("upstream call failed", "model", name, "err", err)
		return fail(http.StatusBadGateway, "upstream unreachable for model '%s': %s", name, hostclient.Cause(err))
	}
	if reply.Status == http.StatusOK {
		q.series.upOK.Inc()
		q.series.upRowsOK.Add(float64(rows))
	} else {
		q.series.upErr.Inc()
		q.series.upRowsErr.Add(float64(rows))
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
			// Triton's 500 in its own words may be one request's error
			// (memberError); any other 5xx, or a body that is not
			// Triton's, is the server's.
			return nil, latency, reply.Status, &faultError{kind: "status_5xx", err: reply.asError(msg),
				member: ok && reply.Status == http.StatusInternalServerError}
		}
		return nil, latency, reply.Status, reply.asError(msg)
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

func isConnError(err error) bool {
	_, ok := connError(err)
	return ok
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
func (q *modelQueue) attempt(x exchange, b Body) (reply *Reply, latency time.Duration, err error) {
	h, m, name, holdUntil := q.d.health, q.d.o.Metrics, q.name, x.holdUntil
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
				if err := q.awaitProbe(wait, holdUntil); err != nil {
					return giveUp(err)
				}
				continue
			}
		}
		start := q.d.now()
		reply, err = q.d.o.Upstream.Infer(x.ctx, name, x.version, b, x.out)
		latency = q.d.now().Sub(start)
		ce, isConn := connError(err)
		if !isConn {
			q.d.reached() // an answer, or a timeout of a request it took
			return reply, latency, err
		}
		failures++
		if ce.Dial {
			q.refused(ce)
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
		case ce.Dial: // err names the upstream's address: Unready and /status have it
			return giveUp(fmt.Errorf("%w: %s", errUpstreamDown, hostclient.Cause(err)))
		default:
			return giveUp(err)
		}
		pause := Backoff(q.d.o.RetryBackoff, failures)
		if ce.Dial && !holdUntil.IsZero() {
			pause = min(pause, max(holdUntil.Sub(q.d.now()), 0))
		}
		if !sleep(q.d.ctx, pause) {
			return giveUp(fmt.Errorf("%w (proxy shutting down)", errUpstreamDown))
		}
	}
}

// awaitProbe waits while another batch probes the down upstream, until
// its outcome (wait closes) or holdUntil; it fails at once, without a
// try, past holdUntil, and when the proxy shuts down.
func (q *modelQueue) awaitProbe(wait <-chan struct{}, holdUntil time.Time) error {
	if !q.d.now().Before(holdUntil) {
		return fmt.Errorf("%w (not back within the caller's deadline)", errUpstreamDown)
	}
	t := time.NewTimer(holdUntil.Sub(q.d.now()))
	defer t.Stop()
	select {
	case <-wait:
	case <-t.C:
	case <-q.d.ctx.Done():
		return fmt.Errorf("%w (proxy shutting down)", errUpstreamDown)
	}
	return nil
}

// refused counts a connection the upstream refused, which may mark it
// down (counted), and notes it for Unready and /status.
func (q *modelQueue) refused(ce *ConnError) {
	down := q.d.health.refused()
	if down {
		q.d.o.Metrics.UpstreamErrors.WithLabelValues(q.name, "marked_down").Inc()
	}
	q.d.noteRefused(down, ce)
}
