// Package whatif answers, for one model, what other settings would have
// given on its own recent traffic: it keeps each model's recent arrivals
// (a bounded ring, recorded as a dispatcher.Observer), exports them as a
// rate series that `ratebatch load --trace` and `ratebatch sim --trace`
// read, and replays them (package replay) through the policy in force,
// ad-hoc and a grid of budgets, SLOs and maxbatch delays on the line and
// the energy the proxy learnt, each against ad-hoc and against what was
// lived over the same minutes, the Pareto front marked.
package whatif

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/power"
)

// Defaults of Options.
const (
	// DefaultArrivals is the arrivals (and answers) each model keeps: at
	// 8 bytes each, an answer's wait after its batch 8 more, 1.5 MiB a
	// model; ten minutes at 109 requests a second.
	DefaultArrivals = 65536
	// DefaultModels is how many models are recorded: the first that
	// receive calls.
	DefaultModels = 3
	// DefaultMaxMinutes is the longest window answered, and the span of
	// the per-second samples kept.
	DefaultMaxMinutes = 30
)

// batchesPer is how many arrivals' room a model gives to batches: a batch
// is four words, and holds at least one arrival.
const batchesPer = 8

// Bytes is the most memory the rings of a recorder with these options
// hold: per model, its arrivals, answers and waits after a batch (8 bytes
// each), its batches (batchBytes, one for every batchesPer arrivals) and
// its per-second samples (sampleBytes).
func (o Options) Bytes() int64 {
	o = o.withDefaults()
	perModel := int64(o.Arrivals)*24 + int64(o.Arrivals/batchesPer+1)*batchBytes + int64(o.MaxMinutes*60+1)*sampleBytes
	return int64(o.Models) * perModel
}

