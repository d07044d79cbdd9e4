// Package policy holds ratebatch's batching decisions as pure, clock-injected
// code, so that the live dispatcher and the simulator run the very same rules
// and a simulated result predicts the live one.
//
// A policy works in two steps that run on different goroutines:
//
//   - Plan is the slow step. The monitor calls it once per window, off the
//     request path, with what it learned in that window (arrival rate, the
//     current fit of tau(b)). It may take long (an SMDP solve) and returns a
//     Rule.
//   - Rule.Decide is the cheap step. The dispatcher (or the simulator) calls
//     it on every event of a model queue: an arrival, a batch completion, and
//     the wake-up time the rule itself asked for. It answers "send a batch of
//     up to n rows now" or "wait, and ask me again at t".
//
// Nothing in this package sleeps, reads a clock or does I/O: every time comes
// in through Estimate.Now and Queue.Now.
package policy

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Estimate is what the monitor knows at the end of a window. Rates are per
// second, times milliseconds, energies millijoules.
type Estimate struct {
	Now time.Time
	// Window is the length of the window that just ended. Zero means no
	// window has ended yet: Plan then returns the policy's starting rule
	// (Arrivals and RatePerSec are zero and carry no information).
	Window     time.Duration
	Arrivals   int     // rows counted by the request path during Window
	RatePerSec float64 // Arrivals / Window
	// Stepped says the rate has not held for a whole window: the arrivals
	// of a slice were implausible under the rate before it (a step or a
	// burst, see monitor's rateEstimator) less than a window ago, or the
	// model has just started. A plan for a steady load at the new rate
	// does not hold then (budget stays work-conserving meanwhile).
	Stepped bool

	// The current fit of the batch latency tau(b) = AlphaMs*b + Tau0Ms
	// (AlphaMs > 0, Tau0Ms >= 0), seeded from a profile and updated from
	// observed batches, and the quality of that fit (R^2, 1 = perfect).
	batchcost.Latency
	FitR2 float64
	// FitDoubt, when not empty, says why the fit is not to be trusted yet
	// (too few or too alike batches, too much noise). Rules that size
	// batches from the line then stay work-conserving and say why.
	FitDoubt string

	// The batch energy zeta(b) = BetaMJ*b + Zeta0MJ where known.
	batchcost.Energy
	HasEnergy bool

	MaxBatch  int // the model's max_batch_size (B_max), >= 1
	Instances int // batches the upstream can run at once, >= 1

	// Extra is the proxy's own time around a batch, outside tau(b), as
	// the monitor measured it (zero until it has): the planning policies
	// (smdp, budget) count it, so that what they plan is what the
	// requests live.
	Extra smdp.Extra

	// ServiceSCV is the squared coefficient of variation of a batch's time
	// on its instance (the round trip, per batch size, pooled) as the
	// monitor measured it; 0 where unknown or exact. A Poisson queue
	// waits in proportion to (1 + SCV)/2 (Pollaczek-Khinchine), so a
	// server whose batches sometimes run several times slower congests at
	// a lower load than its mean line says (the budget's near-overload
	// test, nearOverload).
	ServiceSCV float64

	// Live is the mean latency the calls lived inside the proxy since the
	// last plan, under the rule then in force: a plan's promise checked
	// against what happened (the budget policy's live trim).
	Live Live

	// TimerLate is how late the proxy's timed waits ended past the
	// whole milliseconds Go's poller waits (the monitor measures it at
	// each wait a rule asked for); the budget's tail model counts it in
	// the holds it plans (livedHold). Zero Waits: not measured, as in a
	// simulation.
	TimerLate TimerLate

	// Decisions counts the rule's decisions since the last plan where the
	// live proxy counts them (zero: not counted, as in a simulation), and
	// OpenDecisions those at which a partner could have come. With none
	// open the rule sent every batch at once whatever its plan.
	Decisions, OpenDecisions int

	// Callers is what the dispatcher has learnt of the model's callers at
	// the plan (the zero value: nothing). When every one of them is a
	// synchronous client, the budget policy plans for that closed loop
	// rather than for Poisson arrivals (docs/ALGORITHMS.md, "The closed
	// loop, planned live").
	Callers Callers
}

// Callers is a model's recent callers as the dispatcher classifies them
// (dispatcher.SourceStats): closed-loop sources send their next request a
// think time after their previous answer.
type Callers struct {
	// Known is false while some calls came from sources the door cannot
	// name: the counts are then part of the callers only.
	Known bool
	// ClosedLoop counts the synchronous callers, Others the open-loop and
	// the not yet classified ones.
	ClosedLoop, Others int
	// ThinkMs is the closed-loop callers' mean gap from an answer to
	// their next request, as the proxy sees it.
	ThinkMs float64
}

// Closed reports whether every known caller is a synchronous client
// with a measured think time: the arrivals then come from a finite
// population whose rate falls as its requests queue.
func (c Callers) Closed() bool {
	return c.Known && c.ClosedLoop > 0 && c.Others == 0 && c.ThinkMs > 0 && !math.IsInf(c.ThinkMs, 0)
}

