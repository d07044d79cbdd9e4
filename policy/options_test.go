package policy

import (
	"errors"
	"math"
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
	tests := []struct {
		name, policy string
		o            Options
		check        func(Policy) bool
		err          string
	}{
		{"batchmonitor+ defaults", NameBatchMonitorPlus, Options{}, bmp(BatchMonitorPlus{Util: DefaultUtil, From: DefaultFrom, Drain: true}), ""},
		{"batchmonitor+ all set", NameBatchMonitorPlus, Options{Util: 0.8, From: 2, NoDrain: true, MaxWait: time.Second}, bmp(BatchMonitorPlus{Util: 0.8, From: 2, MaxWait: time.Second}), ""},
		{"batchmonitor+ util above 1", NameBatchMonitorPlus, Options{Util: 1.2}, nil, "util"},
		{"batchmonitor+ util negative", NameBatchMonitorPlus, Options{Util: -0.5}, nil, "util"},
		{"batchmonitor+ from 3", NameBatchMonitorPlus, Options{From: 3}, nil, "from"},

		{"smdp defaults", NameSMDP, Options{}, smdpWith(func(p *SMDP) bool { return p.W1 == 1 && p.W2 == 0 && p.Resolve == DefaultResolve && p.SMax == 0 }), ""},
		{"smdp all set", NameSMDP, Options{W1: 2, W2: 0.5, SMax: 300, Resolve: 0.2, MaxWait: time.Second},
			smdpWith(func(p *SMDP) bool {
				return p.W1 == 2 && p.W2 == 0.5 && p.SMax == 300 && p.Resolve == 0.2 && p.MaxWait == time.Second
			}), ""},
		{"smdp w1 zero", NameSMDP, Options{W2: 1}, nil, "w1"},
		{"smdp w2 negative", NameSMDP, Options{W1: 1, W2: -1}, nil, "w2"},
		{"smdp w2 not a number", NameSMDP, Options{W1: 1, W2: math.NaN()}, nil, "w2"},
		{"smdp smax negative", NameSMDP, Options{SMax: -1}, nil, "smax"},
		{"smdp resolve above 1", NameSMDP, Options{Resolve: 1.5}, nil, "resolve"},
		{"smdp negative wait", NameSMDP, Options{MaxWait: -1}, nil, "max wait"},

		{"slack defaults", NameSlack, Options{}, slack(Slack{Safety: DefaultSlackSafety}), ""},
		{"slack all set", NameSlack, Options{SLA: 50 * time.Millisecond, Safety: 2, Target: TargetMax}, slack(Slack{SLA: 50 * time.Millisecond, Safety: 2, Target: TargetMax}), ""},
		{"slack negative sla", NameSlack, Options{SLA: -time.Millisecond}, nil, "sla"},
		{"slack safety below 1", NameSlack, Options{Safety: 0.9}, nil, "safety"},
		{"slack bad target", NameSlack, Options{Target: "most"}, nil, "target"},
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

func TestOptionsValidateNamesTheParameter(t *testing.T) {
	tests := []struct {
		o    Options
		want string // the *ParamError's Param
	}{
		{Options{MaxQueueDelay: -1}, "max_queue_delay"},
		{Options{Batch: -1}, "batch"},
		{Options{MaxWait: -1}, "wait_bound"},
		{Options{SLA: -1}, "sla"},
		{Options{W1: math.NaN()}, "w1"},
		{Options{W1: 0, W2: 1}, "w1"},
		{Options{W1: 1, W2: -1}, "w2"},
		{Options{RowCap: -1}, "row_cap"},
		{Options{Util: 1.2}, "util"},
		{Options{From: 3}, "from"},
		{Options{Safety: 0.9}, "safety"},
		{Options{Target: "most"}, "target"},
		{Options{SMax: -1}, "smax"},
		{Options{Resolve: 2}, "resolve"},
		{Options{LatencyBudget: "0.9x"}, "latency_budget"},
		{Options{LatencyBudget: "soon"}, "latency_budget"},
	}
	for _, tt := range tests {
		var pe *ParamError
		if err := tt.o.Validate(); !errors.As(err, &pe) || pe.Param != tt.want {
			t.Errorf("%+v: Validate() = %v, want a ParamError for %s", tt.o, err, tt.want)
		}
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("zero Options (every default): %v", err)
	}
}
