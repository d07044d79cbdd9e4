package policy

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// New turns typed Options into each policy's own parameters, defaults
// filled, and refuses what is out of bounds naming the parameter.
func TestNewFromOptions(t *testing.T) {
	bmp := func(want BatchMonitorPlus) func(Policy) bool {
		return func(p Policy) bool {
			got := p.(BatchMonitorPlus)
			if got.explorer == nil { // a doubting rule would never measure other sizes
				return false
			}
			got.explorer = nil
			return got == want
		}
	}
	smdpWith := func(ok func(*SMDP) bool) func(Policy) bool { return func(p Policy) bool { return ok(p.(*SMDP)) } }
	slack := func(want Slack) func(Policy) bool { return func(p Policy) bool { return p.(Slack) == want } }
	hold := func(d time.Duration) HoldOptions { return HoldOptions{MaxWait: d} }
	tests := []struct {
		name, policy string
		o            Options
		check        func(Policy) bool
		err          string
	}{
		{"batchmonitor+ defaults", NameBatchMonitorPlus, Options{}, bmp(BatchMonitorPlus{Util: DefaultUtil, From: DefaultFrom, Drain: true}), ""},
		{"batchmonitor+ all set", NameBatchMonitorPlus, NewOptions(BatchMonitorPlusOptions{Util: 0.8, From: 2, NoDrain: true, HoldOptions: hold(time.Second)}),
			bmp(BatchMonitorPlus{Util: 0.8, From: 2, MaxWait: time.Second}), ""},
		{"batchmonitor+ util above 1", NameBatchMonitorPlus, NewOptions(BatchMonitorPlusOptions{Util: 1.2}), nil, "util"},
		{"batchmonitor+ util negative", NameBatchMonitorPlus, NewOptions(BatchMonitorPlusOptions{Util: -0.5}), nil, "util"},
		{"batchmonitor+ from 3", NameBatchMonitorPlus, NewOptions(BatchMonitorPlusOptions{From: 3}), nil, "from"},

		{"smdp defaults", NameSMDP, Options{}, smdpWith(func(p *SMDP) bool { return p.W1 == 1 && p.W2 == 0 && p.Resolve == DefaultResolve && p.SMax == 0 }), ""},
		{"smdp all set", NameSMDP, NewOptions(SMDPOptions{W1: 2, W2: 0.5, SolveOptions: SolveOptions{SMax: 300, Resolve: 0.2}, HoldOptions: hold(time.Second)}),
			smdpWith(func(p *SMDP) bool {
				return p.W1 == 2 && p.W2 == 0.5 && p.SMax == 300 && p.Resolve == 0.2 && p.MaxWait == time.Second
			}), ""},
		{"smdp w1 zero", NameSMDP, NewOptions(SMDPOptions{W2: 1}), nil, "w1"},
		{"smdp w2 negative", NameSMDP, NewOptions(SMDPOptions{W1: 1, W2: -1}), nil, "w2"},
		{"smdp w2 not a number", NameSMDP, NewOptions(SMDPOptions{W1: 1, W2: math.NaN()}), nil, "w2"},
		{"smdp smax negative", NameSMDP, NewOptions(SMDPOptions{SolveOptions: SolveOptions{SMax: -1}}), nil, "smax"},
		{"smdp resolve above 1", NameSMDP, NewOptions(SMDPOptions{SolveOptions: SolveOptions{Resolve: 1.5}}), nil, "resolve"},
		{"smdp negative wait", NameSMDP, NewOptions(SMDPOptions{HoldOptions: hold(-1)}), nil, "max wait"},

		{"slack defaults", NameSlack, Options{}, slack(Slack{Safety: DefaultSlackSafety}), ""},
		{"slack all set", NameSlack, NewOptions(SlackOptions{DeadlineOptions: DeadlineOptions{SLA: 50 * time.Millisecond, Safety: 2}, Target: TargetMax}),
			slack(Slack{SLA: 50 * time.Millisecond, Safety: 2, Target: TargetMax}), ""},
		{"slack negative sla", NameSlack, NewOptions(SlackOptions{DeadlineOptions: DeadlineOptions{SLA: -time.Millisecond}}), nil, "sla"},
		{"slack safety below 1", NameSlack, NewOptions(SlackOptions{DeadlineOptions: DeadlineOptions{Safety: 0.9}}), nil, "safety"},
		{"slack bad target", NameSlack, NewOptions(SlackOptions{Target: "most"}), nil, "target"},

		// A policy reads its own options only: another's out of bounds is
		// not its mistake.
		{"adhoc with smdp's bad weight", NameAdhoc, NewOptions(SMDPOptions{W2: 1}), func(p Policy) bool { return p == Adhoc{} }, ""},
		{"slack with budget's bad wait", NameSlack, NewOptions(BudgetOptions{HoldOptions: hold(-1)}), slack(Slack{Safety: DefaultSlackSafety}), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.policy, tt.o)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want it to mention %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(p) {
				t.Fatalf("policy %+v", p)
			}
		})
	}
}

