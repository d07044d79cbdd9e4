package policy

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// NameBatchMonitorPlus is the improved BatchMonitor.
const NameBatchMonitorPlus = "batchmonitor+"

// Defaults of batchmonitor+, chosen from the ablation in
// docs/results/energy.md, "Every policy against the SMDP optimum, in
// simulation".
const (
	// DefaultUtil is the utilisation batchmonitor+ plans for: 1, as
	// Algorithm 1. Planning for less (the smallest b with rate < u*b/tau(b),
	// u < 1) buys headroom only while batches have a fixed size; once they
	// drain the queue it merely raises the limit, and near saturation it
	// makes the limit B_max, which costs latency for little energy.
	DefaultUtil = 1
	// DefaultFrom is the first batch size batchmonitor+ considers: 1, so a
	// lone request at light load is sent at once instead of waiting for a
	// second one as Algorithm 1 (which starts at 2) makes it.
	DefaultFrom = 1
)

// ChooseBatchFor generalises Algorithm 1: the smallest b in from..maxBatch
// with ratePerSec < util * b/tau(b), or maxBatch when none qualifies.
// ChooseBatch is ChooseBatchFor with from 2 and util 1.
func ChooseBatchFor(ratePerSec float64, tau batchcost.Latency, from, maxBatch int, util float64) int {
	for b := max(from, 1); b <= maxBatch; b++ {
		if ratePerSec < util*1000*float64(b)/tau.TauMs(b) {
			return b
		}
	}
	return max(maxBatch, 1)
}

// BatchMonitorPlus is BatchMonitor with the changes the comparison in
// docs/results/energy.md, "Every policy against the SMDP optimum, in
// simulation" points to; each is a field, so it can be measured alone:
//
//   - Drain: the batch size becomes a control limit. Once the limit is
//     reached every waiting row (up to B_max) goes, so a queue longer than
//     the planned size, built while the server was busy or in a window
//     busier than the last, is worked off at once instead of pbs rows at a
//     time. This is the structure of the SMDP optimum, and the change that
//     matters: Algorithm 1 sizes pbs so that the server is nearly always
//     busy at that size, and a fixed pbs then lets the queue grow.
//   - From 1: a lone request at light load is sent at once instead of
//     waiting (up to tau(2)) for a partner.
//   - Util < 1 (off by default): plan for a utilisation below 1.
//
// Partial batches wait at most MaxWait, by default half of tau(limit)
// (DefaultWaitShare). BatchMonitor waits a whole tau(pbs); as a control
// limit that costs mean latency against ad-hoc near saturation for little
// energy saved there. Half a batch time keeps the mean latency close to
// ad-hoc's at every load of the compare grid and most of the saving at the
// loads where batching pays (docs/LEARNING.md, "A default that never
// hurts").
type BatchMonitorPlus struct {
	Util    float64       // in (0, 1]; outside it, 1
	From    int           // 1 or 2
	Drain   bool          // send min(queue, B_max) once the limit is reached
	MaxWait time.Duration // 0: DefaultWaitShare * tau(limit)

	explorer *Explorer // shared by the rules it plans; see conserving
}

// DefaultWaitShare is the share of tau(limit) a partial batch waits by
// default.
const DefaultWaitShare = 0.5

// NewBatchMonitorPlus returns the policy with its defaults.
func NewBatchMonitorPlus() BatchMonitorPlus {
	return BatchMonitorPlus{Util: DefaultUtil, From: DefaultFrom, Drain: true, explorer: &Explorer{Every: DefaultExploreEvery}}
}

func init() {
	Register(NameBatchMonitorPlus, func(o BatchMonitorPlusOptions) (Policy, error) {
		p := NewBatchMonitorPlus()
		p.Util, p.From, p.Drain, p.MaxWait = or(o.Util, DefaultUtil), or(o.From, DefaultFrom), !o.NoDrain, o.MaxWait
		return p, nil
	})
}

// BatchMonitorPlusOptions are batchmonitor+'s options: Util and From
// (zero: DefaultUtil, DefaultFrom); NoDrain makes it send the planned size
// only instead of the queue.
type BatchMonitorPlusOptions struct {
	Util        float64 `yaml:"-"`
	From        int     `yaml:"-"`
	NoDrain     bool    `yaml:"-"`
	HoldOptions `yaml:",inline"`
}

// Validate implements validator.
func (o BatchMonitorPlusOptions) Validate() error {
	switch {
	case !(o.Util >= 0 && o.Util <= 1):
		return paramErr("util", "must be in (0, 1] (0: %v), got %v", DefaultUtil, o.Util)
	case o.From != 0 && o.From != 1 && o.From != 2:
		return paramErr("from", "must be 1 or 2, got %d", o.From)
	}
	return o.HoldOptions.Validate()
}

