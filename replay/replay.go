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
	"github.com/ratebatch/ratebatch/internal/stats"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Defaults of Config.
const (
	DefaultRequests = 100_000
	DefaultWindow   = time.Second
	// MinWindow is the shortest monitor window: each window refits tau(b),
	// and a live monitor could not count arrivals in less either.
	MinWindow = time.Millisecond
	// DefaultDrainLimit is how long after the last arrival a run may take to
	// empty the queue before it is declared stuck.
	DefaultDrainLimit = time.Hour
)

// Epoch is the virtual clock's time zero as policies see it.
var Epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Config describes one run. Give exactly one of RatePerSec, Trace and
// Arrivals.
type Config struct {
	Profile batchcost.Profile
	Policy  policy.Policy

	RatePerSec float64 // constant Poisson arrival rate
	Trace      Series  // or a rate that follows this series
	// Arrivals, or exactly these arrival offsets from the start, ascending:
	// a live load's own schedule (loadgen.Schedule), so that a run replays
	// the realisation the live proxy saw rather than another draw of the
	// same rate. Where a policy keeps the server nearly saturated, two
	// draws differ in their bursts, and so in latency, far more than the
	// simulator and the proxy differ.
	Arrivals []time.Duration
	// Clients, when > 0, adds that many closed-loop clients: each sends a
	// request, waits for its answer (the batch's end, the wait after it
	// and Live.Client), thinks Think and sends the next, as a synchronous
	// SDK loop or perf_analyzer's concurrency mode (Think 0) does. They
	// mix with a rate, a trace or arrival times (the open stream) or run
	// alone. Each client is one connection: without an open stream the
	// rule sees how many are idle (policy.Queue.IdleSources), as the live
	// dispatcher does.
	Clients int
	Think   time.Duration
	// ClientsFrom is when the closed-loop clients send their first
	// requests (default 0), and ClientsUntil, when > 0, the time after
	// which they send none: beside arrival times or a trace, which end,
	// the clients would otherwise go on until Requests. The what-if
	// replays a closed loop that was active over part of its window so.
	ClientsFrom, ClientsUntil time.Duration
	// Requests is how many arrivals a constant-rate run simulates (default
	// DefaultRequests); for a trace run it caps the arrivals (0: the whole
	// trace).
	Requests int
	Seed     uint64

	Window    time.Duration // monitor window (default 1 s)
	Instances int           // batches that run at once (default 1)
	// Jitter makes each batch take tau(b)*(1+u), u uniform in
	// [-Jitter, Jitter); 0 <= Jitter < 1.
	Jitter float64
	// Spread, when set, draws each batch's time around tau(b) (after
	// Jitter), taken as its mean: a real server's log-normal spread,
	// heavy tail and stalls, as the emulator's realism draws them. With
	// the mean alone a simulation of the rough emulator near saturation
	// read well below the live proxy's mean latency (docs/SIMULATION.md,
	// "A server's spread").
	Spread Spread
	// Overhead is the round trip beyond the server's compute per batch
	// (network, HTTP): it holds the instance like compute does, but is not
	// in the server's statistics. When > 0 the simulated server keeps
	// per-size statistics as Triton does and the monitor is fed them every
	// slice, and the round trips apart, as the live proxy's monitor is
	// (the fit from the statistics, the overhead's moving average from the
	// round trips, the plan adding the two). 0: the profile's line is the
	// whole round trip and feeds the fit directly.
	Overhead time.Duration
	// OverheadSamples, when given, replaces the constant Overhead: each
	// batch's round trip beyond compute is one of them, drawn uniformly
	// with the run's seed (a live run's own round trips, replayed). Near
	// saturation the mean latency depends on the overhead's spread, not
	// only its mean: the wait grows with the service time's second moment,
	// so a heavy tail queues where a constant of the same mean does not.
	// Every sample must be >= 0. The simulated server keeps statistics as
	// with Overhead.
	OverheadSamples []time.Duration
	// OverheadInOrder replays OverheadSamples in order instead of drawing
	// them: the n-th batch takes the n-th sample (from the first again
	// after the last). Given a live run's round trips and its arrivals, a
	// rare stall then falls about where it fell live, rather than at a
	// random moment of the run.
	OverheadInOrder bool
	// Turnaround is the proxy's own time per batch outside the round trip
	// it measures: merging the batch before the send, splitting and
	// delivering the answer and deciding the next batch after it. The
	// instance stays taken for it after the answer, as the live proxy
	// sends an instance its next batch only then, but the monitor does not
	// see it and it is not in the rows' latency. Small as it is against a
	// batch's time, near saturation it counts: the live proxy's turnaround
	// moved batchmonitor's simulated mean latency at rho 0.7 visibly
	// (docs/LEARNING.md, "The simulator predicts the live proxy").
	Turnaround time.Duration
	// Live is the rest of a live proxy's time outside the server's
	// compute, as it measured it (/status, rule.outside): with it a
	// simulation's absolute latencies are the live proxy's, not the
	// server's alone (ParseOverheads reads it as ratebatch sim
	// --overheads takes it).
	Live Overheads
	// IdleWatts is the device's idle power (W), drawn all the time; a
	// batch's zeta(b) is the energy it adds on top. This is the emulator's
	// model (and plan --fleet's), so that a simulation's requests per joule
	// are the emulator's: counting idle power only between batches, the
	// simulator read far more requests per joule than the emulator for a
	// lone closed-loop client, whose batches are a small part of its time.
	IdleWatts float64
	// SLA, when > 0, gives every request the deadline arrival+SLA, which
	// rules see as Queue.EarliestDeadline.
	SLA time.Duration
	// DrainLimit bounds the time from the last arrival to the last
	// completion (default DefaultDrainLimit).
	DrainLimit time.Duration
	// Series asks for the per-window time series in Result.Windows.
	Series bool
	// Pace, when set, is called between two events every PaceEvery
	// events: a caller that bounds the run's share of a processor (the
	// what-if, inside the live proxy) sleeps in it.
	Pace func()
}