// Each policy's options, and the parts they share, refuse what is out of
// bounds with a ParamError naming the key; Options refuses what any of
// them refuses.
func TestValidateNamesTheParameter(t *testing.T) {
	tests := []struct {
		name string
		o    validator
		want string // the *ParamError's Param
	}{
		{"hold", HoldOptions{MaxWait: -1}, "wait_bound"},
		{"deadline sla", DeadlineOptions{SLA: -1}, "sla"},
		{"deadline safety", DeadlineOptions{Safety: 0.9}, "safety"},
		{"deadline safety infinite", DeadlineOptions{Safety: math.Inf(1)}, "safety"},
		{"solve smax", SolveOptions{SMax: -1}, "smax"},
		{"solve share", SolveOptions{SolveShare: 1.5}, "solve_share"},
		{"solve resolve", SolveOptions{Resolve: 2}, "resolve"},

		{"maxbatch delay", MaxBatchOptions{MaxQueueDelay: -1}, "max_queue_delay"},
		{"static batch", StaticOptions{Batch: -1}, "batch"},
		{"static wait", StaticOptions{Batch: 4, HoldOptions: HoldOptions{MaxWait: -1}}, "wait_bound"},
		{"batchmonitor wait", BatchMonitorOptions{HoldOptions{MaxWait: -1}}, "wait_bound"},
		{"batchmonitor+ util", BatchMonitorPlusOptions{Util: 1.2}, "util"},
		{"batchmonitor+ util not a number", BatchMonitorPlusOptions{Util: math.NaN()}, "util"},
		{"batchmonitor+ from", BatchMonitorPlusOptions{From: 3}, "from"},
		{"batchmonitor+ wait", BatchMonitorPlusOptions{HoldOptions: HoldOptions{MaxWait: -1}}, "wait_bound"},
		{"slack target", SlackOptions{Target: "most"}, "target"},
		{"slack sla", SlackOptions{DeadlineOptions: DeadlineOptions{SLA: -1}}, "sla"},
		{"smdp w1 not a number", SMDPOptions{W1: math.NaN()}, "w1"},
		{"smdp energy without latency", SMDPOptions{W1: 0, W2: 1}, "w1"},
		{"smdp w2", SMDPOptions{W1: 1, W2: -1}, "w2"},
		{"smdp w2 infinite", SMDPOptions{W1: 1, W2: math.Inf(1)}, "w2"},
		{"smdp wait", SMDPOptions{HoldOptions: HoldOptions{MaxWait: -1}}, "wait_bound"},
		{"smdp share", SMDPOptions{SolveOptions: SolveOptions{SolveShare: -0.1}}, "solve_share"},
		{"elastic cap", ElasticOptions{RowCap: -1}, "row_cap"},
		{"budget below ad-hoc", BudgetOptions{LatencyBudget: "0.9x"}, "latency_budget"},
		{"budget unreadable", BudgetOptions{LatencyBudget: "soon"}, "latency_budget"},
		{"budget tail", BudgetOptions{TailBudget: "0.9x"}, "tail_budget"},
		{"budget slo", BudgetOptions{SLOP99: -1}, "slo_p99"},
		{"budget sla", BudgetOptions{DeadlineOptions: DeadlineOptions{SLA: -1}}, "sla"},
		{"budget wait", BudgetOptions{HoldOptions: HoldOptions{MaxWait: -1}}, "wait_bound"},
		{"budget resolve", BudgetOptions{SolveOptions: SolveOptions{Resolve: 2}}, "resolve"},

		{"every policy's: smdp", NewOptions(SMDPOptions{W2: 1}), "w1"},
		{"every policy's: budget", NewOptions(BudgetOptions{TailBudget: "soon"}), "tail_budget"},
		{"every policy's: batchmonitor+", NewOptions(BatchMonitorPlusOptions{From: 5}), "from"},
	}
	for _, tt := range tests {
		var pe *ParamError
		if err := tt.o.Validate(); !errors.As(err, &pe) || pe.Param != tt.want {
			t.Errorf("%s: %+v.Validate() = %v, want a ParamError for %s", tt.name, tt.o, err, tt.want)
		}
	}
	for _, zero := range []validator{Options{}, NoOptions{}, MaxBatchOptions{}, StaticOptions{}, BatchMonitorOptions{}, BatchMonitorPlusOptions{},
		SlackOptions{}, SMDPOptions{}, ElasticOptions{}, BudgetOptions{}} {
		if err := zero.Validate(); err != nil {
			t.Errorf("zero %T (every default): %v", zero, err)
		}
	}
}