// Live is a measured mean latency over a number of calls, and their
// distribution where the monitor keeps it (nil: not kept, as in a
// simulation).
type Live struct {
	Calls  int
	MeanMs float64
	Hist   *Hist
}

// TimerLate is how late timed waits ended: Ms, a high quantile of the
// lateness past the whole milliseconds the wait was set for (negative
// when a busy process checked its timers early), over Waits waits.
type TimerLate struct {
	Waits int
	Ms    float64
}

// Observed reports whether the estimate carries a measured window.
func (e Estimate) Observed() bool { return e.Window > 0 }

// Validate names the first field that makes the estimate unusable for Plan.
func (e Estimate) Validate() error {
	switch {
	case e.Window < 0:
		return fmt.Errorf("estimate: window must be >= 0, got %v", e.Window)
	case e.Arrivals < 0:
		return fmt.Errorf("estimate: arrivals must be >= 0, got %d", e.Arrivals)
	case !(e.RatePerSec >= 0):
		return fmt.Errorf("estimate: rate must be >= 0 per second, got %v", e.RatePerSec)
	case e.MaxBatch < 1:
		return fmt.Errorf("estimate: max batch must be >= 1, got %d", e.MaxBatch)
	case e.Instances < 1:
		return fmt.Errorf("estimate: instances must be >= 1, got %d", e.Instances)
	}
	if err := e.Latency.Validate(); err != nil {
		return fmt.Errorf("estimate: %w", err)
	}
	if err := e.Extra.Validate(); err != nil {
		return fmt.Errorf("estimate: %w", err)
	}
	return nil
}

// Policy turns the monitor's estimates into rules.
//
// Plan is called by one goroutine at a time (the monitor, or the simulator),
// never on the request path; it may be slow and may keep state between calls.
// It must always return a usable Rule: a policy that cannot plan (an SMDP
// solve that does not converge, say) falls back to a safe rule and says why
// in the rule's Status().Note.
type Policy interface {
	Name() string
	Plan(e Estimate) Rule
}

// Objectiver is a Policy whose plan weighs a batch's energy: Objective
// says what its plan optimises, with the batch energy line zeta(b) known
// (hasEnergy) or not, so that a proxy without an energy meter says what
// its policy does instead of optimising joules.
type Objectiver interface {
	Objective(hasEnergy bool) string
}

// Resumer is a Policy that learns from live traffic and can take over what
// an earlier policy of the same name learned for the same model (the
// monitor calls Resume before the first Plan when a policy replaces one of
// another name and an older one of its name existed). Resume keeps only
// what is still valid for the new policy's settings.
type Resumer interface {
	Resume(earlier Policy)
}

// Rule is one planned decision rule. It is immutable, cheap, and safe for
// concurrent use: the dispatcher may consult it from several goroutines
// while the monitor swaps in the next one.
type Rule interface {
	// Decide is called on every queue event. The caller sends a batch when
	// Decision.Rows > 0 and then calls Decide again with the updated queue,
	// so a rule can start several batches at one instant.
	Decide(q Queue) Decision
	// Status describes the rule for metrics, logs and the status endpoint.
	Status() Status
}

// Queue is the state of one model queue at the instant of a decision.
type Queue struct {
	Now  time.Time
	Rows int // rows waiting; one caller may own several rows
	// OldestArrival is when the oldest waiting row arrived; zero when empty.
	OldestArrival time.Time
	// EarliestDeadline is the earliest SLA deadline among the waiting rows;
	// zero when none of them carries a deadline.
	EarliestDeadline time.Time

	InFlight     int // batches sent and not yet answered
	InFlightRows int // rows in those batches

	// Instances is the in-flight limit the caller enforces (batches the
	// upstream can run at once); MaxBatch the model's max_batch_size. The
	// caller never sends more than MaxBatch rows in a batch nor more than
	// Instances batches at once, whatever a rule answers.
	Instances int
	MaxBatch  int

	// IdleSources, when SourcesKnown, is how many of the model's recent
	// callers could still send a request while the queue waits: callers
	// whose connection carries one call at a time (HTTP/1.1) and has none
	// in the proxy. 0 means no partner can come from a known caller, only
	// from a new one: a rule that waits for arrivals should not.
	IdleSources  int
	SourcesKnown bool
}

// Free reports whether an instance is free to take a batch.
func (q Queue) Free() bool { return q.InFlight < q.Instances }

// Waited is how long the oldest waiting row has waited; zero when empty.
func (q Queue) Waited() time.Duration {
	if q.Rows == 0 || q.OldestArrival.IsZero() {
		return 0
	}
	return q.Now.Sub(q.OldestArrival)
}

// Decision is a rule's answer.
type Decision struct {
	// Rows > 0: send a batch of up to Rows rows now. The dispatcher packs
	// whole callers, so the batch may hold fewer rows, never more.
	Rows int
	// WakeAt, when Rows == 0: decide again no later than this even if no
	// arrival or completion happens. Zero means only on the next event; a
	// time not after Queue.Now is ignored.
	WakeAt time.Time
}

// Send is the decision to dispatch up to n rows now.
func Send(n int) Decision { return Decision{Rows: n} }

