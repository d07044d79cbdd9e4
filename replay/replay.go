// Package replay is a discrete-event simulation of one model queue in
// front of a GPU. It drives the live proxy's own code on a virtual clock:
// the monitor (package monitor: arrival counting, rate estimate, online fit
// of tau(b), Plan) and the policy's rule, asked on every arrival,
// completion and requested wake-up as the dispatcher asks it. The clock,
// and who calls Monitor.Tick, are the only differences.
//
// The laboratory's simulator (lab/sim, ratebatch sim) runs it on drawn
// arrivals; the proxy's what-if (package whatif) replays the arrivals it
// kept through other settings, on the line it learnt.
//
// The model: Poisson arrivals at a fixed rate or following a rate series,
// or given arrival times; each batch of b requests takes tau(b) = alpha*b
// + tau0 (optionally with uniform jitter or a drawn spread), plus
// optionally a round trip beyond compute (constant or replayed from
// samples) and the proxy's turnaround, and costs zeta(b) = beta*b + zeta0
// of energy on top of an optional idle power drawn all the time. A run is
// deterministic for its seed, and every policy sees the same arrivals for
// the same seed.
package replay

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
)

// slot is one instance: the batch it runs, if any. The batch's answer
// comes at end; the instance is free again at free (end plus Turnaround).
type slot struct {
	busy     bool
	answered bool // end has passed; the slot waits for free
	end      time.Duration
	free     time.Duration
	start    time.Duration
	rows     int
	compute  time.Duration // the batch's time in the server's statistics
	latSum   float64       // ms, of the rows in the batch
	arrivals []time.Duration
	owners   []int         // the closed-loop client of each row, -1 for the open stream
	after    time.Duration // each row's wait for its answer after the batch
}

// run holds a simulation's state. Times are durations since Epoch.
type run struct {
	c    Config
	rule policy.Rule
	mon  *monitor.Monitor
	// batch is the batch the monitor is told of (BatchEnded), reused.
	batch dispatcher.Batch

	now    time.Duration
	queue  []time.Duration // arrival times, FIFO from head
	head   int
	slots  []slot
	flying int // busy slots
	flyRow int // rows in busy slots
	ansRow int // rows in busy slots whose answer is back (Turnaround)
	wake   time.Duration
	woken  bool // wake is set

	stats map[int]monitor.BatchTotal // the server's per-size statistics; with Overhead or Spread

	// The policy's phase (Phaser): the one in force since phaseAt, the
	// seconds spent in each before, and when it first held (-1: not yet).
	inPhase           string
	phaseAt, holdFrom time.Duration
	phaseS            map[string]float64

	nextArrival time.Duration
	haveArrival bool
	arrived     int // arrivals so far: the open stream's and the clients' calls
	given       int // Config.Arrivals drawn so far
	constRNG    *rand.Rand
	drawTrace   func() (time.Duration, bool) // the next arrival of Trace
	jitterRNG   *rand.Rand
	overheadRNG *rand.Rand // draws OverheadSamples

	// measurements
	// Closed-loop clients: the owner of each queued row (-1: the open
	// stream; nil without clients) and each client's next send (-1 while
	// its request is in the proxy).
	owner       []int
	clientAt    []time.Duration
	busyClients int

	latencies  []float64 // ms, one per request
	batches    int
	rowsSent   int
	energyMJ   float64
	area       float64 // integral of requests in system, request-seconds
	lastEvent  time.Duration
	busySince  time.Duration
	busyTotal  time.Duration
	lastDone   time.Duration
	winCount   int // arrivals in the current window
	win        Window
	winBatches int
	winRows    int
	winLatSum  float64
	windows    []Window

	// The event loop's own clock (loop, step).
	nextTick, nextWindow, lastArrival time.Duration
	events                            int
	// external: arrivals are handed in by a fleet (push), not drawn; open
	// while more may come, so that the monitor keeps ticking in between.
	external, open bool
}

// Run simulates one configuration. It stops with ctx's error when ctx ends.
func Run(ctx context.Context, c Config) (Result, error) {
	r, err := newRun(c)
	if err != nil {
		return Result{}, err
	}
	if err := r.loop(ctx); err != nil {
		return Result{}, fmt.Errorf("sim %s: %w", r.c.Policy.Name(), err)
	}
	return r.result(), nil
}

