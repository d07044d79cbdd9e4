// Package grpcwire converts between the KServe v2 gRPC messages
// (inference.GRPCInferenceService, Triton's gRPC API) and kserve's types,
// and carries gRPC messages as unread bytes. The proxy's gRPC door, the
// emulator's and the load generator's gRPC client share it, so a tensor
// reads the same through either door and either end.
package grpcwire

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/http"

	"github.com/ratebatch/ratebatch/kserve"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// ToRequest converts a gRPC inference request into the kserve.Request the
// dispatcher queues, so that it batches with HTTP callers of the same key.
// Tensor data ends in the one form kserve keeps: row-major little-endian
// bytes, BYTES elements each after a 4-byte length. raw_input_contents are
// used as they are; typed contents are packed. An input in shared memory
// (its shared_memory_region parameter) has no data in the message, and
// raw_input_contents are indexed over the other inputs only, as Triton
// reads them: tritonclient sends some inputs in a region and the others
// raw. Every tensor is checked against its declared shape before anything
// is allocated for it, so a huge declared shape costs nothing. Errors are
// *kserve.Error with 400, in Triton's words where Triton refuses the same.
//
// ToRequest stays one function: one pass over the message's inputs, raw
// contents and outputs, whose indices depend on each other.
func ToRequest(m *pb.ModelInferRequest) (*kserve.Request, error) {
	raw := m.GetRawInputContents()
	next := 0 // the raw entry of the next input not in shared memory
	req := &kserve.Request{ID: m.GetId(), Inputs: make([]kserve.Tensor, len(m.GetInputs()))}
	var err error
	if req.Parameters, err = fromParams(m.GetParameters()); err != nil {
		return nil, bad("request parameters: %v", err)
	}
	// Triton's gRPC front end reads this one itself (perf_analyzer sends
	// it); over HTTP, where batches go, a "triton_" key is refused.
	delete(req.Parameters, paramEmptyFinalResponse)
	for i, in := range m.GetInputs() {
		t := &req.Inputs[i]
		t.Name, t.Datatype, t.Shape, t.Binary = in.GetName(), kserve.Datatype(in.GetDatatype()), in.GetShape(), true
		if t.Name == "" {
			return nil, bad("input %d has no name", i)
		}
		if !t.Datatype.Valid() {
			return nil, bad("input '%s': unknown datatype '%s' (want one of BOOL, UINT8..UINT64, INT8..INT64, FP16, BF16, FP32, FP64, BYTES)", t.Name, in.GetDatatype())
		}
		if t.Parameters, err = fromParams(in.GetParameters()); err != nil {
			return nil, bad("input '%s' parameters: %v", t.Name, err)
		}
		n, err := kserve.ElementCount(t.Shape)
		if err != nil {
			return nil, bad("input '%s': %v", t.Name, err)
		}
		if t.SharedMemory() {
			if hasContents(in.GetContents()) {
				return nil, bad("unexpected 'content' provided when using shared memory for input tensor '%s'", t.Name)
			}
			continue // Triton reads it from the region; the request passes through
		}
		switch {
		case len(raw) > 0:
			if hasContents(in.GetContents()) {
				return nil, bad("contents field must not be specified when using raw_input_contents for '%s'", t.Name)
			}
			if next == len(raw) {
				return nil, bad("unable to find data for input tensor '%s' in request: raw_input_contents has %d entries for the inputs not in shared memory", t.Name, len(raw))
			}
			t.Data = raw[next]
			next++
		default:
			if t.Data, err = packContents(t.Datatype, n, in.GetContents()); err != nil {
				return nil, bad("input '%s': shape %s: %v", t.Name, kserve.FormatShape(t.Shape), err)
			}
		}
		if err := t.CheckData(); err != nil {
			return nil, bad("%v", err)
		}
	}
	if len(m.GetOutputs()) > 0 {
		req.Outputs = make([]kserve.RequestedOutput, len(m.GetOutputs()))
		for i, o := range m.GetOutputs() {
			if o.GetName() == "" {
				return nil, bad("requested output %d has no name", i)
			}
			req.Outputs[i].Name = o.GetName()
			if req.Outputs[i].Parameters, err = fromParams(o.GetParameters()); err != nil {
				return nil, bad("output '%s' parameters: %v", o.GetName(), err)
			}
		}
	}
	return req, nil
}

// paramEmptyFinalResponse is the request parameter of Triton's gRPC front
// end that asks for an empty last answer on a decoupled stream.
const paramEmptyFinalResponse = "triton_enable_empty_final_response"

func bad(format string, args ...any) *kserve.Error {
	return &kserve.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf(format, args...)}
}

