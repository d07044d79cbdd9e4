package dispatcher

import "strings"

// RetireModel stops batching a model whose mode changed upstream (reloaded
// as decoupled, sequence or without a batch dimension, unloaded, or set to
// pass through): Model reports it not batched, so both doors pass its new
// calls through, and the calls already queued, with any that reach Submit
// meanwhile (a door that looked the model up just before), are sent each
// on its own at once, as they came, so that none is lost. Its health
// verdict is dropped: Triton's own readiness answers for it. A later
// SetModel batches it again, in the same queue. Retired queues are kept
// (one per model the upstream ever had) so that a late caller always
// finds its queue.
func (d *Dispatcher) RetireModel(name string) {
	d.mu.Lock()
	q, ok := d.models[name]
	if ok {
		delete(d.models, name)
		if d.retired == nil {
			d.retired = map[string]*modelQueue{}
		}
		d.retired[name] = q
	}
	d.mu.Unlock()
	if !ok {
		return
	}
	q.mu.Lock()
	q.retired = true
	q.health = modelHealth{}
	q.spec.Probe = Wire{} // a running probe loop ends at its next look
	q.mu.Unlock()
	q.signal()
}

// revive takes a retired queue back for SetModel, or nil when the model
// was never retired. Called with d.mu held.
func (d *Dispatcher) revive(name string) *modelQueue {
	q, ok := d.retired[name]
	if !ok {
		return nil
	}
	delete(d.retired, name)
	d.models[name] = q
	q.mu.Lock()
	q.retired = false
	q.mu.Unlock()
	return q
}

// queue finds a model's queue for Submit: a batched model's, or a retired
// one's, which still answers the calls that reach it.
func (d *Dispatcher) queue(model string) (*modelQueue, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	q, ok := d.models[model]
	if !ok {
		q, ok = d.retired[model]
	}
	return q, ok
}

// unknownModel tells Options.ModelChanged when the upstream answers a
// batched call with an error that says it does not serve the model or the
// version asked (Triton's "Request for unknown model: 'm' is not found",
// "... version 2 is not found"): the model was unloaded or reloaded beside
// the proxy, and its configuration is to be read again.
func (q *modelQueue) unknownModel(msg string) {
	if f := q.d.o.ModelChanged; f != nil && strings.Contains(msg, "unknown model") {
		f(q.name)
	}
}
