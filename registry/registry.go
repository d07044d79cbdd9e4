// Package models keeps the set of models the proxy batches in step with the
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
	"os"
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
	"github.com/ratebatch/ratebatch/policy/smdp"
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
	budgets map[string]string // latency budgets set at run time, by model ("" for all)
	// unserved holds the models the configuration names that the upstream
	// does not serve, each with why, as of the last repository index read.
	unserved map[string]string

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
	probe     string // where the probe inference came from, or why there is none
	probeReq  dispatcher.Wire
}

// New returns an empty registry; call Discover (or Refresh, then Run).
func New(up Upstream, queues Queues, cfg *config.Config, log *slog.Logger) *Models {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Models{up: up, queues: queues, cfg: cfg, log: log, models: map[string]*entry{}, ctx: context.Background(),
		budgets: map[string]string{}}
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
	r.mu.Unlock()
	if r.cfg.Discovery <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(r.cfg.Discovery)
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

// Refresh reads the upstream's ready models and reconciles.
func (r *Models) Refresh(ctx context.Context) error {
	idx, err := r.up.RepositoryIndex(ctx)
	r.mu.Lock()
	r.lastRun, r.lastErr = time.Now(), err
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnreachable, err)
	}
	r.noteUnserved(idx)
	var errs []error
	for _, ix := range idx {
		if ix.State != "" && ix.State != "READY" {
			continue
		}
		if err := r.reconcile(ctx, ix.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
			now[name] = "configured under models: but the upstream does not list it in its repository index (misspelt, or not in its model repository?); nothing is batched for it"
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

func (r *Models) reconcile(ctx context.Context, name string) error {
	mc, err := r.up.ModelConfig(ctx, name)
	if err != nil {
		return fmt.Errorf("model %s: reading config: %w", name, err)
	}
	override := r.cfg.Models[name]
	pname := r.cfg.ModelPolicy(name)
	ok, reason := mc.Batchable()
	if ok && pname == "passthrough" {
		ok, reason = false, "policy passthrough (configured)"
	}
	maxBatch := mc.MaxBatchSize
	if override.MaxBatchSize > 0 && override.MaxBatchSize < maxBatch {
		maxBatch = override.MaxBatchSize
	}
	instances := mc.Instances()
	if r.cfg.Policy.MaxInFlight > 0 {
		instances = r.cfg.Policy.MaxInFlight
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	e, known := r.models[name]
	if !ok {
		if !known {
			r.log.Info("model passed through, not batched", "model", name, "reason", reason)
			r.models[name] = &entry{name: name, reason: reason}
		}
		// A model that stopped being batchable keeps its queue until restart;
		// new requests of it still queue with the limits last known.
		return nil
	}
	if known && e.batched && e.maxBatch == maxBatch && e.instances == instances {
		return nil
	}
	if !known || !e.batched {
		pol, err := r.newPolicy(name, pname)
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
		e = &entry{name: name, mon: mon, batched: true, seed: from}
		probe, noProbe := r.probeFor(name, mc)
		e.probe, e.probeReq = probeSource(r.cfg.Models[name].Probe != "", noProbe), probe
		if noProbe != "" {
			r.log.Warn("a failing model is tested only by its callers' requests, and does not take the proxy out of service", "model", name, "why", noProbe)
		}
		if len(mc.DynamicBatching) > 0 && string(mc.DynamicBatching) != "null" {
			e.warning = "Triton's own dynamic batcher is on for this model: turn it off or set max_queue_delay_microseconds to 0, or both batchers wait"
			r.log.Warn(e.warning, "model", name)
		}
		r.models[name] = e
		r.startMonitor(e)
		r.log.Info("model batched", "model", name, "policy", pname, "max_batch_size", maxBatch, "instances", instances, "seed", from)
	} else {
		e.mon.SetLimits(maxBatch, instances)
	}
	e.maxBatch, e.instances = maxBatch, instances
	sla := r.cfg.Policy.SLA
	if override.SLA > 0 {
		sla = override.SLA
	}
	return r.queues.SetModel(dispatcher.ModelSpec{
		Name: name, MaxBatch: maxBatch, Instances: instances,
		QueueRows: r.cfg.Limits.QueueRows, SLA: sla, Planner: e.mon,
		HalfOutputs: mc.HalfOutputs(), Probe: e.probeReq,
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

// newPolicy builds the named policy with the configured options and the
// model's overrides of them.
func (r *Models) newPolicy(model, name string) (policy.Policy, error) {
	o := r.cfg.Policy.Options
	m := r.cfg.Models[model]
	if m.SLA > 0 {
		o.SLA = m.SLA
	}
	if o.Batch == 0 {
		o.Batch = max(m.MaxBatchSize, 0)
	}
	o.LatencyBudget = r.latencyBudget(model)
	pol, err := policy.New(name, o)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", model, err)
	}
	return pol, nil
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

// latencyBudget is the budget that applies to a model: set at run time
// (SetLatencyBudget), else the model's config, else policy.latency_budget.
// Called with r.mu held.
func (r *Models) latencyBudget(model string) string {
	if b, ok := r.budgets[model]; ok {
		return b
	}
	if b, ok := r.budgets[""]; ok {
		return b
	}
	if b := r.cfg.Models[model].LatencyBudget; b != "" {
		return b
	}
	return r.cfg.Policy.LatencyBudget
}

// SetPolicyBudget switches a batched model (or every one, for model "") to
// the budget policy with the given latency budget ("1.10x", "4ms"), which
// then stays that model's budget.
func (r *Models) SetPolicyBudget(ctx context.Context, model, budget string) error {
	if _, err := smdp.ParseBudget(budget); err != nil {
		return err
	}
	r.mu.Lock()
	prev, had := r.budgets[model]
	if model == "" {
		clear(r.budgets)
	}
	r.budgets[model] = budget
	r.mu.Unlock()
	if err := r.SetPolicy(ctx, model, policy.NameBudget); err != nil {
		r.mu.Lock()
		if had {
			r.budgets[model] = prev
		} else {
			delete(r.budgets, model)
		}
		r.mu.Unlock()
		return err
	}
	return nil
}

// SetPolicy switches a batched model (or every one, for model "") to the
// named policy at run time, and returns once each switched model publishes
// a rule of the new policy (or ctx ends), so the state read next is the new
// one.
func (r *Models) SetPolicy(ctx context.Context, model, name string) error {
	r.mu.Lock()
	var planned []<-chan struct{}
	for _, e := range r.models {
		if !e.batched || (model != "" && e.name != model) {
			continue
		}
		pol, err := r.newPolicy(e.name, name)
		if err != nil {
			r.mu.Unlock()
			return err
		}
		planned = append(planned, e.mon.SetPolicy(pol))
	}
	r.mu.Unlock()
	if len(planned) == 0 {
		return fmt.Errorf("no batched model %q", model)
	}
	for _, p := range planned {
		select {
		case <-p:
		case <-ctx.Done():
			return fmt.Errorf("policy %s set, but its first rule is not planned yet: %w", name, ctx.Err())
		}
	}
	return nil
}

// Status is one model's state for the status endpoint.
type Status struct {
	Model   string `json:"model"`
	Batched bool   `json:"batched"`
	Reason  string `json:"reason,omitempty"`
	Seed    string `json:"seed,omitempty"`
	Warning string `json:"warning,omitempty"`
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
			out = append(out, Status{Model: name, Reason: "not served by the upstream", Warning: why})
		}
	}
	for _, e := range r.models {
		s := Status{Model: e.name, Batched: e.batched, Reason: e.reason, Seed: e.seed, Warning: e.warning, Probe: e.probe}
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