func hasContents(c *pb.InferTensorContents) bool {
	return c != nil && (len(c.BoolContents)+len(c.IntContents)+len(c.Int64Contents)+len(c.UintContents)+
		len(c.Uint64Contents)+len(c.Fp32Contents)+len(c.Fp64Contents)+len(c.BytesContents) > 0)
}

// packContents lays typed contents out as raw bytes. The list the datatype
// reads must hold exactly n elements, and no other list may be used.
//
// It stays one function: one case per datatype, each the same few lines on
// its own typed list.
func packContents(dt kserve.Datatype, n int64, c *pb.InferTensorContents) ([]byte, error) {
	if c == nil {
		c = &pb.InferTensorContents{}
	}
	var have int
	var list string
	switch dt {
	case kserve.Bool:
		have, list = len(c.BoolContents), "bool_contents"
	case kserve.Int8, kserve.Int16, kserve.Int32:
		have, list = len(c.IntContents), "int_contents"
	case kserve.Int64:
		have, list = len(c.Int64Contents), "int64_contents"
	case kserve.Uint8, kserve.Uint16, kserve.Uint32:
		have, list = len(c.UintContents), "uint_contents"
	case kserve.Uint64:
		have, list = len(c.Uint64Contents), "uint64_contents"
	case kserve.FP32:
		have, list = len(c.Fp32Contents), "fp32_contents"
	case kserve.FP64:
		have, list = len(c.Fp64Contents), "fp64_contents"
	case kserve.Bytes:
		have, list = len(c.BytesContents), "bytes_contents"
	default: // FP16, BF16
		return nil, fmt.Errorf("datatype %s has no typed contents; send it in raw_input_contents", dt)
	}
	if int64(have) != n {
		return nil, fmt.Errorf("needs %d elements, %s has %d", n, list, have)
	}
	if total := len(c.BoolContents) + len(c.IntContents) + len(c.Int64Contents) + len(c.UintContents) +
		len(c.Uint64Contents) + len(c.Fp32Contents) + len(c.Fp64Contents) + len(c.BytesContents); total != have {
		return nil, fmt.Errorf("datatype %s reads %s only, but other contents lists are set too", dt, list)
	}
	le := binary.LittleEndian
	out := make([]byte, 0, int(n)*max(dt.Size(), 1))
	switch dt {
	case kserve.Bool:
		for _, v := range c.BoolContents {
			b := byte(0)
			if v {
				b = 1
			}
			out = append(out, b)
		}
	case kserve.Int8:
		for _, v := range c.IntContents {
			out = append(out, byte(int8(v)))
		}
	case kserve.Int16:
		for _, v := range c.IntContents {
			out = le.AppendUint16(out, uint16(int16(v)))
		}
	case kserve.Int32:
		for _, v := range c.IntContents {
			out = le.AppendUint32(out, uint32(v))
		}
	case kserve.Int64:
		for _, v := range c.Int64Contents {
			out = le.AppendUint64(out, uint64(v))
		}
	case kserve.Uint8:
		for _, v := range c.UintContents {
			out = append(out, byte(v))
		}
	case kserve.Uint16:
		for _, v := range c.UintContents {
			out = le.AppendUint16(out, uint16(v))
		}
	case kserve.Uint32:
		for _, v := range c.UintContents {
			out = le.AppendUint32(out, v)
		}
	case kserve.Uint64:
		for _, v := range c.Uint64Contents {
			out = le.AppendUint64(out, v)
		}
	case kserve.FP32:
		for _, v := range c.Fp32Contents {
			out = le.AppendUint32(out, math.Float32bits(v))
		}
	case kserve.FP64:
		for _, v := range c.Fp64Contents {
			out = le.AppendUint64(out, math.Float64bits(v))
		}
	case kserve.Bytes:
		for _, v := range c.BytesContents {
			if uint64(len(v)) > math.MaxUint32 {
				return nil, fmt.Errorf("BYTES element of %d bytes exceeds the 4 GiB element limit", len(v))
			}
			out = kserve.AppendBytesElement(out, v)
		}
	}
	return out, nil
}

// fromParams converts gRPC parameters to kserve's: uint64 values that fit
// become int64, as the JSON decoder reads integers, so that a request's
// batch key and its schedule parameters read the same whichever door it
// came through.
func fromParams(m map[string]*pb.InferParameter) (kserve.Parameters, error) {
	if len(m) == 0 {
		return nil, nil
	}
	p := make(kserve.Parameters, len(m))
	for k, v := range m {
		switch c := v.GetParameterChoice().(type) {
		case *pb.InferParameter_BoolParam:
			p[k] = c.BoolParam
		case *pb.InferParameter_Int64Param:
			p[k] = c.Int64Param
		case *pb.InferParameter_StringParam:
			p[k] = c.StringParam
		case *pb.InferParameter_DoubleParam:
			p[k] = c.DoubleParam
		case *pb.InferParameter_Uint64Param:
			if c.Uint64Param <= math.MaxInt64 {
				p[k] = int64(c.Uint64Param)
			} else {
				p[k] = c.Uint64Param
			}
		default:
			return nil, fmt.Errorf("parameter '%s' has no value", k)
		}
	}
	return p, nil
}