// PaceEvery is how many events a run handles between two calls of
// Config.Pace: a few hundred microseconds of work.
const PaceEvery = 1024

// Series is an arrival rate that moves over time, such as the laboratory's
// rate series (lab/trace): a run draws Poisson arrivals that follow it.
type Series interface {
	// Draw starts a draw of arrival times from time 0 with rng: next
	// returns them in order, and false once the series has ended.
	Draw(rng *rand.Rand) (next func() (time.Duration, bool))
}

// InvalidError names the Config field Run cannot use, so that a caller
// can point at its own spelling of it (the sim command, at its flag).
type InvalidError struct {
	Field string // the Config field: "RatePerSec", "Jitter", ...
	Err   error
}

func (e *InvalidError) Error() string { return e.Err.Error() }
func (e *InvalidError) Unwrap() error { return e.Err }

func invalid(field, format string, a ...any) error {
	return &InvalidError{Field: field, Err: fmt.Errorf(format, a...)}
}

// Validate reports the first field Run cannot use, as an *InvalidError.
// Zero values that select a default are valid.
func (c Config) Validate() error {
	if err := c.Profile.Validate(); err != nil {
		return &InvalidError{Field: "Profile", Err: err}
	}
	switch {
	case c.Policy == nil:
		return invalid("Policy", "no policy given")
	case c.Arrivals != nil && (c.Trace != nil || c.RatePerSec != 0):
		return invalid("Arrivals", "give one of a rate, a trace and arrival times, not several")
	case c.Arrivals != nil && !validArrivals(c.Arrivals):
		return invalid("Arrivals", "arrival times must be >= 0 and ascending")
	case c.Trace != nil && c.RatePerSec != 0:
		return invalid("RatePerSec", "give either a rate or a trace, not both")
	case c.Clients < 0 || c.Think < 0:
		return invalid("Clients", "clients and think time must be >= 0, got %d and %v", c.Clients, c.Think)
	case c.ClientsFrom < 0 || c.ClientsUntil < 0 || (c.ClientsUntil > 0 && c.ClientsUntil < c.ClientsFrom):
		return invalid("ClientsUntil", "the clients' span must be >= 0 and end after it starts, got %v to %v", c.ClientsFrom, c.ClientsUntil)
	case c.Clients > 0 && c.RatePerSec == 0 && c.Trace == nil && c.Arrivals == nil:
		// Closed-loop clients alone.
	case c.Trace == nil && c.Arrivals == nil && (!(c.RatePerSec > 0) || math.IsInf(c.RatePerSec, 0)):
		return invalid("RatePerSec", "arrival rate must be a finite number > 0 per second, got %v", c.RatePerSec)
	case c.Requests < 0:
		return invalid("Requests", "requests must be >= 0, got %d", c.Requests)
	case c.Window < 0 || (c.Window > 0 && c.Window < MinWindow):
		return invalid("Window", "window must be at least %v, got %v", MinWindow, c.Window)
	case c.Instances < 0:
		return invalid("Instances", "instances must be >= 1, got %d", c.Instances)
	case !(c.Jitter >= 0 && c.Jitter < 1):
		return invalid("Jitter", "jitter must be in [0, 1), got %v", c.Jitter)
	case !(c.IdleWatts >= 0) || math.IsInf(c.IdleWatts, 0):
		return invalid("IdleWatts", "idle power must be a finite number >= 0 W, got %v", c.IdleWatts)
	case c.Overhead < 0:
		return invalid("Overhead", "overhead must be >= 0, got %v", c.Overhead)
	case c.OverheadSamples != nil && c.Overhead != 0:
		return invalid("OverheadSamples", "give either a constant overhead or overhead samples, not both")
	case c.OverheadSamples != nil && !validSamples(c.OverheadSamples):
		return invalid("OverheadSamples", "overhead samples must be at least one, each >= 0")
	case c.Turnaround < 0:
		return invalid("Turnaround", "turnaround must be >= 0, got %v", c.Turnaround)
	case c.Live.Validate() != nil:
		return &InvalidError{Field: "Live", Err: c.Live.Validate()}
	case c.SLA < 0:
		return invalid("SLA", "SLA must be >= 0, got %v", c.SLA)
	case c.DrainLimit < 0:
		return invalid("DrainLimit", "drain limit must be >= 0, got %v", c.DrainLimit)
	}
	return nil
}

