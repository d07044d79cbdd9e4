package registry

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/triton"
)

// A model's mode follows Triton's: the registry re-decides it whenever the
// model's configuration may have changed, from the periodic discovery
// (Refresh), a repository load or unload passed through a door, or a
// batched call the upstream answered as for a model it does not serve
// (Changed). A model that stops being batched has its queue retired: the
// calls in it are sent each as it came, none lost, and the doors pass the
// model's next calls through.

// passThrough makes a model passed through for reason: its queue retired
// and its monitor stopped when it was batched, its entry kept with the
// reason. Called with r.mu held.
func (r *Models) passThrough(e *entry, name, reason string) {
	switch {
	case e == nil:
		r.log.Info("model passed through, not batched", "model", name, "reason", reason)
	case e.batched:
		r.retire(e)
		r.log.Warn("model no longer batched: its calls pass through", "model", name, "reason", reason)
	case e.reason == reason:
		return
	}
	r.models[name] = &entry{name: name, reason: reason}
}

// retire stops batching e's model: its queue retired, its monitor's loops
// ended. Called with r.mu held.
func (r *Models) retire(e *entry) {
	r.queues.RetireModel(e.name)
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
	}
}

// forget drops a model the upstream no longer serves (unloaded, or gone
// from its repository): its queue retired if it was batched, so that its
// calls pass through and Triton answers them. Unknown names cost nothing.
func (r *Models) forget(name, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.models[name]
	if !ok {
		return
	}
	if e.batched {
		r.retire(e)
	}
	delete(r.models, name)
	r.log.Info("model forgotten: its calls pass through", "model", name, "why", why)
}

// notServed reports whether a configuration read failed because the
// upstream does not serve the model (Triton's 400 "Request for unknown
// model", a 404), not because it could not be asked.
func notServed(err error) bool {
	var se *triton.StatusError
	return errors.As(err, &se) && (se.Status == http.StatusBadRequest || se.Status == http.StatusNotFound)
}

// readiness is each model of the repository index, ready when one of its
// versions is READY (a state left empty counts as ready: servers that do
// not say).
func readiness(idx []triton.IndexEntry) map[string]bool {
	ready := make(map[string]bool, len(idx))
	for _, ix := range idx {
		ready[ix.Name] = ready[ix.Name] || ix.State == "" || ix.State == "READY"
	}
	return ready
}

// knownNames lists the models the registry knows.
func (r *Models) knownNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.models))
	for name := range r.models {
		names = append(names, name)
	}
	return names
}

// changeTimeout bounds one re-read of a changed model.
const changeTimeout = 10 * time.Second

// Changed tells the registry that a model may have changed upstream: a
// door passed a repository load or unload of it through, or the upstream
// answered a batched call of it as for a model it does not serve. The
// registry reads the repository index and the model's configuration again
// soon, off the caller's goroutine, and re-decides its mode. Calls for one
// model coalesce (one read at a time, one more if told again meanwhile);
// at most MaxOnDemandLookups models are read at once, past which the next
// discovery catches the change.
func (r *Models) Changed(model string) {
	if model == "" {
		return
	}
	r.mu.Lock()
	if again, busy := r.changing[model]; busy {
		if !again {
			r.changing[model] = true
		}
		r.mu.Unlock()
		return
	}
	if len(r.changing) >= MaxOnDemandLookups {
		r.mu.Unlock()
		return
	}
	if r.changing == nil {
		r.changing = map[string]bool{}
	}
	r.changing[model] = false
	base := r.ctx
	r.mu.Unlock()
	go r.reread(base, model)
}

// reread re-decides a changed model until no change was told meanwhile.
func (r *Models) reread(base context.Context, model string) {
	defer func() {
		if v := recover(); v != nil { // this goroutine's panic would end the process
			guard.Recovered(r.log, "discovery", v)
			r.mu.Lock()
			delete(r.changing, model)
			r.mu.Unlock()
		}
	}()
	for {
		ctx, cancel := context.WithTimeout(base, changeTimeout)
		if err := r.recheck(ctx, model); err != nil {
			r.log.Debug("changed model not read again", "model", model, "err", err)
		}
		cancel()
		r.mu.Lock()
		if !r.changing[model] {
			delete(r.changing, model)
			r.mu.Unlock()
			return
		}
		r.changing[model] = false
		r.mu.Unlock()
	}
}

// recheck re-decides one model as Refresh would: forgotten when the index
// lists it and no version is ready, else its configuration read again.
func (r *Models) recheck(ctx context.Context, model string) error {
	idx, err := r.up.RepositoryIndex(ctx)
	if err != nil {
		return err
	}
	if isReady, listed := readiness(idx)[model]; listed && !isReady {
		r.forget(model, "the upstream lists it as not ready")
		return nil
	}
	return r.reconcile(ctx, model)
}
