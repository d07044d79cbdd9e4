package policy

import (
	"fmt"
	"math"
	"reflect"
	"time"
)

// Options are the parameters of every policy, as the configuration holds
// them: one struct of each policy's own options (BudgetOptions,
// SMDPOptions, ...), each declared and validated beside its policy. A
// factory reads only its policy's struct (Register's own), so a parameter
// belongs to the policies whose struct has it.
//
// Package config embeds Options in its policy section, whose keys are flat:
// each struct is inlined, and a key that several structs share (wait_bound,
// declared once in HoldOptions) is one key of the section that sets it in
// each. A field's yaml and help tags are its YAML key, its
// RATEBATCH_POLICY_* variable, its serve flag and its docs/CONFIG.md row; a
// field tagged yaml:"-" is set from Go only (tests, the comparison, the sim
// command; Each sets a shared part in every struct that has it).
//
// Zero values select each policy's documented default.
type Options struct {
	MaxBatch         MaxBatchOptions         `yaml:",inline"`
	Static           StaticOptions           `yaml:",inline"`
	Slack            SlackOptions            `yaml:",inline"`
	SMDP             SMDPOptions             `yaml:",inline"`
	Elastic          ElasticOptions          `yaml:",inline"`
	Budget           BudgetOptions           `yaml:",inline"`
	BatchMonitor     BatchMonitorOptions     `yaml:",inline"`
	BatchMonitorPlus BatchMonitorPlusOptions `yaml:",inline"`
}

// Validate reports the first parameter of any policy out of its bounds, as
// a *ParamError: the configuration's policy section serves every policy a
// model may run.
func (o Options) Validate() error {
	for _, v := range []validator{o.MaxBatch, o.Static, o.Slack, o.SMDP, o.Elastic, o.Budget, o.BatchMonitor, o.BatchMonitorPlus} {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// validator is a policy's options: Validate reports the first parameter out
// of its bounds, as a *ParamError.
type validator interface{ Validate() error }

// Each calls set with every P in o (a shared part such as HoldOptions, or
// a policy's struct), so that a caller sets a parameter for every policy
// that has it without listing them.
func Each[P any](o *Options, set func(*P)) {
	each(reflect.ValueOf(o).Elem(), reflect.TypeFor[P](), func(v reflect.Value) { set(v.Addr().Interface().(*P)) })
}

func each(v reflect.Value, t reflect.Type, f func(reflect.Value)) {
	if v.Type() == t {
		f(v)
		return
	}
	if v.Kind() != reflect.Struct {
		return
	}
	for i := range v.NumField() {
		if v.Type().Field(i).IsExported() {
			each(v.Field(i), t, f)
		}
	}
}

// NoOptions are the options of a policy that takes none (adhoc).
type NoOptions struct{}

// Validate implements validator.
func (NoOptions) Validate() error { return nil }

// HoldOptions bound how long batchmonitor, batchmonitor+, static, smdp and
// budget hold the oldest row of a partial batch while an instance is free.
type HoldOptions struct {
	MaxWait time.Duration `yaml:"wait_bound" help:"longest a partial batch is held (0: the policy's documented default)"`
}

// Validate implements validator.
func (o HoldOptions) Validate() error { return notNegative("wait_bound", "max wait", o.MaxWait) }

// DeadlineOptions are the deadline of rows without their own and the
// over-estimate of batch time that keeps it, for slack and budget.
type DeadlineOptions struct {
	SLA time.Duration `yaml:"sla" help:"slack: latency target per request when the request carries no timeout parameter"`
	// Safety over-estimates batch time (zero: DefaultSlackSafety).
	Safety float64 `yaml:"-"`
}

// Validate implements validator.
func (o DeadlineOptions) Validate() error {
	switch {
	case o.SLA < 0:
		return paramErr("sla", "must be >= 0, got %v", o.SLA)
	case o.Safety != 0 && (!(o.Safety >= 1) || !finite(o.Safety)):
		return paramErr("safety", "must be a finite number >= 1 (it over-estimates batch time), got %v", o.Safety)
	}
	return nil
}

// SolveOptions tune the solves of smdp and budget.
type SolveOptions struct {
	// SolveShare bounds the solves' CPU (see solveMeter); SolveFree lifts
	// the bound, for the simulator, whose runs must not depend on how fast
	// the machine solves.
	SolveShare float64 `yaml:"solve_share" help:"smdp, budget: the share of one core their solves may take, averaged; past it a new rate is planned from the nearest rate solved (0: 0.02)"`
	SolveFree  bool    `yaml:"-"`
	// SMax and Resolve tune the solver (zero: automatic, and the policy's
	// default re-solve threshold).
	SMax    int     `yaml:"-"`
	Resolve float64 `yaml:"-"`
}

// Effective is o with solve_share 0 as the share it stands for.
func (o SolveOptions) Effective() SolveOptions {
	o.SolveShare = or(o.SolveShare, DefaultSolveShare)
	return o
}

// Validate implements validator.
func (o SolveOptions) Validate() error {
	switch {
	case o.SMax < 0:
		return paramErr("smax", "must be >= 0 (0: automatic), got %d", o.SMax)
	case !(o.SolveShare >= 0 && o.SolveShare <= 1):
		return paramErr("solve_share", "must be in (0, 1] (0: %v), got %v", DefaultSolveShare, o.SolveShare)
	case !(o.Resolve >= 0 && o.Resolve <= 1):
		return paramErr("resolve", "must be in (0, 1] (0: the policy's default), got %v", o.Resolve)
	}
	return nil
}

// ParamError names the parameter a policy cannot use by its configuration
// key (its yaml tag, or the field's name in lower case), so that the
// configuration can point at the field: policy.<Param>.
type ParamError struct {
	Param string
	Msg   string
}

func (e *ParamError) Error() string { return "parameter " + e.Param + ": " + e.Msg }

func paramErr(param, format string, a ...any) error {
	return &ParamError{Param: param, Msg: fmt.Sprintf(format, a...)}
}

// firstErr is the first of errs that is not nil.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// notNegative refuses a negative duration d of the parameter key.
func notNegative(key, what string, d time.Duration) error {
	if d < 0 {
		return paramErr(key, "%s must be >= 0, got %v", what, d)
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// or is v, or def when v is the zero value.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
