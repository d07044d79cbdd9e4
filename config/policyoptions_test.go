package config

import (
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

func TestSetPolicyOption(t *testing.T) {
	for _, tc := range []struct {
		key, value string
		check      func(policy.Options) bool
		err        string // in the error; "" for none
	}{
		{"latency_budget", "1.25x", func(o policy.Options) bool { return o.LatencyBudget == "1.25x" }, ""},
		{"wait_bound", "2ms", func(o policy.Options) bool { return o.MaxWait == 2*time.Millisecond }, ""},
		{"w2", "0.5", func(o policy.Options) bool { return o.W2 == 0.5 }, ""},
		{"batch", "4", func(o policy.Options) bool { return o.Batch == 4 }, ""},
		{"wait_bound", "soon", nil, "wait_bound: wants a duration"},
		{"batch", "four", nil, "batch: wants an integer"},
		{"window", "1s", nil, `unknown policy option "window"`}, // the section's, not a policy's
		{"seed", "3", nil, "unknown policy option"},             // Go only (yaml:"-")
		{"nonsense", "1", nil, "known: max_queue_delay, batch, wait_bound"},
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
	doc := PolicyOptions(policy.Options{LatencyBudget: "1.10x", MaxWait: 3 * time.Millisecond, W1: 1})
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
