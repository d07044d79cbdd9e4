package grpcwire

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/kserve"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

func marshal(t testing.TB, m *pb.ModelInferRequest) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func tensor(name, datatype string, shape []int64, c *pb.InferTensorContents) *pb.ModelInferRequest_InferInputTensor {
	return &pb.ModelInferRequest_InferInputTensor{Name: name, Datatype: datatype, Shape: shape, Contents: c}
}

func params(n int, value func(i int) *pb.InferParameter) map[string]*pb.InferParameter {
	p := make(map[string]*pb.InferParameter, n)
	for i := range n {
		p[fmt.Sprint("p", i)] = value(i)
	}
	return p
}

// costlyRequests are the messages whose decoding costs most beside their
// size, one of each kind, and a plain one.
func costlyRequests(t testing.TB) map[string][]byte {
	many := func(n int, c func() *pb.InferTensorContents) []*pb.ModelInferRequest_InferInputTensor {
		ins := make([]*pb.ModelInferRequest_InferInputTensor, n)
		for i := range ins {
			ins[i] = tensor(fmt.Sprint("x", i), "INT8", []int64{1}, c())
		}
		return ins
	}
	const n = 100_000
	ints := func() []int32 { return make([]int32, n) }
	int64s := make([]int64, n)
	bools := make([]bool, n)
	fp32 := make([]float32, n)
	strs := make([][]byte, n)
	raw := make([][]byte, kserve.MaxTensors)
	for i := range raw {
		raw[i] = []byte{1}
	}
	unknown := marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "INT8", []int64{1}, &pb.InferTensorContents{IntContents: []int32{1}})}})
	for i := range n {
		unknown = protowire.AppendTag(unknown, 99, protowire.VarintType)
		unknown = protowire.AppendVarint(unknown, uint64(i))
	}
	return map[string][]byte{
		"plain": marshal(t, &pb.ModelInferRequest{ModelName: "simple", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			tensor("INPUT0", "INT32", []int64{1, 16}, &pb.InferTensorContents{IntContents: make([]int32, 16)}),
			tensor("INPUT1", "INT32", []int64{1, 16}, &pb.InferTensorContents{IntContents: make([]int32, 16)})}}),
		"1024 one-element inputs": marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: many(kserve.MaxTensors, func() *pb.InferTensorContents {
			return &pb.InferTensorContents{IntContents: []int32{1}}
		})}),
		"1024 raw inputs of a byte": marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: many(kserve.MaxTensors, func() *pb.InferTensorContents { return nil }), RawInputContents: raw}),
		"int32 contents":            marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "INT32", []int64{n}, &pb.InferTensorContents{IntContents: ints()})}}),
		"int8 contents":             marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "INT8", []int64{n}, &pb.InferTensorContents{IntContents: ints()})}}),
		"int64 contents":            marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "INT64", []int64{n}, &pb.InferTensorContents{Int64Contents: int64s})}}),
		"bool contents":             marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "BOOL", []int64{n}, &pb.InferTensorContents{BoolContents: bools})}}),
		"fp32 contents":             marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "FP32", []int64{n}, &pb.InferTensorContents{Fp32Contents: fp32})}}),
		"empty BYTES elements":      marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "BYTES", []int64{n}, &pb.InferTensorContents{BytesContents: strs})}}),
		"1024 request parameters": marshal(t, &pb.ModelInferRequest{ModelName: "m", Parameters: params(kserve.MaxParameters, func(i int) *pb.InferParameter {
			return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "v"}}
		}), Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "INT8", []int64{1}, &pb.InferTensorContents{IntContents: []int32{1}})}}),
		"parameters on 64 inputs": marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: func() []*pb.ModelInferRequest_InferInputTensor {
			ins := many(64, func() *pb.InferTensorContents { return &pb.InferTensorContents{IntContents: []int32{1}} })
			for _, in := range ins {
				in.Parameters = params(kserve.MaxParameters, func(i int) *pb.InferParameter {
					return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(i)}}
				})
			}
			return ins
		}()}),
		"1024 outputs with a parameter": marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: many(1, func() *pb.InferTensorContents {
			return &pb.InferTensorContents{IntContents: []int32{1}}
		}), Outputs: func() []*pb.ModelInferRequest_InferRequestedOutputTensor {
			outs := make([]*pb.ModelInferRequest_InferRequestedOutputTensor, kserve.MaxTensors)
			for i := range outs {
				outs[i] = &pb.ModelInferRequest_InferRequestedOutputTensor{Name: "o", Parameters: params(1, func(int) *pb.InferParameter {
					return &pb.InferParameter{ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: true}}
				})}
			}
			return outs
		}()}),
		"32 dimensions": marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
			tensor("x", "INT8", []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, &pb.InferTensorContents{IntContents: []int32{1}})}}),
		"a raw input of 1 MiB": marshal(t, &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{tensor("x", "UINT8", []int64{1 << 20}, nil)},
			RawInputContents: [][]byte{make([]byte, 1<<20)}}),
		"unknown fields": unknown,
	}
}

