package config

import (
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

func budget(o policy.Options) policy.BudgetOptions { return policy.OptionsOf[policy.BudgetOptions](o) }

// waitBound reports whether every copy of wait_bound in o (one in each
// policy that holds partial batches: five built in) is d.
func waitBound(o policy.Options, d time.Duration) bool {
	n, all := 0, true
	policy.Each(&o, func(h *policy.HoldOptions) { n, all = n+1, all && h.MaxWait == d })
	return all && n >= 5
}

func TestSetPolicyOption(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		check      func(policy.Options) bool
		err        string // in the error; "" for none
	}{
		{"latency_budget", "1.25x", func(o policy.Options) bool { return budget(o).LatencyBudget == "1.25x" }, ""},
		{"wait_bound", "2ms", func(o policy.Options) bool {
			// One key, set in every policy's options that have it.
			return waitBound(o, 2*time.Millisecond)
		}, ""},
		{"sla", "7ms", func(o policy.Options) bool {
			return policy.OptionsOf[policy.SlackOptions](o).SLA == 7*time.Millisecond && budget(o).SLA == 7*time.Millisecond
		}, ""},
		{"w2", "0.5", func(o policy.Options) bool { return policy.OptionsOf[policy.SMDPOptions](o).W2 == 0.5 }, ""},
		{"batch", "4", func(o policy.Options) bool { return policy.OptionsOf[policy.StaticOptions](o).Batch == 4 }, ""},
		{"wait_bound", "soon", nil, "wait_bound: wants a duration"},
		{"batch", "four", nil, "batch: wants an integer"},
		{"window", "1s", nil, `unknown policy option "window"`}, // the section's, not a policy's
		{"seed", "3", nil, "unknown policy option"},             // Go only (yaml:"-")
		{"nonsense", "1", nil, "known: wait_bound, latency_budget, tail_budget"},
	} {
		var o policy.Options
		err := SetPolicyOption(&o, tc.key, tc.value)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s=%s: %v", tc.key, tc.value, err)
		case tc.err == "" && !tc.check(o):
			t.Errorf("%s=%s: options %+v", tc.key, tc.value, o)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s=%s: error %v, want one with %q", tc.key, tc.value, err, tc.err)
		}
	}
}

func TestPolicyOptionsSpeltAsInTheFile(t *testing.T) {
	o := policy.NewOptions(policy.BudgetOptions{LatencyBudget: "1.10x"}, policy.SMDPOptions{W1: 1})
	policy.Each(&o, func(h *policy.HoldOptions) { h.MaxWait = 3 * time.Millisecond })
	doc := PolicyOptions(o)
	for key, want := range map[string]any{"latency_budget": "1.10x", "wait_bound": "3ms", "w1": 1.0, "batch": 0} {
		if got, ok := doc[key]; !ok || got != want {
			t.Errorf("%s: %v (%T), want %v", key, got, got, want)
		}
	}
	for _, goOnly := range []string{"seed", "Seed", "solve_free", "SolveFree"} {
		if _, ok := doc[goOnly]; ok {
			t.Errorf("%s, set from Go only, is shown", goOnly)
		}
	}
}

// A key belongs to the policies whose options have it: set for another
// policy it is refused, naming the policies that take it.
func TestPolicyTakes(t *testing.T) {
	for _, tc := range []struct {
		policy, key string
		err         string // in the error; "" for none
	}{
		{"budget", "latency_budget", ""},
		{"budget", "wait_bound", ""},
		{"budget", "sla", ""},
		{"budget", "solve_share", ""},
		{"smdp", "w2", ""},
		{"smdp", "solve_share", ""},
		{"static", "batch", ""},
		{"slack", "sla", ""},
		{"elastic", "row_cap", ""},
		{"maxbatch", "max_queue_delay", ""},
		{"batchmonitor", "wait_bound", ""},
		{"batchmonitor+", "wait_bound", ""},
		{"adhoc", "latency_budget", "latency_budget applies to the budget policy"},
		{"smdp", "tail_budget", "tail_budget applies to the budget policy"},
		{"budget", "w1", "w1 applies to the smdp policy"},
		{"budget", "batch", "batch applies to the static policy"},
		{"slack", "row_cap", "row_cap applies to the elastic policy"},
		{"static", "sla", "sla applies to the budget, slack policies, not to static"},
		{"adhoc", "wait_bound", "wait_bound applies to the batchmonitor, batchmonitor+, budget, smdp, static policies"},
		{"elastic", "solve_share", "solve_share applies to the budget, smdp policies"},
		{"nonsense", "batch", ""},  // the unknown policy is New's to say
		{"budget", "nonsense", ""}, // the unknown key is SetPolicyOption's
	} {
		err := PolicyTakes(tc.policy, tc.key)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s %s: error %v, want one with %q", tc.policy, tc.key, err, tc.err)
		}
	}
}

