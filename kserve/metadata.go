package kserve

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