// decodeAlloc is what decoding b into a kserve.Request allocates, as the
// gRPC door decodes a call it batches: the least of a few runs.
func decodeAlloc(b []byte) uint64 {
	least := ^uint64(0)
	for range 3 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := &pb.ModelInferRequest{}
		var req *kserve.Request
		if proto.Unmarshal(b, m) == nil {
			req, _ = ToRequest(m)
		}
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(m)
		runtime.KeepAlive(req)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// The cost ScanInfer reads bounds what decoding allocates, for every kind
// of costly message, and is not far above it where decoding costs most
// (so that the budget is not spent on bytes never taken).
func TestScanInferBoundsDecoding(t *testing.T) {
	for name, b := range costlyRequests(t) {
		c, err := ScanInfer(b)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		got := decodeAlloc(b)
		t.Logf("%-32s %9d wire bytes, decoding allocates %9d, charged %9d (%.1fx)", name, len(b), got, c.Decoded, float64(c.Decoded)/float64(got))
		if uint64(c.Decoded) < got {
			t.Errorf("%s: charged %d bytes, decoding allocates %d", name, c.Decoded, got)
		}
		if got > 1<<20 && float64(c.Decoded) > 3*float64(got) {
			t.Errorf("%s: charged %d bytes, more than 3 times the %d decoding allocates", name, c.Decoded, got)
		}
		var m pb.ModelInferRequest
		if err := proto.Unmarshal(b, &m); err != nil || c.Inputs != len(m.Inputs) || c.Outputs != len(m.Outputs) || c.Raw != len(m.RawInputContents) {
			t.Errorf("%s: counted %d inputs, %d outputs, %d raw; proto decodes %d, %d, %d (%v)", name, c.Inputs, c.Outputs, c.Raw, len(m.Inputs), len(m.Outputs), len(m.RawInputContents), err)
		}
	}
}

// A request past the HTTP door's bounds is refused with its 400, before
// it is decoded.
func TestScanInferRefusesPastTheBounds(t *testing.T) {
	one := func() *pb.ModelInferRequest_InferInputTensor {
		return tensor("x", "INT8", []int64{1}, &pb.InferTensorContents{IntContents: []int32{1}})
	}
	ins := make([]*pb.ModelInferRequest_InferInputTensor, kserve.MaxTensors+1)
	for i := range ins {
		ins[i] = one()
	}
	outs := make([]*pb.ModelInferRequest_InferRequestedOutputTensor, kserve.MaxTensors+1)
	for i := range outs {
		outs[i] = &pb.ModelInferRequest_InferRequestedOutputTensor{Name: "o"}
	}
	raw := make([][]byte, kserve.MaxTensors+1)
	deep := one()
	deep.Shape = make([]int64, kserve.MaxDims+1)
	var in []byte // an input of one varint field per dimension
	for range kserve.MaxDims + 1 {
		in = protowire.AppendTag(in, 3, protowire.VarintType)
		in = protowire.AppendVarint(in, 1)
	}
	deepScalars := protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), in)
	manyParams := one()
	manyParams.Parameters = params(kserve.MaxParameters+1, func(int) *pb.InferParameter { return &pb.InferParameter{} })
	for _, tc := range []struct {
		name string
		b    []byte
		msg  string
	}{
		{"inputs", marshal(t, &pb.ModelInferRequest{Inputs: ins}), "more than 1024 inputs"},
		{"outputs", marshal(t, &pb.ModelInferRequest{Inputs: ins[:1], Outputs: outs}), "more than 1024 requested outputs"},
		{"raw contents", marshal(t, &pb.ModelInferRequest{Inputs: ins[:1], RawInputContents: raw}), "more than 1024 raw_input_contents"},
		{"dimensions, packed", marshal(t, &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{deep}}), "more than 32 dimensions"},
		{"dimensions, one by one", deepScalars, "more than 32 dimensions"},
		{"request parameters", marshal(t, &pb.ModelInferRequest{Inputs: ins[:1], Parameters: manyParams.Parameters}), "more than 1024 parameters"},
		{"input parameters", marshal(t, &pb.ModelInferRequest{Inputs: []*pb.ModelInferRequest_InferInputTensor{manyParams}}), "more than 1024 parameters"},
	} {
		_, err := ScanInfer(tc.b)
		var ke *kserve.Error
		if !errors.As(err, &ke) || ke.Status != 400 || ke.Msg != tc.msg {
			t.Errorf("%s: %v, want 400 %q", tc.name, err, tc.msg)
		}
	}
	if _, err := ScanInfer([]byte{0x2a, 0x05, 0x01}); err == nil || strings.Contains(err.Error(), "more than") {
		t.Errorf("a truncated message: %v, want a parse error", err)
	}
}

