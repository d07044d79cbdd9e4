// Package dispatcher owns the live queues: one per model, split by batch key,
// forming batches as the model's current rule decides, sending each as one
// request to the upstream and handing every caller its own part of the
// answer. Every accepted call gets exactly one Result.
package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/policy"
)

// Planner is a model's current batching rule as the dispatcher reads it
// (package monitor implements it). What the dispatcher sees goes the other
// way, to the model's Observer.
type Planner interface {
	Rule() policy.Rule
	Changed() <-chan struct{}
}

// ModelSpec describes one batchable model.
type ModelSpec struct {
	Name      string
	MaxBatch  int // rows per batch, the upstream's max_batch_size or less
	Instances int // batches in flight at once
	QueueRows int // rows waiting before Submit refuses with 503
	// SLA is the latency target given to calls without a timeout (slack).
	SLA     time.Duration
	Planner Planner
	// Observer, when set, learns the model's events (with
	// Options.Observer): its monitor.
	Observer Observer
	// WatchCallers, when set, is given the reader of what the queue has
	// learnt of the model's callers (SourceStats, as a plan reads them)
	// when the model is set: a plan for a closed loop of synchronous
	// clients reads it (the budget policy).
	WatchCallers func(read func(now time.Time) policy.Callers)
	// HalfOutputs are the model's FP16 and BF16 outputs, which Triton does
	// not write as JSON: a lone call asking for one in JSON is merged, not
	// sent as it came, so that the proxy writes it (kserve.HalfInJSON).
	HalfOutputs []string
	// Probe, when its Body is set, is the inference the proxy sends on its
	// own while the model fails (probe.go): one row the model accepts.
	// Without it only a caller's batch can find the model healed.
	Probe Wire
	// Queue is the model's queue policy in Triton: each call's priority
	// level and timeout follow it (schedule.go).
	Queue QueuePolicy
}

// Options configure a Dispatcher.
type Options struct {
	Upstream Upstream
	// Retries of a batch after a connection error, each after a jittered
	// pause growing from RetryBackoff (0: 10ms) to 100ms.
	Retries      int
	RetryBackoff time.Duration
	// Hold is how long a caller waits for an upstream that refuses
	// connections to come back before it gets 503, counted from its arrival;
	// a caller's own Expire (Triton's timeout parameter) wins when earlier.
	// 0: no hold, the batch fails once its retries are spent.
	Hold time.Duration
	// RetryAfter is what 503s on overload advise.
	RetryAfter time.Duration
	Metrics    *Metrics
	// Observer, when set, learns every model's events (with each one's
	// ModelSpec.Observer): the energy meter, the decision log.
	Observer Observer
	Now      func() time.Time
	// Logger gets the stacks of recovered panics and the outlier
	// detector's changes; nil: slog's default.
	Logger *slog.Logger
	// Outlier configures passive outlier detection; zero: off.
	Outlier Outlier
	// Check configures the active health check (check.go); zero: off.
	Check HealthCheck
	// ModelChanged, when set, is told of a model the upstream says it
	// does not serve (an unknown model or version): the registry reads its
	// configuration again. It must not block.
	ModelChanged func(model string)
}

// Dispatcher routes calls to model queues.
type Dispatcher struct {
	o      Options
	now    func() time.Time
	health *upstreamHealth
	mu     sync.RWMutex
	models map[string]*modelQueue
	// retired holds the queues of models no longer batched (RetireModel).
	retired map[string]*modelQueue
	// draining is set under mu when Drain begins: SetModel adds no queue
	// after it, so no queue loop joins wg while Drain waits on it (a
	// discovery still running at shutdown would otherwise race the Wait).
	draining bool
	wg       sync.WaitGroup // queue loops
	ctx      context.Context
	cancel   context.CancelFunc
	probes   *probes // active recovery (probe.go)
	checks   checks  // the active health check (check.go)
}

// New returns a dispatcher with no models.
func New(o Options) *Dispatcher {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{o: o, now: o.Now, health: newUpstreamHealth(), models: map[string]*modelQueue{}, ctx: ctx, cancel: cancel,
		probes: newProbes()}
	d.startChecks()
	return d
}

// Errors a caller may get before its call is queued.
var (
	ErrUnknownModel = errors.New("model is not batched by the proxy")
	ErrClosed       = errors.New("proxy is shutting down")
)

