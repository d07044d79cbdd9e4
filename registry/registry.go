// Package registry keeps the set of models the proxy batches in step with the
// upstream: it discovers them (repository index, model config), gives each a
// monitor seeded from a profile or the upstream's statistics and a policy
// from the configuration, registers it with the dispatcher, and re-reads the
// upstream periodically so loads, unloads and config changes take effect.
package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/regression"
)

// Upstream is the part of the upstream's management API discovery reads.
type Upstream interface {
	RepositoryIndex(ctx context.Context) ([]triton.IndexEntry, error)
	ModelConfig(ctx context.Context, model string) (*triton.ModelConfig, error)
	ModelStats(ctx context.Context, model string) ([]triton.BatchStat, error)
}

// Queues is the dispatcher as the registry drives it.
type Queues interface {
	SetModel(s dispatcher.ModelSpec) error
	// RetireModel stops batching a model, answering what its queue holds
	// (a later SetModel batches it again).
	RetireModel(name string)
	// Unready is the queues' verdict on the upstream (door.Health): why
	// it should not be sent traffic, "" when it should.
	Unready() string
}

// ErrUnreachable wraps a failure to read the upstream's model list at all,
// as opposed to trouble with one model.
var ErrUnreachable = errors.New("reading the upstream's repository index")

// Models owns the per-model monitors.
type Models struct {
	up     Upstream
	queues Queues
	cfg    *config.Config
	log    *slog.Logger

	mu     sync.Mutex
	models map[string]*entry
	ctx    context.Context      // monitors' lifetime, set by Run
	tried  map[string]time.Time // on-demand lookups, by model
	// looking holds the on-demand lookups in progress, each closed when
	// it ends: the model's other first requests wait for it.
	looking map[string]chan struct{}
	lastErr error
	lastRun time.Time
	// setNames and setOptions are what PUT /policy set at run time, by
	// model ("" for all): the policy's name, and its options by their key
	// in the configuration's policy section, spelt as in the file. They
	// stay until a later change covers the model, or a restart.
	setNames   map[string]string
	setOptions map[string]map[string]string
	// unserved holds the models the configuration names that the upstream
	// does not serve, each with why, as of the last repository index read.
	unserved map[string]string

	// changing holds the models whose configuration Changed is reading
	// again, each true when told again meanwhile (follow.go).
	changing map[string]bool

	// discovered is set once the upstream's model list has been read.
	discovered atomic.Bool

	// statsTicker paces pollStats (nil: a time.Ticker); tests inject their
	// own ticks to see when the poller reads and when it gives up.
	statsTicker func(time.Duration) (<-chan time.Time, func())
}

type entry struct {
	name      string
	mon       *monitor.Monitor
	cancel    context.CancelFunc
	maxBatch  int
	instances int
	batched   bool
	reason    string // why not batched
	seed      string // where the tau(b) seed came from
	warning   string
	policy    InForce // the policy the monitor runs, as set
	probe     string  // where the probe inference came from, or why there is none
	probeReq  dispatcher.Wire
	// queue and half are the model's queue policy and half-precision
	// outputs as last given to its queue: a change gives it them anew.
	queue dispatcher.QueuePolicy
	half  []string
}

// New returns an empty registry; call Discover (or Refresh, then Run).
func New(up Upstream, queues Queues, cfg *config.Config, log *slog.Logger) *Models {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Models{up: up, queues: queues, cfg: cfg, log: log, models: map[string]*entry{}, ctx: context.Background(),
		setNames: map[string]string{}, setOptions: map[string]map[string]string{}}
}

// Retry delays of Discover's first read of the model list: doubling from
// the first to the last, so a proxy started before Triton finds it within a
// few seconds of its start without hammering it meanwhile.
var (
	discoverFirstRetry = 250 * time.Millisecond
	discoverMaxRetry   = 5 * time.Second
)

// Discover reads the upstream's models, retrying until the model list is
// read once (Triton may start after the proxy), then keeps them current as
// Run does, until ctx ends. Until that first read, Discovered is false and
// the proxy passes inference through.
func (r *Models) Discover(ctx context.Context) {
	// A panic (a malformed model config the reader trips on, say) restarts
	// discovery after a pause instead of ending the process.
	guard.Loop(ctx, r.log, "discovery", r.discover)
}

