package policy

import (
	"fmt"
	"math"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Options are the policies' parameters, typed. One struct serves every
// policy because a parameter means the same to each policy that reads it (an
// SLA is an SLA to slack and to budget) and so has one spelling in the
// configuration; a policy reads the fields it uses and ignores the others.
//
// Options is the one declaration of each parameter. Package config embeds
// it in its policy section, so a field's yaml and help tags are its YAML key,
// its RATEBATCH_POLICY_* variable, its serve flag and its docs/CONFIG.md
// row; a field tagged yaml:"-" is set from Go only (tests, the comparison,
// the sim command). Validate is the one check of the bounds, for the
// configuration and for New alike. Adding a parameter is adding a field here
// (with its bounds in Validate) and reading it in the policy's factory.
//
// Zero values select each policy's documented default.
type Options struct {
	MaxQueueDelay time.Duration `yaml:"max_queue_delay" help:"maxbatch: longest a request waits for a full batch"`
	Batch         int           `yaml:"batch" help:"static: the exact batch size (0: the model's max_batch_size)"`
	// MaxWait bounds how long batchmonitor, batchmonitor+, static, smdp and
	// budget hold the oldest row of a partial batch while an instance is
	// free.
	MaxWait time.Duration `yaml:"wait_bound" help:"longest a partial batch is held (0: the policy's documented default)"`
	SLA     time.Duration `yaml:"sla" help:"slack: latency target per request when the request carries no timeout parameter"`
	// W1 and W2 weigh smdp's objective; both zero select latency only
	// (W1 1, W2 0).
	W1     float64 `yaml:"w1" help:"smdp: weight of mean latency (per ms) in the cost"`
	W2     float64 `yaml:"w2" help:"smdp: weight of mean power (per W) in the cost; raise it to trade latency for energy"`
	RowCap int     `yaml:"row_cap" help:"elastic: cap on the summed size of in-flight batches (0: max_batch_size)"`
	// LatencyBudget is budget's mean-latency budget as smdp.ParseBudget
	// reads it (empty: DefaultLatencyBudget).
	LatencyBudget string `yaml:"latency_budget" help:"budget: mean-latency budget, a factor of ad-hoc's mean latency (1.10x) or a duration (4ms); empty: 1.10x"`
	// TailBudget bounds budget's predicted p99 relative to ad-hoc's
	// (empty: DefaultTailBudget, none when SLOP99 is set); SLOP99 bounds
	// it absolutely, and alone (without LatencyBudget) leaves the mean
	// unbounded.
	TailBudget string        `yaml:"tail_budget" help:"budget: p99 budget, a factor of ad-hoc's p99 (1.20x) or off; empty: 1.20x, or off when slo_p99 is set"`
	SLOP99     time.Duration `yaml:"slo_p99" help:"budget: the p99 the plan keeps under (15ms): the most requests per joule within it, with no mean budget unless latency_budget is set"`
	// SolveShare bounds the CPU of smdp's and budget's solves (see
	// solveMeter); SolveFree lifts the bound, for the simulator, whose
	// runs must not depend on how fast the machine solves.
	SolveShare float64 `yaml:"solve_share" help:"smdp, budget: the share of one core their solves may take, averaged; past it a new rate is planned from the nearest rate solved (0: 0.02)"`
	SolveFree  bool    `yaml:"-"`

	// Util and From tune batchmonitor+ (zero: DefaultUtil, DefaultFrom);
	// NoDrain makes it send the planned size only instead of the queue.
	Util    float64 `yaml:"-"`
	From    int     `yaml:"-"`
	NoDrain bool    `yaml:"-"`
	// Safety is slack's and budget's over-estimate of batch time (zero:
	// DefaultSlackSafety); Target is slack's TargetRate (default) or
	// TargetMax.
	Safety float64 `yaml:"-"`
	Target string  `yaml:"-"`
	// SMax and Resolve tune the smdp and budget solvers (zero: automatic,
	// and the policy's default re-solve threshold); Seed varies budget's
	// draws.
	SMax    int     `yaml:"-"`
	Resolve float64 `yaml:"-"`
	Seed    uint64  `yaml:"-"`
	// NoTrim turns budget's live trim off: the plan alone, as the
	// optimum comparisons and the sim command (unless --trim) run it.
	NoTrim bool `yaml:"-"`
}

// ParamError names the parameter a policy cannot use by its configuration
// key (Options' yaml tag, or the field's name in lower case), so that the
// configuration can point at the field: policy.<Param>.
type ParamError struct {
	Param string
	Msg   string
}

func (e *ParamError) Error() string { return "parameter " + e.Param + ": " + e.Msg }

func paramErr(param, format string, a ...any) error {
	return &ParamError{Param: param, Msg: fmt.Sprintf(format, a...)}
}

// Validate reports the first parameter out of its bounds, as a *ParamError.
func (o Options) Validate() error {
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case o.MaxQueueDelay < 0:
		return paramErr("max_queue_delay", "max queue delay must be >= 0, got %v", o.MaxQueueDelay)
	case o.Batch < 0:
		return paramErr("batch", "batch size must be >= 0 (0: the model's max batch size), got %d", o.Batch)
	case o.MaxWait < 0:
		return paramErr("wait_bound", "max wait must be >= 0, got %v", o.MaxWait)
	case o.SLA < 0:
		return paramErr("sla", "must be >= 0, got %v", o.SLA)
	case !(o.W1 >= 0) || !finite(o.W1):
		return paramErr("w1", "w1 (weight of mean latency per ms) must be a finite number >= 0, got %v", o.W1)
	case !(o.W2 >= 0) || !finite(o.W2):
		return paramErr("w2", "w2 (weight of mean power per W) must be a finite number >= 0, got %v", o.W2)
	case o.W1 == 0 && o.W2 > 0:
		return paramErr("w1", "w1 (weight of mean latency per ms) must be > 0 for the smdp policy, got 0; favour energy with a larger w2 instead")
	case o.RowCap < 0:
		return paramErr("row_cap", "must be >= 0 (0: the model's max batch size), got %d", o.RowCap)
	case !(o.Util >= 0 && o.Util <= 1):
		return paramErr("util", "must be in (0, 1] (0: %v), got %v", DefaultUtil, o.Util)
	case o.From != 0 && o.From != 1 && o.From != 2:
		return paramErr("from", "must be 1 or 2, got %d", o.From)
	case o.Safety != 0 && (!(o.Safety >= 1) || !finite(o.Safety)):
		return paramErr("safety", "must be a finite number >= 1 (it over-estimates batch time), got %v", o.Safety)
	case o.Target != "" && o.Target != TargetRate && o.Target != TargetMax:
		return paramErr("target", "must be %q or %q, got %q", TargetRate, TargetMax, o.Target)
	case o.SMax < 0:
		return paramErr("smax", "must be >= 0 (0: automatic), got %d", o.SMax)
	case !(o.SolveShare >= 0 && o.SolveShare <= 1):
		return paramErr("solve_share", "must be in (0, 1] (0: %v), got %v", DefaultSolveShare, o.SolveShare)
	case !(o.Resolve >= 0 && o.Resolve <= 1):
		return paramErr("resolve", "must be in (0, 1] (0: the policy's default), got %v", o.Resolve)
	}
	if _, err := o.budget(); err != nil {
		return err
	}
	if o.SLOP99 < 0 {
		return paramErr("slo_p99", "must be >= 0 (0: none), got %v", o.SLOP99)
	}
	if _, err := o.tailBudget(); err != nil {
		return err
	}
	return nil
}

// tailBudget is TailBudget read (0 when empty or off).
func (o Options) tailBudget() (float64, error) {
	if o.TailBudget == "" {
		return 0, nil
	}
	f, err := ParseTailBudget(o.TailBudget)
	if err != nil {
		return 0, paramErr("tail_budget", "%v", err)
	}
	return f, nil
}

// budget is LatencyBudget read (zero when empty).
func (o Options) budget() (smdp.Budget, error) {
	if o.LatencyBudget == "" {
		return smdp.Budget{}, nil
	}
	b, err := smdp.ParseBudget(o.LatencyBudget)
	if err != nil {
		return b, paramErr("latency_budget", "%v", err)
	}
	return b, nil
}

// weights are W1 and W2 with both zero read as the default objective.
func (o Options) weights() (w1, w2 float64) {
	if o.W1 == 0 && o.W2 == 0 {
		return 1, 0
	}
	return o.W1, o.W2
}

// or is v, or def when v is the zero value.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