// SetModel adds a model or updates its limits and planner.
func (d *Dispatcher) SetModel(s ModelSpec) error {
	if s.Name == "" || s.Planner == nil || s.MaxBatch < 1 || s.QueueRows < 1 {
		return fmt.Errorf("dispatcher: model %q: need a name, a planner, max batch >= 1 and queue rows >= 1", s.Name)
	}
	s.Instances = max(s.Instances, 1)
	obs := join(s.Observer, d.o.Observer)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.draining {
		return fmt.Errorf("dispatcher: model %q: %w", s.Name, ErrClosed)
	}
	q, ok := d.models[s.Name]
	if !ok {
		q = d.revive(s.Name)
	}
	if q != nil {
		q.mu.Lock()
		q.spec, q.obs = s, obs
		q.mu.Unlock()
		q.watch()
		q.signal()
		return nil
	}
	q = &modelQueue{d: d, name: s.Name, spec: s, obs: obs, keys: map[string]*keyQueue{}, wake: make(chan struct{}, 1), idle: make(chan struct{}),
		series: d.o.Metrics.bind(s.Name)}
	d.models[s.Name] = q
	q.watch()
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		// A panic of the decision loop restarts it; the queue and its
		// callers are kept (see form).
		guard.Loop(d.ctx, d.o.Logger, "decision", q.run)
	}()
	return nil
}

// Model reports whether a model is batched, and its max batch size.
func (d *Dispatcher) Model(name string) (maxBatch int, ok bool) {
	d.mu.RLock()
	q, ok := d.models[name]
	d.mu.RUnlock()
	if !ok {
		return 0, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.spec.MaxBatch, true
}

// Callers returns a model's callers as its plan reads them
// (ModelSpec.WatchCallers), and false for a model without a queue.
func (d *Dispatcher) Callers(model string) (policy.Callers, bool) {
	d.mu.RLock()
	q, ok := d.models[model]
	d.mu.RUnlock()
	if !ok {
		return policy.Callers{}, false
	}
	return q.callers(d.now()), true
}

// Submit queues a call and waits for its result. If ctx ends while the call
// is still queued (the client went away), the call leaves the queue and
// Submit returns ctx's error; once its batch is sent, Submit waits for it.
func (d *Dispatcher) Submit(ctx context.Context, model string, c *Call) Result {
	q, ok := d.queue(model)
	if !ok {
		return Result{Err: fmt.Errorf("%w: %s", ErrUnknownModel, model)}
	}
	if err := q.enqueue(ctx, c); err != nil {
		return Result{Err: err}
	}
	// The caller decides, and runs its own batch if one leaves now: at low
	// load a request then never waits for another goroutine to wake.
	if mine := q.afterArrival(c); mine != nil {
		q.execute(mine)
		q.afterOwnBatch()
	}
	// At low load the caller ran the batch itself and its answer is there:
	// take it without the two-way select, which locks both channels.
	var r Result
	select {
	case r = <-c.done:
	default:
		// Waiting: decode what the proxy deferred now, while there is
		// nothing else to do, rather than on the way of the batch that
		// merges the call. Data that does not decode fails only its call.
		if err := c.readData(); err != nil && q.withdraw(c) {
			q.series.answeredErr.Inc()
			return Result{Err: err}
		}
		select {
		case r = <-c.done:
		case <-ctx.Done():
			if q.withdraw(c) {
				d.o.Metrics.rejected(model, "client_gone")
				q.series.answeredErr.Inc()
				return Result{Err: ctx.Err()}
			}
			r = <-c.done // already in a batch: its answer is on the way
		}
	}
	// A batch formed by another goroutine comes to its first caller to
	// run (see launch); the caller's own answer follows from it.
	for r.run != nil {
		q.execute(r.run)
		q.afterOwnBatch()
		r = <-c.done
	}
	if r.obs != nil {
		r.arrived = c.Arrived() // for Delivered
	}
	return r
}

// Delivered tells the dispatcher that r, Submit's result, has been written
// to its caller (encoded into its connection's buffers): the time to there
// is the call's latency as the proxy can see it, which the model's
// observers learn (Observer.Answered) when r is the answer of a batch that
// succeeded. The encoding of a merged batch's parts and the wake-up of its
// callers are costs of batching that a plan must price, so the door, which
// alone sees the answer written, tells it. Call it before r.Release.
func (d *Dispatcher) Delivered(r Result) {
	if r.obs == nil {
		return
	}
	now := d.now()
	r.obs.Answered(Answer{Model: r.model, Arrived: r.arrived, Latency: now.Sub(r.arrived), After: now.Sub(r.answered), Calls: r.calls})
}

// Drain sends everything queued without waiting for fuller batches and
// returns once every queue is empty and no batch is in flight, or when ctx
// ends; calls still queued then get 503. New calls are refused from the
// start of Drain.
func (d *Dispatcher) Drain(ctx context.Context) error {
	d.mu.Lock()
	d.draining = true
	qs := make([]*modelQueue, 0, len(d.models)+len(d.retired))
	for _, q := range d.models {
		qs = append(qs, q)
	}
	for _, q := range d.retired {
		qs = append(qs, q)
	}
	d.mu.Unlock()
	for _, q := range qs {
		q.mu.Lock()
		q.draining = true
		q.mu.Unlock()
		q.signal()
	}
	var err error
	for _, q := range qs {
		select {
		case <-q.idle:
		case <-ctx.Done():
			err = fmt.Errorf("drain: %w", ctx.Err())
			q.failQueued(http.StatusServiceUnavailable, "proxy shut down before the request was sent")
		}
	}
	d.cancel()
	d.wg.Wait()
	d.checks.wg.Wait()
	d.probes.stop()
	return err
}

// Snapshot is one model queue's state for metrics and status.
type Snapshot struct {
	Model        string `json:"model"`
	QueuedRows   int    `json:"queued_rows"`
	Keys         int    `json:"batch_keys"`
	InFlight     int    `json:"in_flight"`
	InFlightRows int    `json:"in_flight_rows"`
	MaxBatch     int    `json:"max_batch_size"`
	Instances    int    `json:"instances"`
	// BatchesSent and RowsSent count every batch sent since the start;
	// their ratio is the mean batch size.
	BatchesSent int64 `json:"batches_sent"`
	RowsSent    int64 `json:"rows_sent"`
	// Counts are the callers answered and the requests the upstream
	// answered, as Triton's statistics count them.
	Counts
	// Failing is the outlier detector's verdict (Options.Outlier), with its
	// reason and the server errors in a row counted so far.
	Failing           bool   `json:"failing"`
	FailingReason     string `json:"failing_reason,omitempty"`
	ConsecutiveErrors int    `json:"consecutive_errors"`
	// SuspectBatches are the batches in a row answered only with Triton's
	// 500 (outlier.go's suspect verdict), which the probe settles.
	SuspectBatches int `json:"suspect_batches"`
	// LastProbe is the last active probe of the model (probe.go).
	LastProbe *ProbeReport `json:"last_probe,omitempty"`
	// Sources are the callers' connections active within SourceIdleFor,
	// by kind, busy or idle, and their think time.
	Sources SourceStats `json:"sources"`
}

// Snapshots returns every model queue's state.
func (d *Dispatcher) Snapshots() []Snapshot {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]Snapshot, 0, len(d.models))
	for name, q := range d.models {
		q.mu.Lock()
		out = append(out, Snapshot{Model: name, QueuedRows: q.rows, Keys: len(q.keys), InFlight: q.inFlight,
			InFlightRows: q.inFlightRows, MaxBatch: q.spec.MaxBatch, Instances: q.spec.Instances,
			BatchesSent: q.batchesSent, RowsSent: q.rowsSent,
			Failing: q.health.failing, FailingReason: q.health.reason, ConsecutiveErrors: q.health.consecutive,
			SuspectBatches: q.health.suspects,
			Sources:        q.src.stats(d.now()), Counts: q.series.counts()})
		q.mu.Unlock()
	}
	d.probes.annotate(out)
	return out
}

