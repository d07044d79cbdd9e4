package policy

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"time"
)

// Options are the parameters of every registered policy, as the
// configuration holds them: each policy's own struct (BudgetOptions,
// SMDPOptions, ...), declared, validated and registered beside its policy
// (Register), found here by its type (OptionsOf). A factory reads only its
// policy's struct, so a parameter belongs to the policies whose struct has
// it, and a policy added in its own file is configured, validated and
// shown without a list to extend here.
//
// Package config spells Options as its policy section, whose keys are
// flat: each registered struct is inlined, and a key that several structs
// share (wait_bound, declared once in HoldOptions) is one key of the
// section that sets it in each. A field's yaml and help tags are its YAML
// key, its RATEBATCH_POLICY_* variable, its serve flag and its
// docs/CONFIG.md row; a field tagged yaml:"-" is set from Go only (tests,
// the comparison, the sim command; Each sets a shared part in every
// struct that has it).
//
// Options is a value, as a struct is: a copy changes apart from the
// original (With and Each return or store a new set, never edit a shared
// one). The zero Options selects each policy's documented defaults.
type Options struct {
	// own holds each policy's options that differ from their zero value,
	// by type; never written once made (nil: all zero).
	own map[reflect.Type]any
}

// OptionsOf is the options of type T in o (a policy's own struct,
// BudgetOptions, ...): its zero value when o holds none.
func OptionsOf[T any](o Options) T {
	v, _ := o.own[reflect.TypeFor[T]()].(T)
	return v
}

// NewOptions is the Options holding parts, each a registered policy's own
// options struct (BudgetOptions{...}, StaticOptions{...}); every other
// policy's are their zero value.
func NewOptions(parts ...any) Options { return Options{}.With(parts...) }

// With returns o with each of parts (a registered policy's own options
// struct) in place of the options of its type. It panics on a type no
// registered policy takes (a shared part such as HoldOptions: set it with
// Each), a programming error.
func (o Options) With(parts ...any) Options {
	own := maps.Clone(o.own)
	if own == nil {
		own = map[reflect.Type]any{}
	}
	for _, p := range parts {
		t := reflect.TypeOf(p)
		if !registeredOptions(t) {
			panic(fmt.Sprintf("policy: %v is no registered policy's options (a shared part is set with Each)", t))
		}
		// A zero part is left out, so that equal options are equal maps
		// (reflect.DeepEqual), however they were made.
		if reflect.ValueOf(p).IsZero() {
			delete(own, t)
		} else {
			own[t] = p
		}
	}
	if len(own) == 0 {
		own = nil
	}
	return Options{own: own}
}

// Parts is o's options of every registered policy, one value per type
// OptionTypes lists, in that order (the zero value where o holds none).
func (o Options) Parts() []any {
	types := OptionTypes()
	out := make([]any, len(types))
	for i, t := range types {
		out[i] = o.part(t)
	}
	return out
}

// part is o's options of type t, or t's zero value.
func (o Options) part(t reflect.Type) any {
	if v, ok := o.own[t]; ok {
		return v
	}
	return reflect.Zero(t).Interface()
}

// Validate reports the first parameter of any registered policy out of its
// bounds, as a *ParamError: the configuration's policy section serves every
// policy a model may run. Every registered policy's options are validated
// because they are registered.
func (o Options) Validate() error {
	for _, p := range o.Parts() {
		if err := p.(validator).Validate(); err != nil {
			return err
		}
	}
	return nil
}

// validator is a policy's options: Validate reports the first parameter out
// of its bounds, as a *ParamError.
type validator interface{ Validate() error }

// Each calls set with every P in o (a shared part such as HoldOptions, or
// a policy's own struct), so that a caller sets a parameter for every
// policy that has it without listing them.
func Each[P any](o *Options, set func(*P)) {
	var changed []any
	for _, t := range OptionTypes() {
		v := reflect.New(t).Elem()
		v.Set(reflect.ValueOf(o.part(t)))
		found := false
		each(v, reflect.TypeFor[P](), func(f reflect.Value) { set(f.Addr().Interface().(*P)); found = true })
		if found {
			changed = append(changed, v.Interface())
		}
	}
	*o = o.With(changed...)
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