// Name implements Policy.
func (BatchMonitorPlus) Name() string { return NameBatchMonitorPlus }

// Plan implements Policy.
func (p BatchMonitorPlus) Plan(e Estimate) Rule {
	if err := e.Validate(); err != nil {
		return fallback(NameBatchMonitorPlus, e, err)
	}
	util := p.Util
	if !(util > 0 && util <= 1) || math.IsNaN(util) {
		util = 1
	}
	if r, ok := conserving(NameBatchMonitorPlus, e, p.explorer); ok {
		return r
	}
	b := ChooseBatchFor(e.RatePerSec, e.Latency, p.From, e.MaxBatch, util)
	wait := p.MaxWait
	if wait <= 0 {
		wait = time.Duration(DefaultWaitShare * float64(e.TauDuration(b)))
	}
	if !p.Drain {
		return Fill{Policy: NameBatchMonitorPlus, Batch: b, MaxWait: wait}
	}
	return Limit{Policy: NameBatchMonitorPlus, Limit: b, MaxWait: wait}
}

// Limit is a control-limit rule, the shape of SMDP-optimal batching
// (ALGORITHMS.md section 3): while an instance is free, wait until Limit
// rows are waiting, then send all of them up to the model's B_max. A
// partial batch leaves once its oldest row has waited MaxWait, so no row
// is held forever.
//
// It differs from Fill in what a long queue gets: Fill sends exactly its
// batch size however many rows wait, Limit sends min(rows, B_max), so a
// backlog built up while the server was busy drains in larger batches
// instead of growing.
type Limit struct {
	Policy  string
	Limit   int
	MaxWait time.Duration
	Note    string
	// Explore, when set, sends every Explore.Every-th batch of 4 rows or
	// more as a batch of one (see Explorer).
	Explore *Explorer
}

// Explorer makes a work-conserving rule form batch sizes the traffic would
// not: while the tau(b) fit is in doubt because the batches all have about
// the same size (at high load, B_max), every Every-th batch of 4 or more
// rows leaves with its oldest row alone, so the intercept is measured
// rather than extrapolated.
//
// Why one row and not, say, half: every split costs the same, one tau0 of
// instance time, wherever it cuts. What the cut buys is leverage. With
// means m1 and mB of sizes 1 and B, tau0 = (B*m1 - mB)/(B-1), so an error
// in m1 reaches tau0 scaled by B/(B-1) (8/7 at B_max 8); with sizes B/2
// and B, tau0 = 2*m(B/2) - mB doubles an error in m(B/2), which is also
// twice as large in milliseconds. On a heavy-tailed server the mean of a
// size seen a hundred times usually reads low (its rare slow batches are
// absent from most samples), and halving turned that into large tau0
// errors under load (docs/LEARNING.md, "Learning tau(b) from the right
// signal").
//
// It never holds a row (the rest go with the next batch, at once when an
// instance is free), skips queues whose rows carry deadlines, and costs at
// most one tau0 in Every batches of instance time, only while the doubt
// lasts. It is shared by the rules of one model; safe for concurrent use.
type Explorer struct {
	Every int
	n     atomic.Uint64
}

// DefaultExploreEvery is how often a doubting rule explores: one batch in
// 16, which costs tau0/(16*tau(B)) of throughput at batch size B (below
// 1/16, and about 1% where the per-row cost dominates), only while the
// doubt lasts.
const DefaultExploreEvery = 16

// size returns the rows to send of n ready to go.
func (x *Explorer) size(q Queue, n int) int {
	if x == nil || x.Every < 1 || n < 4 || !q.EarliestDeadline.IsZero() {
		return n
	}
	if x.n.Add(1)%uint64(x.Every) == 0 {
		return 1
	}
	return n
}

// Decide implements Rule.
func (l Limit) Decide(q Queue) Decision {
	if q.Rows <= 0 || !q.Free() {
		return Wait()
	}
	n := q.Rows
	if q.MaxBatch > 0 {
		n = min(n, q.MaxBatch)
	}
	if q.Rows >= l.Limit {
		return Send(l.Explore.size(q, n))
	}
	due := q.OldestArrival.Add(l.MaxWait)
	if !q.Now.Before(due) {
		return Send(n)
	}
	return WaitUntil(due)
}

// Status implements Rule. BatchSize is the limit: the batch a queue that
// just reached it gets.
func (l Limit) Status() Status {
	return Status{Policy: l.Policy, BatchSize: l.Limit, MaxWait: l.MaxWait, Note: l.Note}
}
