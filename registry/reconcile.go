package registry

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
)

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
		if e, err = r.newEntry(ctx, name, mc, maxBatch, instances); err != nil {
			return err
		}
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

// newEntry makes a model batched: its policy, its monitor (seeded and
// started), the probe that tests it while it fails, and its entry, which
// it returns. Called with r.mu held.
func (r *Models) newEntry(ctx context.Context, name string, mc *triton.ModelConfig, maxBatch, instances int) (*entry, error) {
	pname := r.policyName(name)
	pol, in, err := r.newPolicy(name, pname)
	if err != nil {
		return nil, err
	}
	seed, from := r.seed(ctx, name)
	mon, err := monitor.New(monitor.Config{
		Model: name, Policy: pol, Window: r.cfg.Policy.Window,
		MaxBatch: maxBatch, Instances: instances, Seed: seed,
	})
	if err != nil {
		return nil, err
	}
	e := &entry{name: name, mon: mon, batched: true, seed: from, policy: in}
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
	return e, nil
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
