package registry

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/triton"
)

// TestQueuePolicyFromConfig: a model's priority levels and queue policies,
// as Triton prints its dynamic_batching section (uint64 fields as
// strings), reach the model's queue; a change of them at a later
// discovery does too.
func TestQueuePolicyFromConfig(t *testing.T) {
	const section = `{"preferred_batch_size":[],"max_queue_delay_microseconds":"0","preserve_ordering":false,
		"priority_levels":"3","default_priority_level":"2",
		"default_queue_policy":{"timeout_action":"REJECT","default_timeout_microseconds":"100000","allow_timeout_override":true,"max_queue_size":0},
		"priority_queue_policy":{"1":{"timeout_action":"DELAY","default_timeout_microseconds":"5000","allow_timeout_override":false,"max_queue_size":0}}}`
	up := &fakeUpstream{
		index: []triton.IndexEntry{{Name: "m", State: "READY"}, {Name: "plain", State: "READY"}},
		configs: map[string]*triton.ModelConfig{
			"m":     {Name: "m", MaxBatchSize: 8, DynamicBatching: []byte(section)},
			"plain": {Name: "plain", MaxBatchSize: 8},
		},
		noStats: true,
	}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	r := New(up, q, &cfg, nil)
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := dispatcher.QueuePolicy{Levels: 3, DefaultLevel: 2,
		Default: dispatcher.Timeouts{Default: 100 * time.Millisecond, AllowOverride: true},
		ByLevel: map[uint64]dispatcher.Timeouts{1: {Default: 5 * time.Millisecond, Delay: true}}}
	q.mu.Lock()
	got, plain := q.specs["m"].Queue, q.specs["plain"].Queue
	q.mu.Unlock()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("queue policy %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(plain, dispatcher.QueuePolicy{}) {
		t.Errorf("a model without dynamic_batching: %+v, want Triton's zero policy", plain)
	}
	for _, s := range r.Statuses() {
		if s.Warning != "" {
			t.Errorf("%s: warning %q; a dynamic_batching section without a delay waits for nothing", s.Model, s.Warning)
		}
	}

	up.mu.Lock()
	up.configs["m"] = &triton.ModelConfig{Name: "m", MaxBatchSize: 8,
		DynamicBatching: []byte(`{"default_queue_policy":{"default_timeout_microseconds":"2000"}}`)}
	up.mu.Unlock()
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	got = q.specs["m"].Queue
	q.mu.Unlock()
	if want := (dispatcher.QueuePolicy{Default: dispatcher.Timeouts{Default: 2 * time.Millisecond}}); !reflect.DeepEqual(got, want) {
		t.Errorf("after the config changed: %+v, want %+v", got, want)
	}
}
