package kserve

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestBatching: a dynamic_batching section decodes whether its uint64
// fields are strings (protobuf's JSON mapping, as Triton prints them) or
// numbers, and its timeout_action a name or a number; a model without the
// section has Triton's zero policy.
func TestBatching(t *testing.T) {
	for _, tc := range []struct {
		section string
		want    DynamicBatching
		err     bool
	}{
		{``, DynamicBatching{}, false},
		{`null`, DynamicBatching{}, false},
		{`{"priority_levels":"2","default_queue_policy":{"timeout_action":"DELAY","default_timeout_microseconds":"1500"}}`,
			DynamicBatching{PriorityLevels: 2, DefaultQueuePolicy: QueuePolicy{TimeoutAction: "DELAY", DefaultTimeoutMicroseconds: 1500}}, false},
		{`{"priority_levels":2,"default_queue_policy":{"timeout_action":1,"default_timeout_microseconds":18446744073709551615,"allow_timeout_override":true}}`,
			DynamicBatching{PriorityLevels: 2, DefaultQueuePolicy: QueuePolicy{TimeoutAction: "DELAY", DefaultTimeoutMicroseconds: 1<<64 - 1, AllowTimeoutOverride: true}}, false},
		{`{"default_queue_policy":{"timeout_action":"DROP"}}`, DynamicBatching{}, true},
		{`{"priority_levels":"-1"}`, DynamicBatching{}, true},
	} {
		mc := ModelConfig{DynamicBatching: []byte(tc.section)}
		got, err := mc.Batching()
		if (err != nil) != tc.err || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v (error %v)", tc.section, got, err, tc.want, tc.err)
		}
	}
}

// FuzzModelConfig: whatever a server answers for a model's configuration,
// reading what decides its mode and its queue policy errs or answers, and
// never panics; a section that decodes decodes the same again.
func FuzzModelConfig(f *testing.F) {
	for _, s := range []string{
		`{"name":"m","max_batch_size":8,"input":[{"name":"X","dims":["-1"],"allow_ragged_batch":true,"is_shape_tensor":true}]}`,
		`{"max_batch_size":4,"batch_input":[{"kind":"BATCH_ELEMENT_COUNT","target_name":["N"],"source_input":["X"]}],"batch_output":[{}]}`,
		`{"max_batch_size":4,"response_cache":{"enable":true},"model_transaction_policy":{"decoupled":false},"sequence_batching":null}`,
		`{"max_batch_size":4,"dynamic_batching":{"priority_levels":"3","default_priority_level":2,"default_queue_policy":{"timeout_action":"DELAY","default_timeout_microseconds":"18446744073709551615","allow_timeout_override":true},"priority_queue_policy":{"1":{"timeout_action":0}}}}`,
		`{"dynamic_batching":{"default_queue_policy":{"timeout_action":"x"}}}`,
		`{"dynamic_batching":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var mc ModelConfig
		if json.Unmarshal(data, &mc) != nil {
			return
		}
		if ok, why := mc.Batchable(); ok == (why != "") {
			t.Fatalf("Batchable() = %v %q: a reason exactly when not batchable", ok, why)
		}
		mc.ResponseCached()
		mc.Instances()
		mc.HalfOutputs()
		db, err := mc.Batching()
		if err != nil {
			return
		}
		again, err := mc.Batching()
		if err != nil || !reflect.DeepEqual(db, again) {
			t.Fatalf("decoded %+v, then %+v, %v", db, again, err)
		}
	})
}
