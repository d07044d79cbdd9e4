package kserve

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The JSON bodies of the protocol's non-inference endpoints. One definition
// serves the emulator that writes them, and the load generator and the
// Triton client that read them, so the three cannot drift apart.

// ServerMetadata is the body of GET /v2.
type ServerMetadata struct {
	Name       string   `json:"name"`
	Version    string   `json:"version"`
	Extensions []string `json:"extensions"`
}

// TensorMetadata is one input or output as GET /v2/models/{model} lists it.
// A shape dimension of -1 is variable; a leading -1 is the batch dimension.
type TensorMetadata struct {
	Name     string  `json:"name"`
	Datatype string  `json:"datatype"`
	Shape    []int64 `json:"shape"`
}

// ModelMetadata is the body of GET /v2/models/{model}[/versions/{v}].
type ModelMetadata struct {
	Name     string           `json:"name"`
	Versions []string         `json:"versions,omitempty"`
	Platform string           `json:"platform,omitempty"`
	Inputs   []TensorMetadata `json:"inputs"`
	Outputs  []TensorMetadata `json:"outputs,omitempty"`
}

// IndexEntry is one element of Triton's POST /v2/repository/index (the
// model_repository extension): a model the server knows, ready or not.
type IndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
}

// ModelConfig is Triton's model configuration (model_config.proto) in the
// JSON form of GET /v2/models/{m}/config: every field the emulator writes,
// as Triton writes it, and those the proxy reads to decide what to batch.
type ModelConfig struct {
	Name                 string          `json:"name"`
	Platform             string          `json:"platform"`
	Backend              string          `json:"backend"`
	VersionPolicy        map[string]any  `json:"version_policy"`
	MaxBatchSize         int             `json:"max_batch_size"`
	Input                []ConfigInput   `json:"input"`
	Output               []ConfigOutput  `json:"output"`
	BatchInput           []BatchInput    `json:"batch_input"`
	BatchOutput          []BatchOutput   `json:"batch_output"`
	InstanceGroup        []InstanceGroup `json:"instance_group"`
	DefaultModelFilename string          `json:"default_model_filename"`
	Parameters           map[string]any  `json:"parameters"`
	ModelWarmup          []any           `json:"model_warmup"`
	// DynamicBatching is present when Triton batches the model itself.
	DynamicBatching json.RawMessage `json:"dynamic_batching,omitempty"`
	// SequenceBatching is present for stateful models, which must not be
	// batched by a proxy that cannot see sequence boundaries.
	SequenceBatching json.RawMessage `json:"sequence_batching,omitempty"`
	// Decoupled models answer with a stream; the proxy passes them through.
	ModelTransactionPolicy struct {
		Decoupled bool `json:"decoupled"`
	} `json:"model_transaction_policy,omitzero"`
	// ResponseCache on makes Triton answer a request it has answered
	// before from its cache, keyed by the request's inputs.
	ResponseCache struct {
		Enable bool `json:"enable"`
	} `json:"response_cache,omitzero"`
}

// BatchInput is a batch_input entry: a tensor Triton makes up for the
// model from a batch's requests (each one's element count, its shape,
// ...), which tells the model where each request begins.
type BatchInput struct {
	Kind        string   `json:"kind"`
	TargetName  []string `json:"target_name"`
	DataType    string   `json:"data_type"`
	SourceInput []string `json:"source_input"`
}

// BatchOutput is a batch_output entry: an output Triton scatters back to
// a batch's requests by the shape of one of their inputs.
type BatchOutput struct {
	TargetName  []string `json:"target_name"`
	Kind        string   `json:"kind"`
	SourceInput []string `json:"source_input"`
}

// ConfigInput is an input of a model config.
type ConfigInput struct {
	Name             string `json:"name"`
	DataType         string `json:"data_type"`
	Format           string `json:"format"`
	Dims             Dims   `json:"dims"`
	IsShapeTensor    bool   `json:"is_shape_tensor"`
	AllowRaggedBatch bool   `json:"allow_ragged_batch"`
	Optional         bool   `json:"optional"`
}

