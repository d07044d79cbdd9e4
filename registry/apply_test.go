package registry

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/policy"
)

// TestApply gives the registry a new configuration: each batched model
// takes its policy, limits and overrides, keeps its monitor, and a budget
// set at run time gives way to the configuration's.
func TestApply(t *testing.T) {
	up := &fakeUpstream{
		index: []triton.IndexEntry{{Name: "a", State: "READY"}, {Name: "b", State: "READY"}, {Name: "c", State: "READY"}},
		configs: map[string]*triton.ModelConfig{
			"a": {Name: "a", MaxBatchSize: 8}, "b": {Name: "b", MaxBatchSize: 8}, "c": {Name: "c", MaxBatchSize: 0},
		},
		noStats: true,
	}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	r := New(up, q, &cfg, nil)
	ctx := context.Background()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	before := r.Monitors()
	if _, err := r.SetPolicy(ctx, "a", "budget", map[string]string{"latency_budget": "3x"}); err != nil {
		t.Fatal(err)
	}

	next := cfg
	next.Policy.Name = "budget"
	next.Policy.Options = next.Policy.Options.With(policy.BudgetOptions{LatencyBudget: "2x"})
	next.Limits.QueueRows = 100
	next.Models = map[string]config.Model{"b": {Policy: "adhoc", MaxBatchSize: 4, SLA: time.Second}}
	if err := r.Apply(ctx, &next); err != nil {
		t.Fatal(err)
	}
	if after := r.Monitors(); len(after) != len(before) || !sameSet(before, after) {
		t.Fatal("Apply replaced monitors")
	}
	rules := map[string]string{}
	for _, s := range r.Statuses() {
		if s.Rule != nil {
			rules[s.Model] = s.Rule.Policy
		}
	}
	if rules["a"] != "budget" || rules["b"] != "adhoc" {
		t.Errorf("policies after Apply: %v; want a budget, b adhoc", rules)
	}
	var budget any
	for _, in := range r.Policies().Models {
		if in.Model == "a" {
			budget = in.Options["latency_budget"]
		}
	}
	if budget != "2x" {
		t.Errorf("a's budget after Apply %q, want the configuration's 2x over the run-time 3x", budget)
	}
	q.mu.Lock()
	a, b := q.specs["a"], q.specs["b"]
	q.mu.Unlock()
	if a.QueueRows != 100 || b.QueueRows != 100 || b.MaxBatch != 4 || b.SLA != time.Second || a.MaxBatch != 8 {
		t.Errorf("queues after Apply: a %+v, b %+v; want 100 rows each, b capped at 4 with a 1s SLA", a, b)
	}

	// A batched model made passthrough live: its queue retired, its
	// status saying so.
	last := next
	last.Models = map[string]config.Model{"a": {Policy: config.Passthrough}}
	if err := r.Apply(ctx, &last); err != nil {
		t.Errorf("Apply with a passthrough: %v", err)
	}
	q.mu.Lock()
	retired := q.retired["a"]
	q.mu.Unlock()
	if retired != 1 {
		t.Errorf("a retired %d times, want once", retired)
	}
	for _, s := range r.Statuses() {
		if s.Model == "a" && (s.Batched || !strings.Contains(s.Reason, "passthrough")) {
			t.Errorf("a after Apply with a passthrough: %+v", s)
		}
	}
}

func sameSet[T comparable](a, b []T) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}
