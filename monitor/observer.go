package monitor

import (
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/policy"
)

// The monitor learns from its model's dispatcher as a dispatcher.Observer:
// each event's method only counts and sums (atomics, or a short lock); the
// plan reads the sums at its next slice.
var _ dispatcher.Observer = (*Monitor)(nil)

// Arrived counts the rows of a call that entered the queue.
func (m *Monitor) Arrived(a dispatcher.Arrival) { m.arrive(a.Rows) }

// Decided counts a decision of the rule, and whether a partner could have
// come at it.
func (m *Monitor) Decided(d dispatcher.Decision) {
	m.observeDecision(d.PartnerPossible())
	m.late.observe(d)
}

// BatchStarted implements dispatcher.Observer: a batch teaches the monitor
// nothing until it ends.
func (m *Monitor) BatchStarted(*dispatcher.Batch) {}

// BatchEnded learns the round trip and the hold of a batch the upstream
// answered in full.
func (m *Monitor) BatchEnded(_ *dispatcher.Batch, e dispatcher.BatchEnd) {
	if !e.OK {
		return
	}
	m.observe(e.Rows, e.RoundTrip)
	m.observeHold(e.Calls, e.Hold)
}

// Answered learns a call's latency inside the proxy and its wait after its
// batch ended.
func (m *Monitor) Answered(a dispatcher.Answer) {
	m.observeAfter(a.Calls, a.After)
	m.observeCall(a.Arrived, a.Latency)
}

// arrive counts rows that entered the queue.
func (m *Monitor) arrive(rows int) {
	m.arrivals.Add(int64(rows))
	m.total.Add(int64(rows))
}

// observe takes one completed batch and its round trip as the proxy
// measured it. Until the server's own statistics arrive (ObserveServer) the
// round trip feeds the tau(b) fit; afterwards it only measures the overhead
// around the server's figure (network, HTTP, queueing in the server), which
// must not be mixed into tau(b): tau(b) decides how long a batch holds the
// device, and the overhead is paid by every request alike.
func (m *Monitor) observe(rows int, latency time.Duration) {
	ms := float64(latency) / float64(time.Millisecond)
	if !m.serverFed.Load() {
		// A bad sample (never produced by the dispatcher) is simply not learnt.
		_ = m.est.Observe(rows, ms)
		return
	}
	// Set against the server's compute at its next read (ObserveServer).
	m.outsideMu.Lock()
	if rows >= 1 && rows <= len(m.gapBySize) {
		g := &m.gapBySize[rows-1]
		g.pendN++
		g.pendMs += ms
		g.pendSq += ms * ms
	}
	m.outsideMu.Unlock()
}

// observeDecision counts a decision of the rule, and whether a partner
// could have come at it.
func (m *Monitor) observeDecision(partnerPossible bool) {
	m.decisions.Add(1)
	if partnerPossible {
		m.openDecisions.Add(1)
	}
}

// WatchCallers gives the monitor a reader of the model's callers
// (dispatcher.ModelSpec.WatchCallers); each plan reads it once, so the
// budget policy can plan for a closed loop of synchronous clients.
func (m *Monitor) WatchCallers(read func(now time.Time) policy.Callers) {
	m.callers.Store(&read)
}
