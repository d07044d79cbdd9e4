package policy

import (
	"fmt"
	"time"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Names of the built-in policies.
const (
	NameBatchMonitor = "batchmonitor"
	NameAdhoc        = "adhoc"
	NameMaxBatch     = "maxbatch"
	NameStatic       = "static"
)

// Defaults of the built-in policies' options.
const (
	// DefaultMaxQueueDelay is maxbatch's deadline when none is set. Triton
	// ships 0 (no waiting) and leaves the value to the operator; 10 ms is a
	// common setting for latency-sensitive vision models.
	DefaultMaxQueueDelay = 10 * time.Millisecond
	// DefaultStaticMaxWait is static's safety bound when none is set. The
	// baseline waits for b rows; at any real arrival rate they come long
	// before a second has passed, and the bound only stops the last rows of a
	// run (or of a burst before a lull) from waiting forever.
	DefaultStaticMaxWait = time.Second
)

func init() {
	Register(NameBatchMonitor, func(o BatchMonitorOptions) (Policy, error) {
		return BatchMonitor{MaxWait: o.MaxWait, explorer: &Explorer{Every: DefaultExploreEvery}}, nil
	})
	Register(NameAdhoc, func(NoOptions) (Policy, error) { return Adhoc{}, nil })
	Register(NameMaxBatch, func(o MaxBatchOptions) (Policy, error) {
		return MaxBatch{MaxQueueDelay: or(o.MaxQueueDelay, DefaultMaxQueueDelay)}, nil
	})
	Register(NameStatic, func(o StaticOptions) (Policy, error) {
		if o.Batch < 1 {
			return nil, paramErr("batch", "batch size must be >= 1, got %d (set the static batch size)", o.Batch)
		}
		return Static{Batch: o.Batch, MaxWait: o.MaxWait}, nil
	})
}

// BatchMonitorOptions are batchmonitor's options.
type BatchMonitorOptions struct {
	HoldOptions `yaml:",inline"`
}

// MaxBatchOptions are maxbatch's options.
type MaxBatchOptions struct {
	MaxQueueDelay time.Duration `yaml:"max_queue_delay" help:"maxbatch: longest a request waits for a full batch"`
}

// Effective implements Defaulter: max_queue_delay 0 stands for
// DefaultMaxQueueDelay.
func (o MaxBatchOptions) Effective() MaxBatchOptions {
	o.MaxQueueDelay = or(o.MaxQueueDelay, DefaultMaxQueueDelay)
	return o
}

// Validate implements validator.
func (o MaxBatchOptions) Validate() error {
	return notNegative("max_queue_delay", "max queue delay", o.MaxQueueDelay)
}

// StaticOptions are static's options. Batch 0 passes Validate, as the
// configuration's default (a model's max_batch_size stands for it), but
// static itself needs a batch size.
type StaticOptions struct {
	Batch       int `yaml:"batch" help:"static: the exact batch size (0: the model's max_batch_size)"`
	HoldOptions `yaml:",inline"`
}

// Effective implements Defaulter: wait_bound 0 stands for
// DefaultStaticMaxWait. Batch 0 stays: the model's max_batch_size fills
// it.
func (o StaticOptions) Effective() StaticOptions {
	o.MaxWait = or(o.MaxWait, DefaultStaticMaxWait)
	return o
}

// Validate implements validator.
func (o StaticOptions) Validate() error {
	if o.Batch < 0 {
		return paramErr("batch", "batch size must be >= 0 (0: the model's max batch size), got %d", o.Batch)
	}
	return o.HoldOptions.Validate()
}

// Fill is the rule behind every built-in policy. While an instance is free it
// sends Batch rows as soon as that many wait, and sends whatever waits once
// the oldest row has waited MaxWait. Batch 0 stands for the queue's MaxBatch;
// MaxWait 0 makes it work-conserving (send what waits, up to Batch).
//
// While every instance is busy it answers Wait, with no wake-up time: the
// completion that frees an instance brings the next decision.
type Fill struct {
	Policy  string
	Batch   int
	MaxWait time.Duration
	Note    string
}

// Decide implements Rule.
func (f Fill) Decide(q Queue) Decision {
	if q.Rows <= 0 || !q.Free() {
		return Wait()
	}
	target := f.Batch
	if target <= 0 || (q.MaxBatch > 0 && target > q.MaxBatch) {
		target = q.MaxBatch
	}
	if target <= 0 || q.Rows >= target {
		return Send(max(target, 1))
	}
	due := q.OldestArrival.Add(f.MaxWait)
	if !q.Now.Before(due) {
		return Send(q.Rows)
	}
	return WaitUntil(due)
}

// Status implements Rule.
func (f Fill) Status() Status {
	return Status{Policy: f.Policy, BatchSize: f.Batch, MaxWait: f.MaxWait, Note: f.Note}
}

// fallback is the rule a built-in policy returns for an estimate it cannot
// use: work-conserving, so no request waits on a broken estimate.
func fallback(name string, e Estimate, err error) Rule {
	return Fill{Policy: name, Batch: e.MaxBatch, Note: "work-conserving fallback: " + err.Error()}
}

// conserving is the work-conserving rule a policy that sizes batches from
// the estimate uses while it cannot: before any rate is measured (holding
// the first requests of a model for partners at a guessed rate is what
// builds a queue at a cold start), and while the tau(b) fit is in doubt.
//
// While in doubt it also explores (Explorer): one batch in 16 of 4 rows or
// more leaves with its oldest row alone, so that traffic that forms one
// size only (B_max at high load) still measures the line's intercept.
func conserving(name string, e Estimate, x *Explorer) (Rule, bool) {
	// Limit 1 sends whatever waits, up to B_max, whenever an instance is free.
	switch {
	case !e.Observed():
		return Limit{Policy: name, Limit: 1, Note: "work-conserving: no arrival rate measured yet"}, true
	case e.FitDoubt != "":
		return Limit{Policy: name, Limit: 1, Note: "work-conserving: " + e.FitDoubt, Explore: x}, true
	}
	return nil, false
}

// ChooseBatch is Algorithm 1 of the adaptive-batching paper as written: the
// smallest b in 2..maxBatch whose throughput b/tau(b) exceeds the arrival
// rate, or maxBatch when none does. The search starts at 2, so a single
// request is never the answer unless maxBatch is 1.
func ChooseBatch(ratePerSec float64, tau batchcost.Latency, maxBatch int) int {
	for b := 2; b <= maxBatch; b++ {
		// b/tau(b) requests per ms; compare per second.
		if ratePerSec < 1000*float64(b)/tau.TauMs(b) {
			return b
		}
	}
	return max(maxBatch, 1)
}

// BatchMonitor is the paper's BatchMonitor/BatchDispatcher pair. Plan runs
// Algorithm 1 (ChooseBatch) on the window's arrival rate and the fitted
// tau(b); before the first rate is measured, and while the fit is in doubt,
// the rule is work-conserving instead (see conserving). The rule sends
// batches of exactly that size, pbs, whenever pbs rows wait and an instance
// is free.
//
// The paper leaves partial batches open. Here the oldest row waits at most
// MaxWait, by default tau(pbs), the time one full batch takes to run: a row
// then waits at most about one batch time beyond what the server itself
// imposes. That is the bound Algorithm 1 is built on, as it picks pbs so that
// collecting a batch takes about as long as running one (pbs/rate ~
// tau(pbs)); a longer wait means the rate fell within the window, and waiting
// on for a full batch would cost more latency than the batch saves.
type BatchMonitor struct {
	// MaxWait overrides the default bound tau(pbs) when > 0.
	MaxWait time.Duration

	explorer *Explorer // shared by the rules it plans; see conserving
}

// Name implements Policy.
func (BatchMonitor) Name() string { return NameBatchMonitor }

// Plan implements Policy.
func (p BatchMonitor) Plan(e Estimate) Rule {
	if err := e.Validate(); err != nil {
		return fallback(NameBatchMonitor, e, err)
	}
	if r, ok := conserving(NameBatchMonitor, e, p.explorer); ok {
		return r
	}
	pbs := ChooseBatch(e.RatePerSec, e.Latency, e.MaxBatch)
	wait := p.MaxWait
	if wait <= 0 {
		wait = e.TauDuration(pbs)
	}
	return Fill{Policy: NameBatchMonitor, Batch: pbs, MaxWait: wait}
}

// Adhoc is the work-conserving baseline: whenever an instance is free, send
// everything that waits, up to B_max. Lowest latency, fewest rows per batch.
type Adhoc struct{}

// Name implements Policy.
func (Adhoc) Name() string { return NameAdhoc }

// Plan implements Policy.
func (Adhoc) Plan(e Estimate) Rule {
	return Fill{Policy: NameAdhoc, Batch: max(e.MaxBatch, 0)}
}

// MaxBatch is the Triton / TF-Serving style baseline: send B_max rows, or
// whatever waits once the oldest row has waited MaxQueueDelay. A zero
// MaxQueueDelay waits for nothing, as in Triton (New applies
// DefaultMaxQueueDelay instead).
type MaxBatch struct {
	MaxQueueDelay time.Duration
}

// Name implements Policy.
func (MaxBatch) Name() string { return NameMaxBatch }

// Plan implements Policy.
func (p MaxBatch) Plan(e Estimate) Rule {
	return Fill{Policy: NameMaxBatch, Batch: max(e.MaxBatch, 0), MaxWait: p.MaxQueueDelay}
}

// Static is the fixed-batch baseline: send exactly Batch rows, waiting for
// them. The wait is bounded by MaxWait (DefaultStaticMaxWait unless set), so
// the last rows of a run are never held forever. A Batch above the model's
// B_max is cut to B_max and the rule's note says so.
type Static struct {
	Batch   int
	MaxWait time.Duration
}

// Name implements Policy.
func (Static) Name() string { return NameStatic }

// Plan implements Policy.
func (p Static) Plan(e Estimate) Rule {
	b, note := p.Batch, ""
	wait := p.MaxWait
	if wait <= 0 {
		wait = DefaultStaticMaxWait
	}
	if e.MaxBatch >= 1 && b > e.MaxBatch {
		b, note = e.MaxBatch, fmt.Sprintf("batch %d cut to the model's max batch %d", p.Batch, e.MaxBatch)
	}
	return Fill{Policy: NameStatic, Batch: max(b, 1), MaxWait: wait, Note: note}
}