func (r *Models) discover(ctx context.Context) {
	if r.discovered.Load() { // restarted after a panic: the first read is done
		r.Run(ctx)
		return
	}
	for delay := discoverFirstRetry; ; delay = min(2*delay, discoverMaxRetry) {
		err := r.Refresh(ctx)
		if !errors.Is(err, ErrUnreachable) {
			r.discovered.Store(true)
			if err != nil {
				r.log.Warn("some models could not be read; retrying at the next discovery", "err", err)
			}
			break
		}
		r.log.Warn("model discovery failed; inference passes through until it succeeds", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
	r.Run(ctx)
}

// Discovered reports whether the upstream's model list has been read (by
// Discover).
func (r *Models) Discovered() bool { return r.discovered.Load() }

// Ready is the readiness of the proxy (/readyz, grpc.health.v1): the
// upstream's models are read, and, when the queues judge the upstream
// (*dispatcher.Dispatcher's Unready), it neither refuses connections nor
// fails every batched model (see Unready).
func (r *Models) Ready() bool { return r.Unready() == "" }

// Run re-reads the upstream every discovery interval until ctx ends; the
// monitors it started run until then too.
func (r *Models) Run(ctx context.Context) {
	r.mu.Lock()
	r.ctx = ctx
	for _, e := range r.models {
		r.startMonitor(e)
	}
	every := r.cfg.Discovery
	r.mu.Unlock()
	if every <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.Refresh(ctx); err != nil {
				r.log.Warn("model discovery failed; keeping the models known", "err", err)
			}
		}
	}
}

// MaxOnDemandLookups bounds the model names Ensure remembers having looked
// up within a discovery interval: a flood of made-up names in request paths
// must cost neither unbounded memory nor unbounded upstream lookups. Past
// it, unknown names are not looked up until old tries expire; the periodic
// discovery still finds new models.
const MaxOnDemandLookups = 1024

// Ensure learns a model the repository index did not list (servers such as
// PyTriton list none; a model may be loaded after the last refresh) the
// first time a request names it. Requests naming it while that lookup runs
// wait for it (or for ctx), so a burst at start is batched rather than
// passed through. Later calls return at once: a model is looked up at most
// once per discovery interval, so unknown names cost the upstream little.
func (r *Models) Ensure(ctx context.Context, model string) {
	r.mu.Lock()
	_, known := r.models[model]
	if busy, ok := r.looking[model]; ok && !known {
		r.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
		}
		return
	}
	last, tried := r.tried[model]
	if known || (tried && time.Since(last) < r.retryAfter()) {
		r.mu.Unlock()
		return
	}
	if r.tried == nil {
		r.tried = map[string]time.Time{}
	}
	now := time.Now()
	if !tried && len(r.tried) >= MaxOnDemandLookups {
		for name, at := range r.tried {
			if now.Sub(at) >= r.retryAfter() {
				delete(r.tried, name)
			}
		}
		if len(r.tried) >= MaxOnDemandLookups {
			r.mu.Unlock()
			return
		}
	}
	r.tried[model] = now
	if r.looking == nil {
		r.looking = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	r.looking[model] = done
	r.mu.Unlock()
	err := r.reconcile(ctx, model)
	r.mu.Lock()
	delete(r.looking, model)
	r.mu.Unlock()
	close(done)
	if err != nil {
		r.log.Debug("model not discovered on demand", "model", model, "err", err)
	}
}

func (r *Models) retryAfter() time.Duration {
	if r.cfg.Discovery > 0 {
		return r.cfg.Discovery
	}
	return 30 * time.Second
}