// ConfigOutput is an output of a model config.
type ConfigOutput struct {
	Name          string `json:"name"`
	DataType      string `json:"data_type"`
	Dims          Dims   `json:"dims"`
	LabelFilename string `json:"label_filename"`
	IsShapeTensor bool   `json:"is_shape_tensor"`
}

// Dims are a config tensor's dimensions. Triton prints int64 dims as JSON
// numbers or, from protobuf's JSON mapping, as strings; both decode.
type Dims []int64

// UnmarshalJSON implements json.Unmarshaler.
func (d *Dims) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Dims, len(raw))
	for i, r := range raw {
		s := strings.Trim(string(r), `"`)
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("dim %d: %q is not an integer", i, s)
		}
		out[i] = v
	}
	*d = out
	return nil
}

// InstanceGroup is one instance_group entry.
type InstanceGroup struct {
	Name             string `json:"name"`
	Kind             string `json:"kind"`
	Count            int    `json:"count"`
	GPUs             []int  `json:"gpus"`
	SecondaryDevices []any  `json:"secondary_devices"`
	Profile          []any  `json:"profile"`
	Passive          bool   `json:"passive"`
	HostPolicy       string `json:"host_policy"`
}

// Instances is how many executions of the model can run at once: the sum
// over instance groups of count, times the GPUs listed for KIND_GPU groups.
func (m *ModelConfig) Instances() int {
	n := 0
	for _, g := range m.InstanceGroup {
		c := max(g.Count, 1)
		if g.Kind == "KIND_GPU" && len(g.GPUs) > 1 {
			c *= len(g.GPUs)
		}
		n += c
	}
	return max(n, 1)
}

// Batchable reports whether a proxy may batch the model, and why not: a
// merged request is one request to Triton, so a model whose requests
// Triton does not batch by concatenating their rows, or batches only
// under a condition the proxy cannot see, is not merged. (Triton's
// response cache is another matter: see ResponseCached.)
func (m *ModelConfig) Batchable() (bool, string) {
	switch {
	case m.MaxBatchSize <= 0:
		return false, "max_batch_size is 0 (the model takes no batch dimension)"
	case len(m.SequenceBatching) > 0 && string(m.SequenceBatching) != "null":
		return false, "sequence batching: requests carry state"
	case m.ModelTransactionPolicy.Decoupled:
		return false, "decoupled model: responses stream"
	case m.Platform == "ensemble":
		return false, "ensemble: its steps batch on their own"
	}
	for _, in := range m.Input {
		switch {
		case in.AllowRaggedBatch:
			// Triton hands the model each request's elements unpadded,
			// one after another, and a merged request would be one
			// request's worth of them.
			return false, "ragged input " + in.Name + ": Triton batches its requests unpadded, each of its own length"
		case in.IsShapeTensor:
			// A batching model's shape tensor has no batch dimension:
			// Triton batches only requests whose values are equal and
			// sums their batch sizes into its first value, where a
			// merge would concatenate the tensors.
			return false, "shape tensor input " + in.Name + ": Triton batches only equal shape-tensor values and sums their batch sizes"
		}
	}
	for _, o := range m.Output {
		if o.IsShapeTensor {
			return false, "shape tensor output " + o.Name + ": its value is the batch's, not each request's"
		}
	}
	if len(m.BatchInput) > 0 {
		return false, "batch_input " + m.BatchInput[0].Kind + ": Triton describes each request of a batch to the model"
	}
	if len(m.BatchOutput) > 0 {
		return false, "batch_output " + m.BatchOutput[0].Kind + ": Triton scatters the output to each request of a batch"
	}
	return true, ""
}

// ResponseCached reports whether Triton answers the model's repeated
// requests from its response cache: a merged request is a new request
// with its own cache key, so merging turns the callers' hits into misses.
func (m *ModelConfig) ResponseCached() bool { return m.ResponseCache.Enable }