func validArrivals(a []time.Duration) bool {
	for i, t := range a {
		if t < 0 || (i > 0 && t < a[i-1]) {
			return false
		}
	}
	return true
}

func validSamples(a []time.Duration) bool {
	return len(a) > 0 && !slices.ContainsFunc(a, func(d time.Duration) bool { return d < 0 })
}

// normalize validates c and fills its defaults.
func (c *Config) normalize() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Trace == nil && c.Arrivals == nil && c.Requests == 0 {
		c.Requests = DefaultRequests
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Instances == 0 {
		c.Instances = 1
	}
	if c.DrainLimit == 0 {
		c.DrainLimit = DefaultDrainLimit
	}
	return nil
}

// Result is what a run measured. Latency is from arrival to the completion
// of the request's batch.
type Result struct {
	Policy        string  `json:"policy"`
	Requests      int     `json:"requests"`
	Batches       int     `json:"batches"`
	MeanLatencyMs float64 `json:"mean_latency_ms"`
	P50LatencyMs  float64 `json:"p50_latency_ms"`
	P99LatencyMs  float64 `json:"p99_latency_ms"`
	MaxLatencyMs  float64 `json:"max_latency_ms"`
	MeanBatchSize float64 `json:"mean_batch_size"`
	// ThroughputRPS is Requests over the run's duration (time 0 to the last
	// completion).
	ThroughputRPS float64 `json:"throughput_rps"`
	// RequestsPerJoule is nil when the profile has no energy figures.
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	EnergyJ          *float64 `json:"energy_j"`
	DurationS        float64  `json:"duration_s"`
	// MeanInSystem is the time average of requests waiting or in a batch;
	// by Little's law it equals ThroughputRPS * MeanLatencyMs / 1000.
	MeanInSystem float64 `json:"mean_in_system"`
	// Utilization is the share of time at least one batch was running.
	Utilization float64 `json:"utilization"`
	// Windows is the per-window time series, when Config.Series is set.
	Windows []Window `json:"windows,omitempty"`
	// PhaseS is the seconds the run spent in each phase of a policy that
	// earns its holds (policy.Phaser: the budget's learning, holding,
	// adhoc), and HoldFromS when it first held (-1: never); nil and 0
	// for the other policies.
	PhaseS    map[string]float64 `json:"phase_s,omitempty"`
	HoldFromS float64            `json:"hold_from_s,omitempty"`
}

// Window is one monitor window of a run.
type Window struct {
	StartS     float64 `json:"start_s"`
	Arrivals   int     `json:"arrivals"`
	RatePerSec float64 `json:"rate_rps"`
	// BatchSize is the batch size of the rule in force during the window
	// (planned at its start), Phase the policy's phase then (Phaser).
	BatchSize     int     `json:"batch_size"`
	Phase         string  `json:"phase,omitempty"`
	Batches       int     `json:"batches"`
	MeanBatchSize float64 `json:"mean_batch_size"`
	// Completed and MeanLatencyMs cover the requests whose batch completed
	// in the window.
	Completed     int     `json:"completed"`
	MeanLatencyMs float64 `json:"mean_latency_ms"`
}

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