// toParams converts kserve parameters back; values kept as JSON text
// (objects, arrays) travel as their text in string_param.
func toParams(p kserve.Parameters) map[string]*pb.InferParameter {
	if len(p) == 0 {
		return nil
	}
	m := make(map[string]*pb.InferParameter, len(p))
	for k, v := range p {
		var ip pb.InferParameter
		switch x := v.(type) {
		case bool:
			ip.ParameterChoice = &pb.InferParameter_BoolParam{BoolParam: x}
		case int64:
			ip.ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: x}
		case int:
			ip.ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: int64(x)}
		case int32:
			ip.ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: int64(x)}
		case uint32:
			ip.ParameterChoice = &pb.InferParameter_Int64Param{Int64Param: int64(x)}
		case uint64:
			ip.ParameterChoice = &pb.InferParameter_Uint64Param{Uint64Param: x}
		case float64:
			ip.ParameterChoice = &pb.InferParameter_DoubleParam{DoubleParam: x}
		case float32:
			ip.ParameterChoice = &pb.InferParameter_DoubleParam{DoubleParam: float64(x)}
		case string:
			ip.ParameterChoice = &pb.InferParameter_StringParam{StringParam: x}
		case kserve.RawJSON:
			ip.ParameterChoice = &pb.InferParameter_StringParam{StringParam: string(x)}
		default:
			continue
		}
		m[k] = &ip
	}
	return m
}

// ToResponse converts one caller's share of a batched answer. Outputs go
// in raw_output_contents, as Triton's gRPC server answers whatever form the
// inputs came in; their bytes alias r's, so r must outlive the message's
// marshalling.
func ToResponse(r *kserve.Response) *pb.ModelInferResponse {
	out := &pb.ModelInferResponse{
		ModelName: r.ModelName, ModelVersion: r.ModelVersion, Id: r.ID,
		Parameters:        toParams(r.Parameters),
		Outputs:           make([]*pb.ModelInferResponse_InferOutputTensor, len(r.Outputs)),
		RawOutputContents: make([][]byte, len(r.Outputs)),
	}
	for i := range r.Outputs {
		t := &r.Outputs[i]
		out.Outputs[i] = &pb.ModelInferResponse_InferOutputTensor{
			Name: t.Name, Datatype: string(t.Datatype), Shape: t.Shape, Parameters: toParams(t.Parameters),
		}
		data := t.Data
		if data == nil {
			data = []byte{}
		}
		out.RawOutputContents[i] = data
	}
	return out
}

// FromResponse converts an answer received over gRPC into kserve's form,
// outputs as raw bytes (raw_output_contents, or typed contents packed), so
// that a client checks it as it checks an HTTP answer.
func FromResponse(m *pb.ModelInferResponse) (*kserve.Response, error) {
	raw := m.GetRawOutputContents()
	if len(raw) > 0 && len(raw) != len(m.GetOutputs()) {
		return nil, fmt.Errorf("raw_output_contents has %d entries for %d outputs", len(raw), len(m.GetOutputs()))
	}
	r := &kserve.Response{ModelName: m.GetModelName(), ModelVersion: m.GetModelVersion(), ID: m.GetId(),
		Outputs: make([]kserve.Tensor, len(m.GetOutputs()))}
	var err error
	if r.Parameters, err = fromParams(m.GetParameters()); err != nil {
		return nil, fmt.Errorf("response parameters: %w", err)
	}
	for i, o := range m.GetOutputs() {
		t := &r.Outputs[i]
		t.Name, t.Datatype, t.Shape = o.GetName(), kserve.Datatype(o.GetDatatype()), o.GetShape()
		if !t.Datatype.Valid() {
			return nil, fmt.Errorf("output '%s': unknown datatype '%s'", t.Name, o.GetDatatype())
		}
		n, err := kserve.ElementCount(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("output '%s': %w", t.Name, err)
		}
		if len(raw) > 0 {
			t.Data = raw[i]
		} else if t.Data, err = packContents(t.Datatype, n, o.GetContents()); err != nil {
			return nil, fmt.Errorf("output '%s': %w", t.Name, err)
		}
		if err := t.CheckData(); err != nil {
			return nil, err
		}
	}
	return r, nil
}