// Each reaches every copy of a shared part, and only those.
func TestEachSetsEveryCopy(t *testing.T) {
	var o Options
	n := 0
	Each(&o, func(h *HoldOptions) { h.MaxWait = 3 * time.Millisecond; n++ })
	want := []time.Duration{OptionsOf[StaticOptions](o).MaxWait, OptionsOf[SMDPOptions](o).MaxWait, OptionsOf[BudgetOptions](o).MaxWait,
		OptionsOf[BatchMonitorOptions](o).MaxWait, OptionsOf[BatchMonitorPlusOptions](o).MaxWait}
	if n != len(want) {
		t.Errorf("%d HoldOptions set, want %d", n, len(want))
	}
	for i, d := range want {
		if d != 3*time.Millisecond {
			t.Errorf("copy %d: wait %v", i, d)
		}
	}
	Each(&o, func(s *SolveOptions) { s.SolveFree = true })
	if !OptionsOf[SMDPOptions](o).SolveFree || !OptionsOf[BudgetOptions](o).SolveFree {
		t.Errorf("SolveFree set in smdp %v, budget %v", OptionsOf[SMDPOptions](o).SolveFree, OptionsOf[BudgetOptions](o).SolveFree)
	}
	if OptionsOf[MaxBatchOptions](o) != (MaxBatchOptions{}) || OptionsOf[ElasticOptions](o) != (ElasticOptions{}) || OptionsOf[SlackOptions](o) != (SlackOptions{}) {
		t.Errorf("options without the part changed: %+v", o)
	}
	// A policy's own struct is a P too: one field set, the others kept.
	Each(&o, func(b *BudgetOptions) { b.NoTrim = true })
	if b := OptionsOf[BudgetOptions](o); !b.NoTrim || b.MaxWait != 3*time.Millisecond || !b.SolveFree {
		t.Errorf("budget after Each: %+v", b)
	}
}