// Spread draws batch times around their mean. The emulator's Realism is
// one (ratebatch sim --realism).
type Spread interface {
	// BatchMs returns the time of a batch whose mean time is meanMs.
	BatchMs(rng *rand.Rand, meanMs float64) float64
}

// TimedSpread is a Spread that also knows when a batch starts: a replay of
// a live window runs each batch at the pace the live server kept then, so
// that a stall of the live server (a slow batch, the host busy elsewhere)
// falls where it fell rather than anywhere in the run.
type TimedSpread interface {
	Spread
	// BatchMsAt returns the time of a batch starting at at (from the run's
	// start) whose mean time is meanMs.
	BatchMsAt(rng *rand.Rand, at time.Duration, meanMs float64) float64
}

// ProxyStalls is a Spread that also gives the proxy's own time around a
// batch beyond its measured means (Live.Extra) at a moment of a live
// window: a replay then holds an instance, and keeps a caller from its
// answer, longer where the live proxy did (a pause of the host, a
// goroutine woken late), for every setting alike.
type ProxyStalls interface {
	// HoldAt is how much longer than its mean the live proxy held an
	// instance beyond the round trip of a batch of calls callers ending
	// at at (from the run's start); it may be negative.
	HoldAt(at time.Duration, calls int) time.Duration
	// AfterAt is how much longer than its mean a caller of a batch of
	// calls callers ending at at waited for its answer; it may be
	// negative.
	AfterAt(at time.Duration, calls int) time.Duration
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
// over) or the next is past limit.
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

func (r *run) dispatch(n int) {
	i := slices.IndexFunc(r.slots, func(s slot) bool { return !s.busy })
	tau := r.c.Profile.TauMs(n)
	if r.c.Jitter > 0 {
		tau *= 1 + r.c.Jitter*(2*r.jitterRNG.Float64()-1)
	}
	if ts, ok := r.c.Spread.(TimedSpread); ok {
		tau = ts.BatchMsAt(r.jitterRNG, r.now, tau)
	} else if r.c.Spread != nil {
		tau = r.c.Spread.BatchMs(r.jitterRNG, tau)
	}
	compute := max(time.Duration(tau*float64(time.Millisecond)), 1)
	over := r.c.Overhead
	switch n := len(r.c.OverheadSamples); {
	case n > 0 && r.c.OverheadInOrder:
		over = r.c.OverheadSamples[r.batches%n]
	case n > 0:
		over = r.c.OverheadSamples[r.overheadRNG.IntN(n)]
	}
	over = max(over+time.Duration(n)*r.c.Live.PerRow, 0)
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

func (r *run) result() Result {
	r.closeWindow()
	res := Result{
		Policy:    r.c.Policy.Name(),
		Requests:  len(r.latencies),
		Batches:   r.batches,
		DurationS: r.lastDone.Seconds(),
		Windows:   r.windows,
	}
	if r.phaseS != nil {
		r.phaseS[r.inPhase] += max(r.lastDone-r.phaseAt, 0).Seconds()
		res.PhaseS, res.HoldFromS = r.phaseS, r.holdFrom.Seconds()
		if r.holdFrom < 0 {
			res.HoldFromS = -1
		}
	}
	if res.Requests == 0 {
		return res
	}
	var sum float64
	for _, l := range r.latencies {
		sum += l
	}
	res.MeanLatencyMs = sum / float64(res.Requests)
	slices.Sort(r.latencies)
	res.P50LatencyMs = stats.Percentile(r.latencies, 50)
	res.P99LatencyMs = stats.Percentile(r.latencies, 99)
	res.MaxLatencyMs = r.latencies[len(r.latencies)-1]
	res.MeanBatchSize = float64(r.rowsSent) / float64(r.batches)
	if res.DurationS > 0 {
		res.ThroughputRPS = float64(res.Requests) / res.DurationS
		res.MeanInSystem = r.area / res.DurationS
		res.Utilization = r.busyTotal.Seconds() / res.DurationS
	}
	if r.c.Profile.HasEnergy {
		joules := r.energyMJ/1000 + r.c.IdleWatts*r.lastDone.Seconds()
		rpj := float64(res.Requests) / joules
		res.EnergyJ, res.RequestsPerJoule = &joules, &rpj
	}
	return res
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
