package emulator

import (
	"strings"

	"github.com/ratebatch/ratebatch/kserve"
)

// The JSON bodies of the non-inference endpoints, shaped as Triton writes
// them so that the proxy and tritonclient discover models from the emulator
// exactly as they would from Triton.

// serverName and serverVersion identify the emulator in GET /v2; clients
// read the extensions, not the name.
const (
	serverName    = "ratebatch-emulator"
	serverVersion = "2.0.0"
	// platform and backend name the emulator where Triton names the
	// framework that runs the model.
	platform = "ratebatch_emulator"
	backend  = "ratebatch_emulator"
)

// extensions lists the KServe/Triton protocol extensions the emulator
// implements (model_repository: index, load and unload).
var extensions = []string{"binary_tensor_data", "classification", "model_configuration", "model_repository", "statistics"}

func (m *model) metadata() kserve.ModelMetadata {
	md := kserve.ModelMetadata{Name: m.name, Versions: []string{modelVersion}, Platform: platform}
	for _, t := range m.inputs {
		md.Inputs = append(md.Inputs, kserve.TensorMetadata{Name: t.name, Datatype: string(t.datatype), Shape: m.shape(t)})
	}
	for _, t := range m.outputs {
		md.Outputs = append(md.Outputs, kserve.TensorMetadata{Name: t.name, Datatype: string(t.datatype), Shape: m.shape(t)})
	}
	return md
}

// modelConfig is the subset of Triton's ModelConfig (model_config.proto, in
// the JSON form of GET /v2/models/{m}/config) that describes the emulated
// models. dynamic_batching is absent on purpose: the emulator, like Triton
// without a dynamic batcher, executes each request as one batch.
type modelConfig struct {
	Name                 string          `json:"name"`
	Platform             string          `json:"platform"`
	Backend              string          `json:"backend"`
	VersionPolicy        map[string]any  `json:"version_policy"`
	MaxBatchSize         int             `json:"max_batch_size"`
	Input                []configInput   `json:"input"`
	Output               []configOutput  `json:"output"`
	BatchInput           []any           `json:"batch_input"`
	BatchOutput          []any           `json:"batch_output"`
	InstanceGroup        []instanceGroup `json:"instance_group"`
	DefaultModelFilename string          `json:"default_model_filename"`
	Parameters           map[string]any  `json:"parameters"`
	ModelWarmup          []any           `json:"model_warmup"`
}

type configInput struct {
	Name             string  `json:"name"`
	DataType         string  `json:"data_type"`
	Format           string  `json:"format"`
	Dims             []int64 `json:"dims"`
	IsShapeTensor    bool    `json:"is_shape_tensor"`
	AllowRaggedBatch bool    `json:"allow_ragged_batch"`
	Optional         bool    `json:"optional"`
}

type configOutput struct {
	Name          string  `json:"name"`
	DataType      string  `json:"data_type"`
	Dims          []int64 `json:"dims"`
	LabelFilename string  `json:"label_filename"`
	IsShapeTensor bool    `json:"is_shape_tensor"`
}

type instanceGroup struct {
	Name             string `json:"name"`
	Kind             string `json:"kind"`
	Count            int    `json:"count"`
	GPUs             []int  `json:"gpus"`
	SecondaryDevices []any  `json:"secondary_devices"`
	Profile          []any  `json:"profile"`
	Passive          bool   `json:"passive"`
	HostPolicy       string `json:"host_policy"`
}

// configType is the model-config spelling of a datatype: TYPE_INT32 for
// INT32, TYPE_FP32 for FP32, TYPE_STRING for BYTES.
func configType(d string) string {
	if d == "BYTES" {
		return "TYPE_STRING"
	}
	return "TYPE_" + strings.ToUpper(d)
}

func (m *model) config() modelConfig {
	c := modelConfig{
		Name:          m.name,
		Platform:      platform,
		Backend:       backend,
		VersionPolicy: map[string]any{"latest": map[string]any{"num_versions": 1}},
		MaxBatchSize:  m.maxBatch,
		BatchInput:    []any{},
		BatchOutput:   []any{},
		InstanceGroup: []instanceGroup{{
			Name: m.name + "_0", Kind: "KIND_GPU", Count: m.instances, GPUs: []int{0},
			SecondaryDevices: []any{}, Profile: []any{},
		}},
		Parameters:  map[string]any{},
		ModelWarmup: []any{},
	}
	for _, t := range m.inputs {
		c.Input = append(c.Input, configInput{Name: t.name, DataType: configType(string(t.datatype)), Format: "FORMAT_NONE", Dims: t.dims})
	}
	for _, t := range m.outputs {
		c.Output = append(c.Output, configOutput{Name: t.name, DataType: configType(string(t.datatype)), Dims: t.dims})
	}
	return c
}
