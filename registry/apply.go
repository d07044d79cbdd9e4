package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ratebatch/ratebatch/config"
)

// current is the configuration in force (Apply replaces it), without
// what PUT /policy set (see Config).
func (r *Models) current() *config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// Apply makes cfg the registry's configuration, as a reload does: each
// batched model gets the policy, the policy options, the limits (max batch
// size, batches in flight, queue rows, SLA) and the overrides cfg names,
// and keeps its monitor, with the line it learnt, and its queue, with the
// requests in it. What PUT /policy set at run time (SetPolicy) gives way
// to cfg. A batched model cfg passes through is passed through from now
// on: its queue is retired, the requests in it sent each as it came. It
// returns once every model has planned under its new policy, or ctx ends;
// its error names each model that could not take cfg whole.
func (r *Models) Apply(ctx context.Context, cfg *config.Config) error {
	r.mu.Lock()
	r.cfg = cfg
	clear(r.setNames)
	clear(r.setOptions)
	var names []string
	for name, e := range r.models {
		if e.batched {
			names = append(names, name)
			// Forgotten so that reconcile applies cfg's limits again.
			e.maxBatch = 0
		}
	}
	r.mu.Unlock()
	slices.Sort(names)
	var errs []error
	var planned []<-chan struct{}
	for _, name := range names {
		// The upstream's model config is read again: the limits are the
		// smaller of its and cfg's.
		if err := r.reconcile(ctx, name); err != nil {
			errs = append(errs, fmt.Errorf("%w (its limits are applied at the next discovery)", err))
		}
		pname := cfg.ModelPolicy(name)
		r.mu.Lock()
		e, ok := r.models[name]
		if !ok || !e.batched || pname == config.Passthrough { // passed through (reconcile retired it) or gone
			r.mu.Unlock()
			continue
		}
		pol, in, err := r.newPolicy(name, pname)
		if err == nil {
			e.policy = in
			planned = append(planned, e.mon.SetPolicy(pol))
		}
		r.mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range planned {
		select {
		case <-p:
		case <-ctx.Done():
			return errors.Join(append(errs, fmt.Errorf("configuration applied, but not every model has planned under it yet: %w", ctx.Err()))...)
		}
	}
	return errors.Join(errs...)
}