// HalfOutputs names the model's FP16 and BF16 outputs, which Triton writes
// only in binary form (see Request.HalfInJSON). A config's data types are
// the protocol's with a TYPE_ prefix.
func (m *ModelConfig) HalfOutputs() []string {
	var names []string
	for _, o := range m.Output {
		if Datatype(strings.TrimPrefix(o.DataType, "TYPE_")).Half() {
			names = append(names, o.Name)
		}
	}
	return names
}

// DynamicBatching is the part of a model's dynamic_batching section that
// rules each request in Triton's queue: its priority levels and its queue
// policies (model_config.proto's ModelDynamicBatching).
type DynamicBatching struct {
	MaxQueueDelayMicroseconds ConfigUint `json:"max_queue_delay_microseconds"`
	// PriorityLevels is how many levels a request's priority may name
	// (1 is the highest); 0: one level, every priority ignored.
	PriorityLevels ConfigUint `json:"priority_levels"`
	// DefaultPriorityLevel is the level of a request that names none, or
	// one above PriorityLevels.
	DefaultPriorityLevel ConfigUint `json:"default_priority_level"`
	// DefaultQueuePolicy rules every level PriorityQueuePolicy does not.
	DefaultQueuePolicy QueuePolicy `json:"default_queue_policy"`
	// PriorityQueuePolicy is the policy of some levels, by level.
	PriorityQueuePolicy map[string]QueuePolicy `json:"priority_queue_policy"`
}

// QueuePolicy is Triton's ModelQueuePolicy: how long a request may wait
// in the model's queue, whether its own timeout parameter may shorten
// that, and what becomes of it once it has waited longer.
type QueuePolicy struct {
	// TimeoutAction is REJECT (the default: the request is answered
	// UNAVAILABLE "Request timeout expired") or DELAY (it goes after the
	// requests that have not timed out).
	TimeoutAction TimeoutAction `json:"timeout_action"`
	// DefaultTimeoutMicroseconds is every request's timeout; 0: none.
	DefaultTimeoutMicroseconds ConfigUint `json:"default_timeout_microseconds"`
	// AllowTimeoutOverride lets a request's timeout parameter shorten
	// the default (never lengthen it).
	AllowTimeoutOverride bool       `json:"allow_timeout_override"`
	MaxQueueSize         ConfigUint `json:"max_queue_size"`
}

// Batching reads the model's dynamic_batching section: its zero value
// (one priority level, no timeout) when the section is absent, as Triton
// schedules such a model.
func (m *ModelConfig) Batching() (DynamicBatching, error) {
	var db DynamicBatching
	if len(m.DynamicBatching) == 0 || string(m.DynamicBatching) == "null" {
		return db, nil
	}
	if err := json.Unmarshal(m.DynamicBatching, &db); err != nil {
		return DynamicBatching{}, fmt.Errorf("dynamic_batching: %w", err)
	}
	return db, nil
}

// ConfigUint is a config's uint64 field: protobuf's JSON mapping prints it as
// a string ("100"), other writers as a number; both decode.
type ConfigUint uint64

// UnmarshalJSON implements json.Unmarshaler.
func (u *ConfigUint) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" {
		return nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("%s is not an unsigned integer", b)
	}
	*u = ConfigUint(v)
	return nil
}

// TimeoutAction is a queue policy's timeout_action, by its name (REJECT,
// DELAY) or its number in model_config.proto (0, 1).
type TimeoutAction string

// UnmarshalJSON implements json.Unmarshaler.
func (a *TimeoutAction) UnmarshalJSON(b []byte) error {
	switch s := strings.Trim(string(b), `"`); s {
	case "0", "REJECT", "null", "":
		*a = "REJECT"
	case "1", "DELAY":
		*a = "DELAY"
	default:
		return fmt.Errorf("timeout_action %s is neither REJECT nor DELAY", b)
	}
	return nil
}