// Every key of the policy section is one of some policy's options, with
// one type; each copy of a shared key follows the file, the environment
// and a flag alike.
func TestPolicyKeysAreEachPolicys(t *testing.T) {
	for _, f := range yamlFields(reflect.TypeFor[policy.Options]()) {
		found := false
		for _, n := range policy.Names() {
			found = found || slices.Contains(policyKeys(n), f.name)
		}
		if !found {
			t.Errorf("key %s belongs to no policy", f.name)
		}
	}
	c, err := Load(Source{
		File:      writeFile(t, "upstream: http://u\npolicy: {wait_bound: 4ms}\n"),
		LookupEnv: env(map[string]string{"RATEBATCH_POLICY_SOLVE_SHARE": "0.5"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	o := c.Policy.Options
	if !waitBound(o, 4*time.Millisecond) {
		t.Errorf("wait_bound 4ms from the file: %+v", o)
	}
	if smdp := policy.OptionsOf[policy.SMDPOptions](o); smdp.SolveShare != 0.5 || budget(o).SolveShare != 0.5 {
		t.Errorf("solve_share 0.5 from the environment: smdp %v, budget %v", smdp.SolveShare, budget(o).SolveShare)
	}
	// A bad value of a policy's option names the key under policy.
	_, err = Load(Source{File: writeFile(t, "upstream: http://u\npolicy: {w1: 0, w2: 1}\n")})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "policy.w1" {
		t.Errorf("w1 0 with w2 1: error %v, want one for policy.w1", err)
	}
}

// The options a policy in force shows (GET /policy, /status): only the
// ones it takes, each with the default its zero value stands for.
func TestPolicyOptionsOf(t *testing.T) {
	def := Default().Policy.Options
	slo := def
	policy.Each(&slo, func(b *policy.BudgetOptions) { b.SLOP99 = 12 * time.Millisecond })
	for _, tc := range []struct {
		name string
		o    policy.Options
		want map[string]any
	}{
		{"budget", def, map[string]any{"latency_budget": "1.10x", "tail_budget": "1.20x", "capacity_floor": "0.97", "slo_p99": "0s", "sla": "0s",
			"wait_bound": "0s", "solve_share": 0.02}},
		{"budget", slo, map[string]any{"latency_budget": "", "tail_budget": "off", "capacity_floor": "0.97", "slo_p99": "12ms", "sla": "0s",
			"wait_bound": "0s", "solve_share": 0.02}},
		{"maxbatch", def, map[string]any{"max_queue_delay": "5ms"}},
		{"maxbatch", policy.Options{}, map[string]any{"max_queue_delay": "10ms"}},
		{"smdp", policy.Options{}, map[string]any{"w1": 1.0, "w2": 0.0, "wait_bound": "0s", "solve_share": 0.02}},
		{"static", def, map[string]any{"batch": 0, "wait_bound": "1s"}},
		{"elastic", def, map[string]any{"row_cap": 0}},
		{"adhoc", def, map[string]any{}},
		{Passthrough, def, map[string]any{}},
	} {
		got := PolicyOptionsOf(tc.name, tc.o)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every key the policy section had when Options listed each policy's
// struct by hand loads as it did, from the file, the environment and a
// flag alike, into the options of the policies that take it; and the
// section has no other key.
func TestPolicyKeysLoadAsBefore(t *testing.T) {
	type opts = policy.Options
	of := func(o opts) (policy.BudgetOptions, policy.SMDPOptions, policy.StaticOptions) {
		return budget(o), policy.OptionsOf[policy.SMDPOptions](o), policy.OptionsOf[policy.StaticOptions](o)
	}
	ms := time.Millisecond
	tests := []struct {
		key, value string
		ok         func(opts) bool
	}{
		{"max_queue_delay", "7ms", func(o opts) bool { return policy.OptionsOf[policy.MaxBatchOptions](o).MaxQueueDelay == 7*ms }},
		{"batch", "4", func(o opts) bool { _, _, s := of(o); return s.Batch == 4 }},
		{"wait_bound", "3ms", func(o opts) bool { return waitBound(o, 3*ms) }},
		{"sla", "50ms", func(o opts) bool {
			b, _, _ := of(o)
			return b.SLA == 50*ms && policy.OptionsOf[policy.SlackOptions](o).SLA == 50*ms
		}},
		{"w1", "2", func(o opts) bool { _, s, _ := of(o); return s.W1 == 2 }},
		{"w2", "0.5", func(o opts) bool { _, s, _ := of(o); return s.W1 == 1 && s.W2 == 0.5 }},
		{"solve_share", "0.5", func(o opts) bool { b, s, _ := of(o); return b.SolveShare == 0.5 && s.SolveShare == 0.5 }},
		{"row_cap", "48", func(o opts) bool { return policy.OptionsOf[policy.ElasticOptions](o).RowCap == 48 }},
		{"latency_budget", "1.5x", func(o opts) bool { b, _, _ := of(o); return b.LatencyBudget == "1.5x" }},
		{"tail_budget", "off", func(o opts) bool { b, _, _ := of(o); return b.TailBudget == "off" }},
		{"capacity_floor", "off", func(o opts) bool { b, _, _ := of(o); return b.CapacityFloor == "off" }},
		{"slo_p99", "12ms", func(o opts) bool { b, _, _ := of(o); return b.SLOP99 == 12*ms }},
	}
	var keys []string
	for _, f := range yamlFields(optionsType) {
		keys = append(keys, f.name)
	}
	for _, tc := range tests {
		if !slices.Contains(keys, tc.key) {
			t.Errorf("the policy section lost the key %s", tc.key)
		}
		flagName := "policy-" + strings.ReplaceAll(tc.key, "_", "-")
		for source, src := range map[string]func() Source{
			"file": func() Source {
				return Source{File: writeFile(t, "upstream: http://u\npolicy:\n  "+tc.key+": "+tc.value+"\n")}
			},
			"environment": func() Source {
				return Source{File: writeFile(t, "upstream: http://u\n"),
					LookupEnv: env(map[string]string{"RATEBATCH_POLICY_" + strings.ToUpper(tc.key): tc.value})}
			},
			"flag": func() Source {
				fs := flag.NewFlagSet("serve", flag.ContinueOnError)
				BindFlags(fs)
				if err := fs.Parse([]string{"--" + flagName, tc.value}); err != nil {
					t.Fatal(err)
				}
				return Source{File: writeFile(t, "upstream: http://u\n"), Flags: fs}
			},
		} {
			c, err := Load(src())
			if err != nil {
				t.Errorf("%s %s=%s: %v", source, tc.key, tc.value, err)
				continue
			}
			if !tc.ok(c.Policy.Options) {
				t.Errorf("%s %s=%s: options %+v", source, tc.key, tc.value, c.Policy.Options)
			}
		}
	}
	if len(keys) != len(tests) {
		t.Errorf("the policy section's keys are %v, want only the %d above", keys, len(tests))
	}
}

// The options a policy takes that are set, as PUT /policy spells them:
// another policy's are left out, and so are those at their zero value.
func TestOwnOptions(t *testing.T) {
	var o policy.Options
	for k, v := range map[string]string{"latency_budget": "1.25x", "slo_p99": "15ms", "max_queue_delay": "2ms", "w1": "0.5"} {
		if err := SetPolicyOption(&o, k, v); err != nil {
			t.Fatal(err)
		}
	}
	got := OwnOptions(policy.NameBudget, o)
	if len(got) != 2 || got["latency_budget"] != "1.25x" || got["slo_p99"] != "15ms" {
		t.Errorf("budget's own options %v, want latency_budget 1.25x and slo_p99 15ms only", got)
	}
	if got := OwnOptions(policy.NameMaxBatch, o); len(got) != 1 || got["max_queue_delay"] != "2ms" {
		t.Errorf("maxbatch's own options %v, want max_queue_delay 2ms", got)
	}
	if got := OwnOptions(policy.NameSMDP, o); got["w1"] != "0.5" {
		t.Errorf("smdp's own options %v, want w1 0.5", got)
	}
	if got := OwnOptions(policy.NameAdhoc, o); len(got) != 0 {
		t.Errorf("adhoc's own options %v, want none", got)
	}
}