// WaitUntil is the decision to hold the queue until t (or the next event).
func WaitUntil(t time.Time) Decision { return Decision{WakeAt: t} }

// Wait is the decision to hold the queue until the next arrival or completion.
func Wait() Decision { return Decision{} }

// Status is a rule's self-description.
type Status struct {
	Policy string
	// BatchSize is the batch size the rule aims for (batchmonitor's pbs,
	// static's b, B_max for maxbatch and adhoc).
	BatchSize int
	// MaxWait is the longest the rule holds the oldest row of a partial
	// batch once an instance is free; zero when it never holds one.
	MaxWait time.Duration
	// Note says anything unusual, e.g. a fallback taken in Plan.
	Note string
	// PlannedMeanMs and PlannedP99Ms are the mean and the 99th percentile
	// of latency the rule's plan predicts (the budget policy's tail model);
	// zero when the rule predicts none.
	PlannedMeanMs, PlannedP99Ms float64
}

func (s Status) String() string {
	out := fmt.Sprintf("%s batch=%d max_wait=%v", s.Policy, s.BatchSize, s.MaxWait)
	if s.Note != "" {
		out += " (" + s.Note + ")"
	}
	return out
}

// factory is a registered policy: the type of its own options, and how
// it is built from them.
type factory struct {
	options reflect.Type
	build   func(Options) (Policy, error)
	// effective is a copy of the policy's own options as it runs them
	// (Defaulter), by pointer.
	effective func(Options) any
}

// Defaulter is a policy's options that know what their zero values stand
// for: Effective returns them with each zero value that stands for a fixed
// default replaced by it (latency_budget "" by 1.10x), so that what is in
// force can be shown as it runs. A zero the policy fills from the model
// (static's batch) or leaves to its rule stays zero.
type Defaulter[T any] interface {
	Effective() T
}

var (
	registryMu sync.RWMutex
	registry   = map[string]factory{}
)

// ErrUnknown is wrapped by New when no policy of that name is registered.
var ErrUnknown = errors.New("unknown policy")

// Register makes a policy available to New under name, with its own
// options, the struct T that build takes: from then on T is part of
// Options (OptionsOf, Each), its fields are keys of the configuration's
// policy section (their yaml and help tags: the file, the flags, the
// environment, docs/CONFIG.md), its Validate runs whenever Options are
// validated, and GET /policy shows them with the defaults their zero
// values stand for (when T is a Defaulter[T]). build makes the policy
// from its options once their Validate has passed, rejecting what only
// this policy cannot use. Several policies may share one options type.
//
// Register is meant for init functions and panics on an empty name, a nil
// factory, options that are no struct, or a duplicate, as those are
// programming errors.
func Register[T interface{ Validate() error }](name string, build func(T) (Policy, error)) {
	t := reflect.TypeFor[T]()
	if name == "" || build == nil || t.Kind() != reflect.Struct {
		panic("policy: Register needs a name, a factory and options that are a struct")
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("policy: Register called twice for " + name)
	}
	registry[name] = factory{
		options: t,
		build: func(o Options) (Policy, error) {
			opts := OptionsOf[T](o)
			if err := opts.Validate(); err != nil {
				return nil, err
			}
			return build(opts)
		},
		effective: func(o Options) any {
			opts := OptionsOf[T](o)
			if d, ok := any(opts).(Defaulter[T]); ok {
				opts = d.Effective()
			}
			return &opts
		},
	}
}

// lookup is the factory registered under name.
func lookup(name string) (factory, bool) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	f, ok := registry[name]
	return f, ok
}

// Effective is a pointer to a copy of the named policy's own options in o
// (a *BudgetOptions, ...), each zero value that stands for a fixed default
// replaced by it (Defaulter): the options as the policy runs them. False
// when no policy of that name is registered.
func Effective(name string, o Options) (any, bool) {
	f, ok := lookup(name)
	if !ok {
		return nil, false
	}
	return f.effective(o), true
}

// New builds the named policy from its own options in o.
func New(name string, o Options) (Policy, error) {
	f, ok := lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknown, name, strings.Join(Names(), ", "))
	}
	p, err := f.build(o)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", name, err)
	}
	return p, nil
}

// OptionsType is the type of the named policy's own options (BudgetOptions,
// ...), for the configuration to tell which keys a policy takes; false
// when no policy of that name is registered.
func OptionsType(name string) (reflect.Type, bool) {
	f, ok := lookup(name)
	return f.options, ok
}

// OptionTypes lists the registered policies' options types, each once, in
// the order of the policies' names: the parts of Options.
func OptionTypes() []reflect.Type {
	registryMu.RLock()
	defer registryMu.RUnlock()
	var out []reflect.Type
	for _, name := range slices.Sorted(maps.Keys(registry)) {
		if t := registry[name].options; !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// registeredOptions reports whether t is a registered policy's options
// type.
func registeredOptions(t reflect.Type) bool {
	registryMu.RLock()
	defer registryMu.RUnlock()
	for _, f := range registry {
		if f.options == t {
			return true
		}
	}
	return false
}

// Names lists the registered policies, sorted.
func Names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return slices.Sorted(maps.Keys(registry))
}