// newRun validates c and sets a run up at time 0.
func newRun(c Config) (*run, error) {
	if err := c.normalize(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	p := c.Profile
	r := &run{
		c:         c,
		slots:     make([]slot, c.Instances),
		jitterRNG: rand.New(rand.NewPCG(c.Seed, 0x6a69747465720000)),
	}
	if c.OverheadSamples != nil && !c.OverheadInOrder {
		r.overheadRNG = rand.New(rand.NewPCG(c.Seed, 0x6f76657268656164))
	}
	mc := monitor.Config{
		Model: p.Name, Policy: c.Policy, Window: c.Window,
		MaxBatch: p.MaxBatch, Instances: c.Instances,
		Seed: &p.Latency,
		Now:  func() time.Time { return Epoch.Add(r.now) },
	}
	if p.HasEnergy {
		mc.Energy = &p.Energy
	}
	mon, err := monitor.New(mc)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	r.mon, r.batch.Model = mon, mc.Model
	mon.WatchCallers(r.callers)
	// The server's statistics, as Triton publishes them: the monitor
	// tells the round trip beyond compute from them, and the batch times'
	// spread, which the planning policies price (smdp.Model.ServiceSCV).
	if c.Overhead > 0 || c.OverheadSamples != nil || c.Live.PerRow > 0 || c.Spread != nil {
		r.stats = map[int]monitor.BatchTotal{}
	}
	arrivalRNG := rand.New(rand.NewPCG(c.Seed, 0x6172726976616c73))
	if c.Trace != nil {
		r.drawTrace = c.Trace.Draw(arrivalRNG)
	} else {
		r.constRNG = arrivalRNG
	}
	if n := c.Requests; n > 0 {
		r.latencies = make([]float64, 0, n)
		r.queue = make([]time.Duration, 0, min(n, 1<<16))
	}
	if c.Clients > 0 {
		r.owner = []int{}
		r.clientAt = make([]time.Duration, c.Clients) // all send at the start
		for i := range r.clientAt {
			r.clientAt[i] = c.ClientsFrom
		}
	}
	r.drawArrival()
	r.rule = mon.Rule()
	r.win = Window{BatchSize: r.rule.Status().BatchSize}
	r.nextTick, r.nextWindow = mon.TickEvery(), c.Window
	return r, nil
}

func (r *run) drawArrival() {
	if r.external || (r.c.Trace == nil && r.c.Arrivals == nil && r.c.RatePerSec == 0) {
		r.haveArrival = false // a fleet's arrivals, or closed-loop clients only
		return
	}
	if r.c.Requests > 0 && r.arrived >= r.c.Requests {
		r.haveArrival = false
		return
	}
	if r.drawTrace != nil {
		r.nextArrival, r.haveArrival = r.drawTrace()
		return
	}
	if r.c.Arrivals != nil {
		// By its own count: closed-loop clients' calls are arrivals too.
		r.haveArrival = r.given < len(r.c.Arrivals)
		if r.haveArrival {
			r.nextArrival = r.c.Arrivals[r.given]
			r.given++
		}
		return
	}
	gap := r.constRNG.ExpFloat64() / r.c.RatePerSec * float64(time.Second)
	r.nextArrival += max(time.Duration(gap), 1)
	r.haveArrival = true
}

// Event kinds, in the order they are handled when they fall on one instant:
// a completion frees an instance before an arrival is decided on.
const (
	evNone = iota
	evCompletion
	evArrival
	evTick
	evWake
	evClient
)

func (r *run) loop(ctx context.Context) error {
	for {
		stop, err := r.step(ctx, math.MaxInt64, true)
		if err != nil || stop {
			return err
		}
	}
}

// step handles the next event if it falls before limit (at limit too when
// inclusive). stop reports that it did not: no event is left (the run is
// over) or the next is past limit. It stays one function: the event kinds
// in the order they are handled at one instant, one switch read whole.
func (r *run) step(ctx context.Context, limit time.Duration, inclusive bool) (stop bool, err error) {
	r.events++
	if r.c.Pace != nil && r.events%PaceEvery == 0 {
		r.c.Pace()
	}
	// The context is looked at on every event: a non-blocking receive
	// costs a few nanoseconds, and one event can take seconds (a policy
	// solving a large SMDP), so a run stopped with ^C or a deadline ends
	// within one event rather than after tens of thousands of them.
	select {
	case <-ctx.Done():
		return false, fmt.Errorf("stopped at %.3f s simulated: %w", r.now.Seconds(), ctx.Err())
	default:
	}
	kind, at, slotIdx := evNone, time.Duration(math.MaxInt64), -1
	for i := range r.slots {
		s := &r.slots[i]
		next := s.end
		if s.answered {
			next = s.free
		}
		if s.busy && next < at {
			kind, at, slotIdx = evCompletion, next, i
		}
	}
	if r.haveArrival && r.nextArrival < at {
		kind, at = evArrival, r.nextArrival
	}
	client, clientAt := r.nextClient()
	if client >= 0 && clientAt < at {
		kind, at = evClient, clientAt
	}
	more := r.haveArrival || r.open || client >= 0
	waiting := len(r.queue) - r.head
	if (more || waiting > 0 || r.flying > 0) && r.nextTick < at {
		kind, at = evTick, r.nextTick
	}
	if r.woken && r.wake < at {
		kind, at = evWake, r.wake
	}
	if kind == evNone {
		if waiting > 0 {
			return false, fmt.Errorf("rule left %d requests waiting with no wake-up (%s)", waiting, r.rule.Status())
		}
		return true, nil
	}
	if at > limit || (at == limit && !inclusive) {
		r.events--
		return true, nil
	}
	if !more && at-r.lastArrival > r.c.DrainLimit {
		return false, fmt.Errorf("%d requests still waiting %v after the last arrival (%s)", waiting, r.c.DrainLimit, r.rule.Status())
	}
	r.advance(at)
	switch kind {
	case evCompletion:
		r.complete(slotIdx)
	case evClient:
		r.queue = append(r.queue, at)
		r.owner = append(r.owner, client)
		r.clientAt[client] = -1
		r.busyClients++
		r.arrived++
		r.winCount++
		r.mon.Arrived(dispatcher.Arrival{At: Epoch.Add(at), Rows: 1})
		r.lastArrival = at
	case evArrival:
		r.queue = append(r.queue, at)
		if r.owner != nil {
			r.owner = append(r.owner, -1)
		}
		r.arrived++
		r.winCount++
		r.mon.Arrived(dispatcher.Arrival{At: Epoch.Add(at), Rows: 1})
		r.lastArrival = at
		r.drawArrival()
	case evTick:
		// The monitor re-plans every slice; the series is per window.
		if r.stats != nil {
			r.mon.ObserveServer(slices.Collect(maps.Values(r.stats)))
		}
		r.mon.Tick()
		r.rule = r.mon.Rule()
		r.phase()
		if r.now >= r.nextWindow {
			r.closeWindow()
			r.winCount = 0
			r.win = Window{StartS: r.now.Seconds(), BatchSize: r.rule.Status().BatchSize, Phase: r.inPhase}
			r.nextWindow += r.c.Window
		}
		r.nextTick += r.mon.TickEvery()
	case evWake:
		r.woken = false
	}
	r.decide()
	return false, nil
}

// phase follows the policy's phase (policy.Phaser), adding up the time
// spent in each.
func (r *run) phase() {
	ph, ok := r.c.Policy.(policy.Phaser)
	if !ok {
		return
	}
	now, _ := ph.Phase()
	if r.phaseS == nil {
		r.phaseS, r.holdFrom = map[string]float64{}, -1
	} else {
		r.phaseS[r.inPhase] += (r.now - r.phaseAt).Seconds()
	}
	if now == policy.PhaseHolding && r.holdFrom < 0 {
		r.holdFrom = r.now
	}
	r.inPhase, r.phaseAt = now, r.now
}

// advance moves the clock, integrating requests in system and busy time.
func (r *run) advance(t time.Duration) {
	inSystem := len(r.queue) - r.head + r.flyRow - r.ansRow
	r.area += float64(inSystem) * (t - r.lastEvent).Seconds()
	r.lastEvent = t
	r.now = t
}

func (r *run) closeWindow() {
	w := r.win
	w.Arrivals = r.winCount
	w.RatePerSec = float64(r.winCount) / r.c.Window.Seconds()
	w.Batches = r.winBatches
	if r.winBatches > 0 {
		w.MeanBatchSize = float64(r.winRows) / float64(r.winBatches)
	}
	if w.Completed > 0 {
		w.MeanLatencyMs = r.winLatSum / float64(w.Completed)
	}
	r.winBatches, r.winRows, r.winLatSum = 0, 0, 0
	if r.c.Series {
		r.windows = append(r.windows, w)
	}
}

// closedOnly reports whether the run's arrivals are its closed-loop
// clients alone: the rule and the plan then know the callers, as the live
// dispatcher knows its connections.
func (r *run) closedOnly() bool {
	return r.c.Clients > 0 && r.c.RatePerSec == 0 && r.c.Trace == nil && r.c.Arrivals == nil && !r.external
}

// callers is the clients as the live dispatcher learns them
// (policy.Callers): the think time it measures runs from the batch's end
// to the next request, so it holds the wait after the batch and the
// client's own time.
func (r *run) callers(time.Time) policy.Callers {
	if !r.closedOnly() {
		return policy.Callers{}
	}
	think := r.c.Live.Extra.AfterMs(1) + float64(r.c.Live.Client+r.c.Think)/float64(time.Millisecond)
	return policy.Callers{Known: true, ClosedLoop: r.c.Clients, ThinkMs: think}
}

func (r *run) queueState() policy.Queue {
	q := policy.Queue{
		Now:          Epoch.Add(r.now),
		Rows:         len(r.queue) - r.head,
		InFlight:     r.flying,
		InFlightRows: r.flyRow,
		Instances:    r.c.Instances,
		MaxBatch:     r.c.Profile.MaxBatch,
	}
	if r.closedOnly() {
		q.SourcesKnown, q.IdleSources = true, r.c.Clients-r.busyClients
	}
	if q.Rows > 0 {
		q.OldestArrival = Epoch.Add(r.queue[r.head])
		if r.c.SLA > 0 {
			q.EarliestDeadline = q.OldestArrival.Add(r.c.SLA)
		}
	}
	return q
}

// decide asks the rule until it stops sending; each send takes an instance,
// so the loop ends after at most Instances sends.
func (r *run) decide() {
	for {
		q := r.queueState()
		d := r.rule.Decide(q)
		if d.Rows > 0 {
			if q.Rows == 0 || q.InFlight >= q.Instances {
				r.woken = false
				return
			}
			r.dispatch(min(d.Rows, q.Rows, q.MaxBatch))
			continue
		}
		r.woken = false
		if w := d.WakeAt.Sub(Epoch); !d.WakeAt.IsZero() && w > r.now {
			r.wake, r.woken = w, true
		}
		return
	}
}

// batchTime draws a batch of n rows' time on the device (compute: its
// mean tau(n), jittered or spread) and beyond it (over: the round trip's
// overhead, constant or replayed, and its share per row).
func (r *run) batchTime(n int) (compute, over time.Duration) {
	tau := r.c.Profile.TauMs(n)
	if r.c.Jitter > 0 {
		tau *= 1 + r.c.Jitter*(2*r.jitterRNG.Float64()-1)
	}
	if ts, ok := r.c.Spread.(TimedSpread); ok {
		tau = ts.BatchMsAt(r.jitterRNG, r.now, tau)
	} else if r.c.Spread != nil {
		tau = r.c.Spread.BatchMs(r.jitterRNG, tau)
	}
	compute = max(time.Duration(tau*float64(time.Millisecond)), 1)
	over = r.c.Overhead
	switch k := len(r.c.OverheadSamples); {
	case k > 0 && r.c.OverheadInOrder:
		over = r.c.OverheadSamples[r.batches%k]
	case k > 0:
		over = r.c.OverheadSamples[r.overheadRNG.IntN(k)]
	}
	return compute, max(over+time.Duration(n)*r.c.Live.PerRow, 0)
}

// dispatch starts a batch of the n oldest waiting rows on a free
// instance: its time drawn, each row's latency as its client will see it,
// the queue advanced, the run's counts and energy.
func (r *run) dispatch(n int) {
	i := slices.IndexFunc(r.slots, func(s slot) bool { return !s.busy })
	compute, over := r.batchTime(n)
	end := r.now + compute + over
	live := r.c.Live
	hold, after := msDur(live.Extra.HoldMs(n)), msDur(live.Extra.AfterMs(n))
	if ps, ok := r.c.Spread.(ProxyStalls); ok {
		hold, after = max(hold+ps.HoldAt(end, n), 0), max(after+ps.AfterAt(end, n), 0)
	}
	s := slot{busy: true, start: r.now, end: end, free: end + r.c.Turnaround + hold, rows: n, compute: compute, after: after}
	// Each row's latency as its client sees it: the batch's end, its wait
	// for the answer after it, and what the proxy does not see.
	after += live.Client
	for _, at := range r.queue[r.head : r.head+n] {
		l := float64(end-at+after) / float64(time.Millisecond)
		s.latSum += l
		s.arrivals = append(s.arrivals, at)
		r.latencies = append(r.latencies, l)
	}
	if r.owner != nil {
		s.owners = slices.Clone(r.owner[r.head : r.head+n])
	}
	r.head += n
	if r.head > 4096 && r.head*2 > len(r.queue) {
		r.queue = r.queue[:copy(r.queue, r.queue[r.head:])]
		if r.owner != nil {
			r.owner = r.owner[:copy(r.owner, r.owner[r.head:])]
		}
		r.head = 0
	}
	if r.flying == 0 {
		r.busySince = r.now
	}
	r.slots[i] = s
	r.flying++
	r.flyRow += n
	r.batches++
	r.rowsSent += n
	r.winBatches++
	r.winRows += n
	if r.c.Profile.HasEnergy {
		r.energyMJ += r.c.Profile.ZetaMJ(n)
	}
}

// complete handles a slot's event: the answer of its batch, then (at once
// without Turnaround) the instance's release.
func (r *run) complete(i int) {
	s := &r.slots[i]
	if !s.answered {
		r.answer(s)
	}
	r.lastDone = r.now
	if r.now < s.free {
		return // the proxy's turnaround still holds the instance
	}
	r.flying--
	r.flyRow -= s.rows
	r.ansRow -= s.rows
	if r.flying == 0 {
		r.busyTotal += r.now - r.busySince
	}
	r.slots[i] = slot{}
}

// answer records a batch's answer: its rows' latencies, the server's
// statistics and the round trip the monitor is told of.
func (r *run) answer(s *slot) {
	s.answered = true
	if len(s.owners) > 0 {
		next := s.end + s.after + r.c.Live.Client + r.c.Think
		for _, o := range s.owners {
			if o >= 0 {
				r.clientAt[o] = next
				r.busyClients--
			}
		}
	}
	r.ansRow += s.rows
	r.win.Completed += s.rows
	r.winLatSum += s.latSum
	if r.stats != nil {
		t := r.stats[s.rows]
		t.Batch, t.Count, t.Time = s.rows, t.Count+1, t.Time+s.compute
		r.stats[s.rows] = t
	}
	// The monitor learns the batch as the live dispatcher reports it: its
	// round trip, valid by construction (rows >= 1, latency > 0), and, when
	// the run models the proxy's time around a batch (Live.Extra), the
	// hold and each call's wait after the batch.
	var hold, after time.Duration
	if x := r.c.Live.Extra; !x.IsZero() {
		hold, after = s.free-s.end, s.after
	}
	r.batch.Rows = s.rows
	r.mon.BatchEnded(&r.batch, dispatcher.BatchEnd{At: Epoch.Add(r.now), Rows: s.rows, Calls: s.rows, OK: true,
		RoundTrip: s.end - s.start, Hold: hold, Served: s.rows})
	// The calls' latency as the live proxy measures it (without what the
	// client adds), which a planning policy checks its plan against.
	inProxy := msDur(s.latSum/float64(s.rows)) - r.c.Live.Client
	for _, at := range s.arrivals {
		r.mon.Answered(dispatcher.Answer{Arrived: Epoch.Add(at), Latency: inProxy, After: after, Calls: s.rows})
	}
}

// ms converts milliseconds to a duration.
func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// nextClient returns the closed-loop client that sends next and when, or
// -1 when none will (none idle, or the run's requests are all sent).
func (r *run) nextClient() (int, time.Duration) {
	if r.clientAt == nil || (r.c.Requests > 0 && r.arrived >= r.c.Requests) {
		return -1, 0
	}
	best, at := -1, time.Duration(0)
	for i, t := range r.clientAt {
		if t >= 0 && (best < 0 || t < at) {
			best, at = i, t
		}
	}
	if best >= 0 && r.c.ClientsUntil > 0 && at > r.c.ClientsUntil {
		return -1, 0 // the clients have stopped
	}
	return best, at
}