// Refresh reads the upstream's repository index and each ready model's
// configuration, and re-decides every model's mode: a model loaded since
// is batched or listed, one reloaded with another configuration takes
// its new mode and limits, one the index lists as not ready (unloaded)
// is forgotten, its queue retired. A model known but not in the index (a
// request found it: PyTriton lists none) has its configuration read
// again too, and is forgotten once the upstream no longer serves it. One
// configuration read per model per discovery interval: what re-deciding
// a reload made beside the proxy costs.
func (r *Models) Refresh(ctx context.Context) error {
	idx, err := r.up.RepositoryIndex(ctx)
	r.mu.Lock()
	r.lastRun, r.lastErr = time.Now(), err
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	ready := readiness(idx)
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(ready)) {
		if !ready[name] {
			continue
		}
		if err := r.reconcile(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range r.knownNames() {
		isReady, listed := ready[name]
		switch {
		case isReady:
		case listed:
			r.forget(name, "the upstream lists it as not ready")
		default:
			if err := r.reconcile(ctx, name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	r.lookUpConfigured(ctx, idx)
	r.noteUnserved(idx)
	return errors.Join(errs...)
}

// lookUpConfigured looks up by name each model the configuration's models:
// section names that the repository index omits altogether: a server that
// lists none (PyTriton) serves them all the same, and a model found so is
// batched from the start, not from its first request (Ensure). A name the
// upstream does not serve either is left to noteUnserved's warning; one
// the index lists in another state than READY is not loaded, and is not
// asked for.
func (r *Models) lookUpConfigured(ctx context.Context, idx []triton.IndexEntry) {
	known := r.knownNames()
	for _, name := range slices.Sorted(maps.Keys(r.current().Models)) {
		if slices.Contains(known, name) || slices.ContainsFunc(idx, func(ix triton.IndexEntry) bool { return ix.Name == name }) {
			continue // read above, or listed
		}
		if err := r.reconcile(ctx, name); err != nil {
			r.log.Debug("configured model not found by name", "model", name, "err", err)
		}
	}
}

// noteUnserved finds the models the configuration's models: section names
// that the upstream's repository index does not list as ready, and warns of
// each once, when it becomes unserved: a misspelt or unloaded model would
// otherwise be ignored without a word. A model the index omits but a
// request found (Ensure; PyTriton lists no models) counts as served.
func (r *Models) noteUnserved(idx []triton.IndexEntry) {
	listed := make(map[string]triton.IndexEntry, len(idx))
	for _, ix := range idx {
		listed[ix.Name] = ix
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := map[string]string{}
	for name := range r.cfg.Models {
		ix, ok := listed[name]
		_, known := r.models[name]
		switch {
		case !ok && !known:
			now[name] = "configured under models: but the upstream neither lists it in its repository index nor serves its config (misspelt, or not in its model repository?); nothing is batched for it"
		case ok && ix.State != "" && ix.State != "READY":
			why := "configured under models: but the upstream lists it as " + ix.State
			if ix.Reason != "" {
				why += " (" + ix.Reason + ")"
			}
			now[name] = why + "; nothing is batched for it until it is loaded"
		}
	}
	for name, why := range now {
		if r.unserved[name] != why {
			r.log.Warn("configured model not served by the upstream", "model", name, "why", why)
		}
	}
	r.unserved = now
}

// reconcile reads a model's configuration and gives the model the mode
// and limits it decides: batched (its queue set, or given the new limits)
// or passed through (its queue retired if it had one). A model whose
// configuration the upstream says it does not have is forgotten.
func (r *Models) reconcile(ctx context.Context, name string) error {
	mc, err := r.up.ModelConfig(ctx, name)
	if err != nil {
		if notServed(err) {
			r.forget(name, "the upstream does not serve it")
		}
		return fmt.Errorf("model %s: reading config: %w", name, err)
	}
	cfg := r.current()
	override := cfg.Models[name]
	ok, reason := decide(name, mc, cfg)
	maxBatch := mc.MaxBatchSize
	if override.MaxBatchSize > 0 && override.MaxBatchSize < maxBatch {
		maxBatch = override.MaxBatchSize
	}
	instances := mc.Instances()
	if cfg.Policy.MaxInFlight > 0 {
		instances = cfg.Policy.MaxInFlight
	}
	queue, queueErr := queuePolicy(mc)
	half := mc.HalfOutputs()

	r.mu.Lock()
	defer r.mu.Unlock()
	e, known := r.models[name]
	if !ok {
		r.passThrough(e, name, reason)
		return nil
	}
	if known && e.batched && e.maxBatch == maxBatch && e.instances == instances &&
		reflect.DeepEqual(e.queue, queue) && slices.Equal(e.half, half) {
		return nil
	}
	if !known || !e.batched {
		pname := r.policyName(name)
		pol, in, err := r.newPolicy(name, pname)
		if err != nil {
			return err
		}
		seed, from := r.seed(ctx, name)
		mon, err := monitor.New(monitor.Config{
			Model: name, Policy: pol, Window: r.cfg.Policy.Window,
			MaxBatch: maxBatch, Instances: instances, Seed: seed,
		})
		if err != nil {
			return err
		}
		e = &entry{name: name, mon: mon, batched: true, seed: from, policy: in}
		probe, noProbe := r.probeFor(name, mc)
		e.probe, e.probeReq = probeSource(r.cfg.Models[name].Probe != "", noProbe), probe
		if noProbe != "" {
			r.log.Warn("a failing model is tested only by its callers' requests, and does not take the proxy out of service", "model", name, "why", noProbe)
		}
		// A dynamic_batching section without a delay (a queue policy's
		// home) costs nothing: Triton's batcher then waits for nothing.
		if db, err := mc.Batching(); err == nil && db.MaxQueueDelayMicroseconds > 0 {
			e.warning = "Triton's own dynamic batcher waits for this model (max_queue_delay_microseconds > 0): turn it off or set the delay to 0, or both batchers wait"
			r.log.Warn(e.warning, "model", name)
		}
		r.models[name] = e
		r.startMonitor(e)
		r.log.Info("model batched", "model", name, "policy", pname, "max_batch_size", maxBatch, "instances", instances, "seed", from)
	} else {
		e.mon.SetLimits(maxBatch, instances)
	}
	e.maxBatch, e.instances = maxBatch, instances
	// policy.sla, as every policy that has it holds it
	sla := policy.OptionsOf[policy.SlackOptions](r.cfg.Policy.Options).SLA
	if override.SLA > 0 {
		sla = override.SLA
	}
	if queueErr != nil {
		r.log.Warn("the model's dynamic_batching section does not decode: its calls' timeouts and priorities are ignored, as for a model without it", "model", name, "err", queueErr)
	}
	e.queue, e.half = queue, half
	return r.queues.SetModel(dispatcher.ModelSpec{
		Name: name, MaxBatch: maxBatch, Instances: instances,
		QueueRows: r.cfg.Limits.QueueRows, SLA: sla, Planner: e.mon, Observer: e.mon, WatchCallers: e.mon.WatchCallers,
		HalfOutputs: half, Probe: e.probeReq, Queue: queue,
	})
}

// startMonitor runs e's monitor under the registry's context. Called with
// r.mu held.
func (r *Models) startMonitor(e *entry) {
	if e.mon == nil || e.cancel != nil || r.ctx == context.Background() {
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	e.cancel = cancel
	// Both recover from a panic and start again after a pause (guard.Loop):
	// a monitor's panic must cost its model a window's plan, not the process.
	go guard.Loop(ctx, r.log, "monitor", e.mon.Run)
	go guard.Loop(ctx, r.log, "stats", func(ctx context.Context) { r.pollStats(ctx, e.name, e.mon) })
}

// statsGiveUp is how many failed reads of a model's statistics, before any
// succeeded, make the registry stop asking: the server has none (or not at
// that path), and the monitor learns from round trips instead.
const statsGiveUp = 3

// pollStats reads the upstream's per-batch-size statistics of a model every
// slice of a window and hands them to its monitor, which learns tau(b) from their
// differences: the server's own compute time per batch, free of network,
// HTTP and queueing. It returns when ctx ends or the server has no
// statistics.
func (r *Models) pollStats(ctx context.Context, name string, mon *monitor.Monitor) {
	// As often as the monitor re-plans, so that from the second read on
	// (a slice after the model's first request) the fit is the server's.
	ticks, stop := r.newStatsTicker(mon.TickEvery())
	defer stop()
	failed, worked := 0, false
	for {
		stats, err := r.up.ModelStats(ctx, name)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failed++
			if !worked && failed >= statsGiveUp {
				r.log.Info("upstream has no batch statistics for the model; tau(b) is learnt from round trips", "model", name, "err", err)
				return
			}
		default:
			worked = true
			mon.ObserveServer(batchTotals(stats))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}

func (r *Models) newStatsTicker(d time.Duration) (<-chan time.Time, func()) {
	if r.statsTicker != nil {
		return r.statsTicker(d)
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// batchTotals sums a model's batch_stats over its versions, per batch size.
func batchTotals(stats []triton.BatchStat) []monitor.BatchTotal {
	by := map[int]*monitor.BatchTotal{}
	var out []monitor.BatchTotal
	for _, s := range stats {
		if s.BatchSize < 1 {
			continue
		}
		b := by[s.BatchSize]
		if b == nil {
			b = &monitor.BatchTotal{Batch: s.BatchSize}
			by[s.BatchSize] = b
		}
		b.Count += s.ComputeInfer.Count
		b.Time += time.Duration(s.ComputeNs())
	}
	for _, b := range by {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Batch < out[j].Batch })
	return out
}

// newPolicy builds the named policy for a model with the options that
// apply to it (options), and says what it is as set. Called with r.mu held.
func (r *Models) newPolicy(model, name string) (policy.Policy, InForce, error) {
	o, err := r.options(model)
	if err == nil {
		var pol policy.Policy
		if pol, err = policy.New(name, o); err == nil {
			return pol, InForce{Policy: name, Options: config.PolicyOptionsOf(name, o)}, nil
		}
	}
	return nil, InForce{}, fmt.Errorf("model %s: %w", model, err)
}

// options are the policy options that apply to a model: the policy
// section's, the model's overrides of them, then what PUT /policy set for
// every model and, last, for this one. Called with r.mu held.
func (r *Models) options(model string) (policy.Options, error) {
	o := r.cfg.Policy.Options
	m := r.cfg.Models[model]
	if m.SLA > 0 {
		policy.Each(&o, func(d *policy.DeadlineOptions) { d.SLA = m.SLA })
	}
	policy.Each(&o, func(s *policy.StaticOptions) {
		if s.Batch == 0 {
			s.Batch = max(m.MaxBatchSize, 0)
		}
	})
	if m.LatencyBudget != "" {
		policy.Each(&o, func(b *policy.BudgetOptions) { b.LatencyBudget = m.LatencyBudget })
	}
	for _, set := range []map[string]string{r.setOptions[""], r.setOptions[model]} {
		for k, v := range set {
			if err := config.SetPolicyOption(&o, k, v); err != nil {
				return o, err
			}
		}
	}
	return o, nil
}

// policyName is the policy a model that is batched runs: the one PUT
// /policy set for it, else for every model, else the configuration's.
// Called with r.mu held.
func (r *Models) policyName(model string) string {
	if n, ok := r.setNames[model]; ok {
		return n
	}
	if n, ok := r.setNames[""]; ok {
		return n
	}
	return r.cfg.ModelPolicy(model)
}

// seed finds the starting tau(b) line: the configured profile CSV, else the
// upstream's per-batch-size statistics, else the monitor's default.
func (r *Models) seed(ctx context.Context, name string) (*regression.Line, string) {
	if path := r.cfg.Models[name].ProfileCSV; path != "" {
		line, err := fitCSV(path)
		if err == nil {
			return line, "profile " + path
		}
		r.log.Warn("profile unusable; trying the upstream's statistics", "model", name, "path", path, "err", err)
	}
	stats, err := r.up.ModelStats(ctx, name)
	if err == nil {
		var samples []regression.Sample
		for _, s := range stats {
			if ms := s.MeanMs(); ms > 0 {
				samples = append(samples, regression.Sample{Batch: s.BatchSize, LatencyMs: ms, Weight: float64(s.ComputeInfer.Count)})
			}
		}
		if f, err := regression.FitSamples(samples, regression.Options{}); err == nil {
			return &f.Line, "upstream statistics"
		}
	}
	return nil, "default"
}

func fitCSV(path string) (*regression.Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	samples, err := regression.ReadCSV(f)
	if err != nil {
		return nil, err
	}
	fit, err := regression.FitSamples(samples, regression.Options{})
	if err != nil {
		return nil, err
	}
	return &fit.Line, nil
}

// InForce is a policy as it is set: its name and the options it takes,
// by key, spelt as in the configuration file, each with the default its
// zero value stands for where that is a fixed value (config.PolicyOptionsOf).
type InForce struct {
	Model   string         `json:"model,omitempty"`
	Policy  string         `json:"policy"`
	Options map[string]any `json:"options"`
}

// SetPolicy switches a batched model (or every one, for model "") to the
// named policy at run time, with options by their key in the
// configuration's policy section, spelt as in the file (latency_budget
// "1.10x"); options not given are the configuration's, or what an earlier
// change set for the model. The change stays the model's until a later
// one; one for every model replaces what earlier ones set per model, for
// the policy and for the options it names. SetPolicy returns the models
// switched once each publishes a rule of the new policy (or ctx ends), so
// the state read next is the new one; on an error nothing is switched. An
// option the named policy does not take (config.PolicyTakes) is refused.
func (r *Models) SetPolicy(ctx context.Context, model, name string, options map[string]string) ([]string, error) {
	var check policy.Options
	for _, k := range slices.Sorted(maps.Keys(options)) {
		// A key the policy does not take is a mistake said at once, not
		// an option ignored.
		if err := config.PolicyTakes(name, k); err != nil {
			return nil, err
		}
		if err := config.SetPolicyOption(&check, k, options[k]); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	names, opts := maps.Clone(r.setNames), maps.Clone(r.setOptions)
	undo := func() { r.setNames, r.setOptions = names, opts }
	r.record(model, name, options)
	type change struct {
		e   *entry
		pol policy.Policy
		in  InForce
	}
	var changes []change
	for _, e := range r.models {
		if !e.batched || (model != "" && e.name != model) {
			continue
		}
		pol, in, err := r.newPolicy(e.name, name)
		if err != nil {
			undo()
			r.mu.Unlock()
			return nil, err
		}
		changes = append(changes, change{e, pol, in})
	}
	if len(changes) == 0 {
		undo()
		r.mu.Unlock()
		return nil, fmt.Errorf("no batched model %q", model)
	}
	switched := make([]string, len(changes))
	planned := make([]<-chan struct{}, len(changes))
	for i, c := range changes {
		planned[i] = c.e.mon.SetPolicy(c.pol)
		c.e.policy = c.in
		switched[i] = c.e.name
	}
	r.mu.Unlock()
	sort.Strings(switched)
	for _, p := range planned {
		select {
		case <-p:
		case <-ctx.Done():
			return switched, fmt.Errorf("policy %s set, but its first rule is not planned yet: %w", name, ctx.Err())
		}
	}
	return switched, nil
}

// record notes a change by PUT /policy (see SetPolicy): the maps are
// replaced, not edited, so that SetPolicy can put the old ones back.
// Called with r.mu held.
func (r *Models) record(model, name string, options map[string]string) {
	names, opts := map[string]string{}, map[string]map[string]string{}
	for m, n := range r.setNames {
		if model != "" {
			names[m] = n
		}
	}
	for m, set := range r.setOptions {
		set = maps.Clone(set)
		if model == "" {
			for k := range options {
				delete(set, k)
			}
		}
		opts[m] = set
	}
	names[model] = name
	if opts[model] == nil {
		opts[model] = map[string]string{}
	}
	maps.Copy(opts[model], options)
	r.setNames, r.setOptions = names, opts
}

// Policies is the policy in force: for every batched model (Default, the
// configuration's policy section with what PUT /policy set for all) and
// for each batched model.
type Policies struct {
	Default InForce   `json:"default"`
	Models  []InForce `json:"models"`
}

// Policies returns the policy in force, the models sorted by name.
func (r *Models) Policies() Policies {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg := r.config()
	out := Policies{Default: InForce{Policy: cfg.Policy.Name, Options: config.PolicyOptionsOf(cfg.Policy.Name, cfg.Policy.Options)},
		Models: []InForce{}}
	for _, e := range r.models {
		if e.batched && e.mon != nil {
			in := e.policy
			in.Model = e.name
			out.Models = append(out.Models, in)
		}
	}
	sort.Slice(out.Models, func(i, j int) bool { return out.Models[i].Model < out.Models[j].Model })
	return out
}

// Config is the configuration in force: the one the registry was given,
// with the policy PUT /policy set for every model in its policy section
// (a change for one model shows in its Status instead).
func (r *Models) Config() config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.config()
}

func (r *Models) config() config.Config {
	c := *r.cfg
	if n, ok := r.setNames[""]; ok {
		c.Policy.Name = n
	}
	for k, v := range r.setOptions[""] {
		// Checked when set (SetPolicy).
		_ = config.SetPolicyOption(&c.Policy.Options, k, v)
	}
	return c
}

// Status is one model's state for the status endpoint.
type Status struct {
	Model string `json:"model"`
	// Mode is what the proxy does with the model's inference calls
	// (ModeBatched, ModePassthrough, ModeNotServed); Reason says why
	// when they are not batched.
	Mode    string `json:"mode"`
	Batched bool   `json:"batched"`
	// Policy and Options are the batched model's policy as set (InForce).
	Policy  string         `json:"policy,omitempty"`
	Options map[string]any `json:"options,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Seed    string         `json:"seed,omitempty"`
	Warning string         `json:"warning,omitempty"`
	// Probe says where the inference that tests the model while it fails
	// comes from (configured, synthesised), or why there is none.
	Probe string            `json:"probe,omitempty"`
	Rule  *monitor.Snapshot `json:"rule,omitempty"`
}

// Statuses returns every known model's state, and every configured model
// the upstream does not serve with a warning saying so, sorted by name.
func (r *Models) Statuses() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.models)+len(r.unserved))
	for name, why := range r.unserved {
		if _, known := r.models[name]; !known {
			out = append(out, Status{Model: name, Mode: ModeNotServed, Reason: "not served by the upstream", Warning: why})
		}
	}
	for _, e := range r.models {
		s := Status{Model: e.name, Mode: modeOf(e.batched), Batched: e.batched, Reason: e.reason, Seed: e.seed, Warning: e.warning, Probe: e.probe,
			Policy: e.policy.Policy, Options: e.policy.Options}
		if why, ok := r.unserved[e.name]; ok {
			s.Warning = strings.TrimPrefix(s.Warning+"; "+why, "; ")
		}
		if e.mon != nil {
			snap := e.mon.Snapshot()
			s.Rule = &snap
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}

// Monitors returns the batched models' monitors, for metrics.
func (r *Models) Monitors() []*monitor.Monitor {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*monitor.Monitor
	for _, e := range r.models {
		if e.mon != nil {
			out = append(out, e.mon)
		}
	}
	return out
}

// Monitor returns a batched model's monitor; false for a model not
// batched or not known.
func (r *Models) Monitor(model string) (*monitor.Monitor, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.models[model]
	if e == nil || !e.batched || e.mon == nil {
		return nil, false
	}
	return e.mon, true
}

// InForce returns the policy a batched model runs and its own options
// that are set (config.OwnOptions), as PUT /policy would put them back.
func (r *Models) InForce(model string) (name string, options map[string]string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.models[model]
	if e == nil || !e.batched || e.mon == nil {
		return "", nil, false
	}
	o, err := r.options(model)
	if err != nil {
		return e.policy.Policy, nil, true
	}
	return e.policy.Policy, config.OwnOptions(e.policy.Policy, o), true
}

// NewPolicy builds the named policy for a batched model as SetPolicy
// would switch it to with options set (over the model's own), then tune
// edits its options, without switching anything: a what-if replays it.
func (r *Models) NewPolicy(model, name string, set map[string]string, tune func(*policy.Options)) (policy.Policy, error) {
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if err := config.PolicyTakes(name, k); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	o, err := r.options(model)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if err := config.SetPolicyOption(&o, k, set[k]); err != nil {
			return nil, err
		}
	}
	if tune != nil {
		tune(&o)
	}
	return policy.New(name, o)
}
