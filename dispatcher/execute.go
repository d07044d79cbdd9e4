package dispatcher

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
)

// execute sends one batch and answers each of its callers.
func (q *modelQueue) execute(b batch) {
	for _, c := range b.calls {
		q.series.queueWait.Observe(b.sent.Sub(c.arrived).Seconds())
	}
	q.series.batchSize.Observe(float64(b.rows))

	var busyEnd func(int)
	if q.d.o.Busy != nil {
		busyEnd = q.d.o.Busy(q.name)
	}
	results, latency, ok := q.send(b.calls)
	if ok {
		b.planner.Observe(b.rows, latency)
		q.series.upstream.Observe(latency.Seconds())
	}
	if busyEnd != nil {
		served := 0
		for i, c := range b.calls {
			if results[i].Err == nil {
				served += c.Rows
			}
		}
		busyEnd(served)
	}
	for i, c := range b.calls {
		r := results[i]
		r.Queued = b.sent.Sub(c.arrived)
		r.BatchRows = b.rows
		q.deliver(c, r)
	}

	q.mu.Lock()
	q.inFlight--
	q.inFlightRows -= b.rows
	q.mu.Unlock()
	// No signal: whoever executed the batch decides next (Submit, worker).
}

// send runs a batch upstream: one retry per connection error as configured,
// and when the upstream rejects a batch of several callers as a bad request,
// each caller again on its own so that only the bad one fails. ok reports a
// whole-batch success, whose latency teaches the monitor.
func (q *modelQueue) send(calls []*Call) (results []Result, latency time.Duration, ok bool) {
	reqs := make([]*kserve.Request, len(calls))
	for i, c := range calls {
		reqs[i] = c.Req
	}
	version := calls[0].Version
	results, latency, status := q.sendMerged(version, reqs)
	if status == http.StatusBadRequest && len(calls) > 1 {
		q.d.o.Metrics.UpstreamErrors.WithLabelValues(q.name, "bad_member_retry").Inc()
		var wg sync.WaitGroup
		for i := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs, _, _ := q.sendMerged(version, reqs[i:i+1])
				results[i] = rs[0]
			}()
		}
		wg.Wait()
		return results, 0, false
	}
	return results, latency, status == http.StatusOK
}

// sendMerged merges reqs, posts them and splits the answer. status is the
// upstream's HTTP status, or 0 when there was none.
func (q *modelQueue) sendMerged(version string, reqs []*kserve.Request) ([]Result, time.Duration, int) {
	name := q.name
	m := q.d.o.Metrics
	fail := func(status int, format string, args ...any) ([]Result, time.Duration, int) {
		err := &kserve.Error{Status: status, Msg: fmt.Sprintf(format, args...)}
		out := make([]Result, len(reqs))
		for i := range out {
			out[i] = Result{Err: err}
		}
		return out, 0, 0
	}
	b, err := kserve.MergeSameKey(reqs) // the queue holds one key only
	if err != nil {                     // the proxy only queues calls of one key together
		return fail(http.StatusInternalServerError, "forming the batch: %v", err)
	}
	var reply *Reply
	var start time.Time
	for attempt := 0; ; attempt++ {
		start = q.d.now()
		reply, err = q.d.o.Upstream.Infer(name, version, b)
		var ce *ConnError
		if err == nil || !errors.As(err, &ce) || attempt >= q.d.o.Retries {
			break
		}
		m.UpstreamErrors.WithLabelValues(name, "connection_retry").Inc()
	}
	latency := q.d.now().Sub(start)
	switch {
	case errors.Is(err, ErrUpstreamTimeout):
		m.UpstreamErrors.WithLabelValues(name, "timeout").Inc()
		return fail(http.StatusGatewayTimeout, "upstream did not answer model '%s' in time", name)
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
		out, _, _ := fail(reply.Status, "%s", msg)
		return out, latency, reply.Status
	}
	resp, err := kserve.DecodeResponse(reply.Body, reply.HeaderLen)
	if err != nil {
		reply.Free()
		m.UpstreamErrors.WithLabelValues(name, "bad_response").Inc()
		return fail(http.StatusBadGateway, "upstream's answer for model '%s' is malformed: %v", name, err)
	}
	parts, err := b.Split(resp)
	if err != nil {
		reply.Free()
		m.UpstreamErrors.WithLabelValues(name, "bad_response").Inc()
		return fail(http.StatusBadGateway, "upstream's answer for model '%s' does not fit the batch: %v", name, err)
	}
	sh := &shared{free: reply.Free}
	sh.refs.Store(int32(len(parts)))
	out := make([]Result, len(parts))
	for i, p := range parts {
		out[i] = Result{Resp: p, release: sh}
	}
	return out, latency, http.StatusOK
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
