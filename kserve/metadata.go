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
	BatchInput           []any           `json:"batch_input"`
	BatchOutput          []any           `json:"batch_output"`
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

// Batchable reports whether a proxy may batch the model, and why not.
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
	return true, ""
}

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