// Options configure a Recorder.
type Options struct {
	// Arrivals is how many arrivals, and answers, each model keeps
	// (DefaultArrivals when 0).
	Arrivals int
	// Models is how many models are recorded at most (DefaultModels when
	// 0): the first ones to receive a call; later ones are not.
	Models int
	// MaxMinutes is the longest window answered (DefaultMaxMinutes when
	// 0).
	MaxMinutes int
	// Meter reads the power meter (power.Meter.Snapshot); nil: no energy.
	Meter func() power.Snapshot
	// Callers reads a model's callers as its plan reads them
	// (dispatcher.Dispatcher.Callers); nil: none known.
	Callers func(model string) (policy.Callers, bool)
	// Now is the clock (default time.Now); the dispatcher's events carry
	// times of the same clock.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Arrivals <= 0 {
		o.Arrivals = DefaultArrivals
	}
	if o.Models <= 0 {
		o.Models = DefaultModels
	}
	if o.MaxMinutes <= 0 {
		o.MaxMinutes = DefaultMaxMinutes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Recorder keeps every recorded model's recent arrivals, answers and
// batches, told by the dispatcher (it is a dispatcher.Observer), and once
// a second what the meter and the queues say of each (Run).
type Recorder struct {
	dispatcher.NopObserver // decisions and batch starts are not kept
	o                      Options
	clk                    clock

	mu     sync.Mutex                       // guards adding to models, and samples
	models atomic.Pointer[map[string]*kept] // replaced, never changed, under mu
}

// kept is one model's record.
type kept struct {
	since             time.Time // when the record began: its model's first call
	arrivals, answers *ring
	// afters are the answers' waits after their batch, by when the
	// answer was written.
	afters *ring
	// doorNs and doorN sum each call's time from its first byte at the
	// door to its entering the queue (Arrival.At less Call.Received):
	// the replay's requests enter the queue at their arrival, and the
	// lived latencies run from the first byte.
	doorNs, doorN atomic.Int64

	bmu     sync.Mutex // guards batches and bnext
	batches []batch
	bnext   int

	samples []sample // oldest first; under Recorder.mu
}

// batch is one batch as it ended: when (Unix ns), its rows and callers,
// round trip and hold.
type batch struct {
	at              int64
	rows, calls     int32
	roundTrip, hold time.Duration
}

// end is when the batch ended.
func (b batch) end() time.Time { return time.Unix(0, b.at) }

// sample is one model's cumulative figures at one second.
type sample struct {
	at time.Time
	// The meter's figures for the model since its start: its share of
	// the energy (hasEnergy), the requests it served and its batches'
	// time, and all models' batch time (the model's share of idle
	// power); the GPUs' idle power (0: unknown).
	hasEnergy          bool
	energyJ, requests  float64
	batchS, allBatchS  float64
	idleW              float64
	doorNs, doorN      int64
	closedLoop, others int     // callers as the plan reads them (0 each: none)
	thinkMs            float64 // the closed-loop callers' think time
}

// The sizes of a batch and a sample, for Options.Bytes
// (TestRecorderBounds checks them).
const (
	batchBytes  = 32
	sampleBytes = 112
)

// NewRecorder returns a recorder; Run samples the meter and the queues.
func NewRecorder(o Options) *Recorder {
	o = o.withDefaults()
	r := &Recorder{o: o, clk: clock{epoch: o.Now().Add(-time.Second)}}
	r.models.Store(&map[string]*kept{})
	return r
}

// model returns the model's record, making one that begins at since
// while fewer than Options.Models are recorded; nil when there is no room.
func (r *Recorder) model(name string, since time.Time) *kept {
	if k := (*r.models.Load())[name]; k != nil {
		return k
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.models.Load()
	if k := old[name]; k != nil {
		return k
	}
	if len(old) >= r.o.Models {
		return nil
	}
	k := &kept{since: since, arrivals: newRing(r.o.Arrivals), answers: newRing(r.o.Arrivals), afters: newRing(r.o.Arrivals),
		batches: make([]batch, 0, r.o.Arrivals/batchesPer+1)}
	next := make(map[string]*kept, len(old)+1)
	for n, v := range old {
		next[n] = v
	}
	next[name] = k
	r.models.Store(&next)
	return k
}

// Arrived keeps the call's arrival: its time, rows and caller.
func (r *Recorder) Arrived(a dispatcher.Arrival) {
	k := r.model(a.Model, a.At)
	if k == nil {
		return
	}
	k.arrivals.put(r.clk.pack(a.At, arrivalPayload(a.Rows, uint8(a.Caller))))
	if a.Call != nil && !a.Call.Received.IsZero() && a.Call.Received.Before(a.At) {
		k.doorNs.Add(int64(a.At.Sub(a.Call.Received)))
		k.doorN.Add(1)
	}
}

// Answered keeps a call's latency, by its arrival.
func (r *Recorder) Answered(a dispatcher.Answer) {
	if k := (*r.models.Load())[a.Model]; k != nil {
		k.answers.put(r.clk.pack(a.Arrived, latencyPayload(a.Latency)))
		k.afters.put(r.clk.pack(a.Arrived.Add(a.Latency), afterPayload(a.After, a.Calls)))
	}
}

// BatchEnded keeps a batch the upstream answered: its rows, round trip
// and hold, whose spread around the learnt line the replay draws from.
func (r *Recorder) BatchEnded(b *dispatcher.Batch, e dispatcher.BatchEnd) {
	if !e.OK {
		return
	}
	k := (*r.models.Load())[b.Model]
	if k == nil {
		return
	}
	k.bmu.Lock()
	x := batch{at: e.At.UnixNano(), rows: int32(min(e.Rows, math.MaxInt32)), calls: int32(min(e.Calls, math.MaxInt32)), roundTrip: e.RoundTrip, hold: e.Hold}
	if len(k.batches) < cap(k.batches) {
		k.batches = append(k.batches, x)
	} else {
		k.batches[k.bnext] = x
		k.bnext = (k.bnext + 1) % len(k.batches)
	}
	k.bmu.Unlock()
}

// Run samples the meter and the queues once a second until ctx ends; a
// panic is contained (guard.Loop) and sampling resumes.
func (r *Recorder) Run(ctx context.Context) { guard.Loop(ctx, nil, "whatif", r.run) }

func (r *Recorder) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Sample()
		}
	}
}

// Sample records every model's figures now. Run calls it; tests may too.
func (r *Recorder) Sample() {
	now := r.o.Now()
	var snap power.Snapshot
	if r.o.Meter != nil {
		snap = r.o.Meter()
	}
	var idleW, allBatchS float64
	for _, g := range snap.GPUs {
		if g.IdlePowerW != nil {
			idleW += *g.IdlePowerW
		}
	}
	for _, m := range snap.Models {
		allBatchS += m.BatchSeconds
	}
	keep := r.o.MaxMinutes*60 + 1
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, k := range *r.models.Load() {
		s := sample{at: now, idleW: idleW, allBatchS: allBatchS, doorNs: k.doorNs.Load(), doorN: k.doorN.Load()}
		for _, m := range snap.Models {
			if m.Model != name {
				continue
			}
			s.batchS = m.BatchSeconds
			if f := m.Windows[power.TotalWindow]; f.EnergyJ != nil {
				s.hasEnergy, s.energyJ, s.requests = true, *f.EnergyJ, float64(f.Requests)
			}
		}
		if r.o.Callers != nil {
			if c, ok := r.o.Callers(name); ok && c.Known {
				s.closedLoop, s.others, s.thinkMs = c.ClosedLoop, c.Others, c.ThinkMs
			}
		}
		k.samples = append(k.samples, s)
		if len(k.samples) > keep {
			k.samples = append(k.samples[:0], k.samples[len(k.samples)-keep:]...)
		}
	}
}
