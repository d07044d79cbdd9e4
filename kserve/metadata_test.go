package kserve

import (
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
