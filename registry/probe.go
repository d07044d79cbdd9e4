package registry

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/kserve"
)

// maxProbeBytes bounds a synthesised probe: one row of a model whose row is
// larger than this is better probed with a request from the configuration.
const maxProbeBytes = 16 << 20

// ProbeRequest builds the inference the proxy sends on its own to test a
// failing model (dispatcher.ModelSpec.Probe): one row of zeros of each
// required input's shape and datatype, from the model's configuration.
// Variable dimensions (-1) take 1; BYTES elements are empty; every tensor
// goes in Triton's binary form, the one form that takes every datatype
// (FP16 and BF16 have no JSON form), and so do the outputs asked back.
// Inputs that cannot be made up (shape tensors, whose values matter;
// unknown datatypes) are an error: such a model needs models.NAME.probe.
func ProbeRequest(mc *triton.ModelConfig) (dispatcher.Wire, error) {
	req := &kserve.Request{ID: dispatcher.ProbeID,
		Parameters: kserve.Parameters{kserve.ParamBinaryDataOutput: true}}
	size := 0
	for _, in := range mc.Input {
		if in.Optional {
			continue
		}
		if in.IsShapeTensor {
			return dispatcher.Wire{}, fmt.Errorf("input %s is a shape tensor: its values matter", in.Name)
		}
		dt := configDatatype(in.DataType)
		if !dt.Valid() {
			return dispatcher.Wire{}, fmt.Errorf("input %s: datatype %q has no zero value the proxy knows", in.Name, in.DataType)
		}
		var shape []int64
		if mc.MaxBatchSize > 0 {
			shape = append(shape, 1)
		}
		for _, d := range in.Dims {
			shape = append(shape, max(d, 1)) // -1: variable, one will do
		}
		n, err := kserve.ElementCount(shape)
		if err != nil {
			return dispatcher.Wire{}, fmt.Errorf("input %s: %w", in.Name, err)
		}
		elem := int64(dt.Size())
		if dt == kserve.Bytes {
			elem = 4 // each element a zero length
		}
		if n > maxProbeBytes/elem || size+int(n*elem) > maxProbeBytes {
			return dispatcher.Wire{}, fmt.Errorf("input %s: a row of %s is over %d MiB", in.Name, kserve.FormatShape(shape), maxProbeBytes>>20)
		}
		size += int(n * elem)
		req.Inputs = append(req.Inputs, kserve.Tensor{Name: in.Name, Datatype: dt, Shape: shape,
			Data: make([]byte, n*elem), Binary: true})
	}
	if len(req.Inputs) == 0 {
		return dispatcher.Wire{}, errors.New("the configuration names no required input")
	}
	body, hl, err := kserve.AppendRequest(nil, req, true)
	if err != nil {
		return dispatcher.Wire{}, err
	}
	return dispatcher.Wire{Body: body, HeaderLen: hl}, nil
}

// configDatatype is the protocol's name of a model configuration's data
// type: TYPE_FP32 is FP32, TYPE_STRING is BYTES.
func configDatatype(s string) kserve.Datatype {
	s = strings.TrimPrefix(s, "TYPE_")
	if s == "STRING" {
		return kserve.Bytes
	}
	return kserve.Datatype(s)
}

// ConfiguredProbe is a probe request from the configuration
// (models.NAME.probe): a KServe v2 JSON request body.
func ConfiguredProbe(body string) (dispatcher.Wire, error) {
	if err := config.CheckProbe(body); err != nil {
		return dispatcher.Wire{}, err
	}
	return dispatcher.Wire{Body: []byte(body), HeaderLen: -1}, nil
}

// probeFor is the model's probe: from the configuration when it gives one,
// else made up from the model's configuration. why says why there is none.
func (r *Models) probeFor(name string, mc *triton.ModelConfig) (w dispatcher.Wire, why string) {
	if body := r.cfg.Models[name].Probe; body != "" {
		w, err := ConfiguredProbe(body)
		if err != nil { // config.Validate refuses it; a reload might not
			return dispatcher.Wire{}, "models." + name + ".probe: " + err.Error()
		}
		return w, ""
	}
	w, err := ProbeRequest(mc)
	if err != nil {
		return dispatcher.Wire{}, "no probe inference can be built (" + err.Error() + "); set models." + name + ".probe"
	}
	return w, ""
}

// Unready says why the proxy is not ready, "" when it is: the upstream's
// models are not read yet, or the queues (the dispatcher's Unready) take
// the upstream for down or sick.
func (r *Models) Unready() string {
	if !r.Discovered() {
		r.mu.Lock()
		err := r.lastErr
		r.mu.Unlock()
		if err != nil {
			return "the upstream's models are not read yet: " + err.Error()
		}
		return "the upstream's models are not read yet"
	}
	return r.queues.Unready()
}

// probeSource describes a model's probe for its status.
func probeSource(configured bool, why string) string {
	switch {
	case why != "":
		return "none: " + why
	case configured:
		return "configured (models.NAME.probe)"
	}
	return "synthesised: one row of zeros from the model's configuration"
}