// Options is a value: a copy changed by With or Each leaves the original
// as it was, as a struct's copy would.
func TestOptionsCopyIsIndependent(t *testing.T) {
	orig := NewOptions(BudgetOptions{LatencyBudget: "1.5x"}, StaticOptions{Batch: 4})
	cp := orig
	Each(&cp, func(b *BudgetOptions) { b.LatencyBudget = "2x" })
	Each(&cp, func(h *HoldOptions) { h.MaxWait = time.Second })
	cp = cp.With(StaticOptions{Batch: 9})
	if b, s := OptionsOf[BudgetOptions](orig), OptionsOf[StaticOptions](orig); b.LatencyBudget != "1.5x" || b.MaxWait != 0 || s.Batch != 4 {
		t.Errorf("the original changed with its copy: budget %+v, static %+v", b, s)
	}
	if b, s := OptionsOf[BudgetOptions](cp), OptionsOf[StaticOptions](cp); b.LatencyBudget != "2x" || s.Batch != 9 || s.MaxWait != 0 {
		t.Errorf("the copy: budget %+v, static %+v (With replaces the whole struct)", b, s)
	}
	// Equal options are equal values however they were made: a part set
	// back to its zero value is as if never set.
	back := NewOptions(StaticOptions{Batch: 4}).With(StaticOptions{})
	if !reflect.DeepEqual(back, Options{}) {
		t.Errorf("options set back to zero: %+v, want the zero Options", back)
	}
}

// With refuses a type no registered policy takes: set a shared part with
// Each instead.
func TestWithRefusesAnUnregisteredType(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "HoldOptions") {
			t.Fatalf("With(HoldOptions{}): recovered %v, want a panic naming the type", r)
		}
	}()
	NewOptions(HoldOptions{MaxWait: time.Second})
}

// OptionsType is the struct the policy's factory reads.
func TestOptionsTypeIsThePolicysOwn(t *testing.T) {
	for name, want := range map[string]reflect.Type{NameBudget: reflect.TypeFor[BudgetOptions](), NameSMDP: reflect.TypeFor[SMDPOptions](),
		NameStatic: reflect.TypeFor[StaticOptions](), NameSlack: reflect.TypeFor[SlackOptions](), NameElastic: reflect.TypeFor[ElasticOptions](),
		NameMaxBatch: reflect.TypeFor[MaxBatchOptions](), NameBatchMonitor: reflect.TypeFor[BatchMonitorOptions](),
		NameBatchMonitorPlus: reflect.TypeFor[BatchMonitorPlusOptions](), NameAdhoc: reflect.TypeFor[NoOptions]()} {
		if got, ok := OptionsType(name); !ok || got != want {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if _, ok := OptionsType("nope"); ok {
		t.Error("an unknown policy has options")
	}
	// Each type once, though several policies may share one.
	seen := map[reflect.Type]bool{}
	for _, ty := range OptionTypes() {
		if seen[ty] {
			t.Errorf("OptionTypes lists %v twice", ty)
		}
		seen[ty] = true
	}
}

// knobOptions are a policy's options registered by a test, not in
// Options' declaration: they are validated because they are registered.
type knobOptions struct {
	Knob int `yaml:"knob_of_options_test"`
}

func (o knobOptions) Validate() error {
	if o.Knob < 0 {
		return paramErr("knob_of_options_test", "must be >= 0, got %d", o.Knob)
	}
	return nil
}

func TestRegisteredOptionsAreValidated(t *testing.T) {
	Register("knob-of-options-test", func(o knobOptions) (Policy, error) { return Adhoc{}, nil })
	var pe *ParamError
	if err := NewOptions(knobOptions{Knob: -1}).Validate(); !errors.As(err, &pe) || pe.Param != "knob_of_options_test" {
		t.Fatalf("Options.Validate with a registered policy's bad option: %v, want its ParamError", err)
	}
	if err := NewOptions(knobOptions{Knob: 2}).Validate(); err != nil {
		t.Fatal(err)
	}
	if got := OptionsOf[knobOptions](NewOptions(knobOptions{Knob: 2})).Knob; got != 2 {
		t.Fatalf("OptionsOf: knob %d", got)
	}
}
