package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/triton"
)

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