func TestInferTarget(t *testing.T) {
	enc := func(m *pb.ModelInferRequest) []byte { return marshal(t, m) }
	twice := append(enc(&pb.ModelInferRequest{ModelName: "first", ModelVersion: "1", Id: "x"}), enc(&pb.ModelInferRequest{ModelName: "last", ModelVersion: "2"})...)
	for _, tt := range []struct {
		name           string
		b              []byte
		model, version string
		wantErr        bool
	}{
		{"after big inputs", enc(&pb.ModelInferRequest{RawInputContents: [][]byte{make([]byte, 1<<16)}, ModelName: "simple", ModelVersion: "../../image", Id: "7"}), "simple", "../../image", false},
		{"last occurrence wins", twice, "last", "2", false},
		{"none", enc(&pb.ModelInferRequest{Id: "7"}), "", "", false},
		{"truncated", enc(&pb.ModelInferRequest{ModelName: "simple"})[:4], "", "", true},
		{"bad tag", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, "", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			model, version, err := InferTarget(tt.b)
			if (err != nil) != tt.wantErr || model != tt.model || version != tt.version {
				t.Fatalf("InferTarget = %q, %q, %v; want %q, %q (error %v)", model, version, err, tt.model, tt.version, tt.wantErr)
			}
			var m pb.ModelInferRequest
			if err == nil && (proto.Unmarshal(tt.b, &m) != nil || m.ModelName != model || m.ModelVersion != version) {
				t.Fatalf("proto reads %q, %q where InferTarget read %q, %q", m.ModelName, m.ModelVersion, model, version)
			}
		})
	}
}

// Whatever the bytes, ScanInfer and InferTarget fail where proto fails,
// read the model and version proto reads, and count what it decodes.
func FuzzScanInfer(f *testing.F) {
	for _, b := range costlyRequests(f) {
		if len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Add([]byte{0x2a, 0x05, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.ModelInferRequest
		perr := proto.Unmarshal(b, &m)
		model, version, terr := InferTarget(b)
		c, serr := ScanInfer(b)
		var ke *kserve.Error
		capped := errors.As(serr, &ke)
		switch {
		case terr != nil && perr == nil:
			t.Fatalf("InferTarget: %v; proto decodes it", terr)
		case terr == nil && perr == nil && (model != m.ModelName || version != m.ModelVersion):
			t.Fatalf("InferTarget read %q, %q; proto %q, %q", model, version, m.ModelName, m.ModelVersion)
		case serr != nil && !capped && perr == nil:
			t.Fatalf("ScanInfer: %v; proto decodes it", serr)
		case serr == nil && perr == nil && (c.Inputs != len(m.Inputs) || c.Outputs != len(m.Outputs) || c.Raw != len(m.RawInputContents)):
			t.Fatalf("counted %d, %d, %d; proto decodes %d, %d, %d", c.Inputs, c.Outputs, c.Raw, len(m.Inputs), len(m.Outputs), len(m.RawInputContents))
		case serr == nil && c.Decoded < requestCost:
			t.Fatalf("charged %d", c.Decoded)
		}
	})
}