// modelQueue is one model's queue and its decision loop.
type modelQueue struct {
	d      *Dispatcher
	name   string // = spec.Name, which never changes: readable without mu
	series *series
	mu     sync.Mutex
	spec   ModelSpec
	obs    Observer // spec.Observer joined with Options.Observer; nil: none
	keys   map[string]*keyQueue
	// spare is a key queue emptied and taken out of keys, kept for the next
	// new key: a model whose queue empties at every batch (any light load)
	// would otherwise build a key queue and its arrays for every request.
	spare *keyQueue
	rows  int // live rows over all keys
	// order is the scratch of a decision pass's keys (byLevel).
	order []*keyQueue

	inFlight, inFlightRows int
	batchesSent, rowsSent  int64
	src                    sources
	draining               bool
	// retired: the model is no longer batched (RetireModel); what still
	// reaches the queue goes at once, each call alone.
	retired    bool
	idleClosed bool
	idle       chan struct{} // closed when draining and empty
	wake       chan struct{}
	// ruleBroken is the rule that last panicked in form, nil if none.
	ruleBroken policy.Rule
	health     modelHealth // outlier detection (outlier.go)
}

func (q *modelQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// enqueue admits a call to the model's queue, or refuses it (shutting down,
// too many rows, a failing model, a full queue), and tells the observer of
// its arrival. It stays one function: the checks and the push are one
// critical section under q.mu.
func (q *modelQueue) enqueue(ctx context.Context, c *Call) error {
	m := q.d.o.Metrics
	if c.Rows < 1 {
		return kserve.BadRequest("inference request has no rows")
	}
	now := q.d.now()
	q.mu.Lock()
	switch {
	case q.draining:
		q.mu.Unlock()
		m.rejected(q.name, "shutdown")
		return &kserve.Error{Status: http.StatusServiceUnavailable, Msg: ErrClosed.Error()}
	case c.Rows > q.spec.MaxBatch && !q.retired: // a retired model's limits are Triton's to judge
		maxBatch := q.spec.MaxBatch
		q.mu.Unlock()
		m.rejected(q.name, "batch_size")
		return kserve.BadRequest("inference request batch-size must be <= %d for '%s'", maxBatch, q.name)
	case q.health.failing && q.admitFailing(now) != nil:
		err := q.failingError()
		q.mu.Unlock()
		m.rejected(q.name, "model_failing")
		return err
	case q.rows+c.Rows > q.spec.QueueRows:
		q.mu.Unlock()
		m.rejected(q.name, "queue_full")
		return &queueFull{&kserve.Error{Status: http.StatusServiceUnavailable,
			Msg: fmt.Sprintf("model '%s' queue is full (%d rows waiting); retry later", q.name, q.spec.QueueRows)}}
	}
	c.arrived, c.ctx = now, ctx
	q.schedule(c, now)
	if c.Deadline.IsZero() {
		if !c.Expire.IsZero() {
			c.Deadline = c.Expire
		} else if q.spec.SLA > 0 {
			c.Deadline = now.Add(q.spec.SLA)
		}
	}
	if c.done == nil { // a released call keeps its channel (Release)
		c.done = make(chan Result, 1)
	}
	k := q.keys[c.Key]
	if k == nil {
		if k = q.spare; k != nil {
			q.spare, k.key = nil, c.Key
		} else {
			k = &keyQueue{key: c.Key}
		}
		q.keys[c.Key] = k
	}
	k.push(c)
	q.rows += c.Rows
	caller := q.src.arrive(c.Source, now)
	obs, queued := q.obs, q.rows
	q.mu.Unlock()
	q.series.accepted.Inc()
	if obs != nil {
		obs.Arrived(Arrival{Model: q.name, At: now, Call: c, Rows: c.Rows, Queued: queued, Caller: caller})
	}
	return nil
}

// withdraw takes a call that is still queued out of its queue and reports
// whether it was; false means a batch has taken it. The cancel and the
// uncounting of its rows happen under one lock: a decision pass drops
// cancelled calls and deletes key queues that end up empty, and rows
// uncounted after that would never be, shrinking limits.queue_rows for good.
func (q *modelQueue) withdraw(c *Call) bool {
	q.mu.Lock()
	if !c.state.CompareAndSwap(stateQueued, stateCancelled) {
		q.mu.Unlock()
		return false
	}
	q.keys[c.Key].cancel(c) // a queued call is in its key queue
	q.rows -= c.Rows
	q.src.leave(c.Source, q.d.now())
	q.mu.Unlock()
	q.signal()
	return true
}

// failQueued answers every queued call with an error.
func (q *modelQueue) failQueued(status int, msg string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for key, k := range q.keys {
		calls, rows := k.take(int(^uint(0)>>1), nil)
		q.rows -= rows
		now := q.d.now()
		for _, c := range calls {
			q.src.leave(c.Source, now)
			q.deliver(c, Result{Err: &kserve.Error{Status: status, Msg: msg}})
		}
		delete(q.keys, key)
	}
}

func (q *modelQueue) deliver(c *Call, r Result) {
	if r.Err != nil {
		q.series.answeredErr.Inc()
	} else {
		q.series.answeredOK.Inc()
	}
	c.done <- r
}

// batch is a batch as its runner has it: what observers see (Batch) and
// the model's settings when it left.
type batch struct {
	Batch
	planner Planner  // the model's planner when the batch left
	obs     Observer // the model's observer when the batch left; nil: none
	// instances is the model's instance limit when the batch left: it also
	// bounds the caller-by-caller resends of a batch the upstream refused.
	instances int
	// halfOutputs is the model's ModelSpec.HalfOutputs when the batch left.
	halfOutputs []string
}
