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

// configType is the model-config spelling of a datatype: TYPE_INT32 for
// INT32, TYPE_FP32 for FP32, TYPE_STRING for BYTES.
func configType(d string) string {
	if d == "BYTES" {
		return "TYPE_STRING"
	}
	return "TYPE_" + strings.ToUpper(d)
}

func (m *model) config() kserve.ModelConfig {
	c := kserve.ModelConfig{
		Name:          m.name,
		Platform:      platform,
		Backend:       backend,
		VersionPolicy: map[string]any{"latest": map[string]any{"num_versions": 1}},
		MaxBatchSize:  m.maxBatch,
		BatchInput:    []kserve.BatchInput{},
		BatchOutput:   []kserve.BatchOutput{},
		InstanceGroup: []kserve.InstanceGroup{{
			Name: m.name + "_0", Kind: "KIND_GPU", Count: m.instances, GPUs: []int{0},
			SecondaryDevices: []any{}, Profile: []any{},
		}},
		Parameters:  map[string]any{},
		ModelWarmup: []any{},
	}
	for _, t := range m.inputs {
		c.Input = append(c.Input, kserve.ConfigInput{Name: t.name, DataType: configType(string(t.datatype)), Format: "FORMAT_NONE", Dims: t.dims})
	}
	for _, t := range m.outputs {
		c.Output = append(c.Output, kserve.ConfigOutput{Name: t.name, DataType: configType(string(t.datatype)), Dims: t.dims})
	}
	return c
}
