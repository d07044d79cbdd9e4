package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

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
