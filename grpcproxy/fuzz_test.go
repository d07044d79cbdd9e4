package grpcproxy

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// FuzzMergeSplit feeds arbitrary ModelInferRequest bytes through the door's
// path: decode, convert, key, merge with a second caller, split an answer
// that echoes every input as an output, convert back. It must never panic,
// and every caller must get back exactly its own rows, in the raw form.
func FuzzMergeSplit(f *testing.F) {
	seed := func(m *pb.ModelInferRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(simpleRaw("a", []int32{1, 2, 3}, []int32{4, 5, 6}))
	seed(simpleTyped("b", []int32{1}, []int32{2}))
	bytesReq := &pb.ModelInferRequest{ModelName: "m", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "T", Datatype: "BYTES", Shape: []int64{2, 1}, Contents: &pb.InferTensorContents{BytesContents: [][]byte{[]byte("hi"), {}}}},
	}}
	seed(bytesReq)
	f.Add([]byte{0x2a, 0x05, 0x0a, 0x01, 0x41, 0x1a, 0x00})

	f.Fuzz(func(t *testing.T, msg []byte) {
		var m pb.ModelInferRequest
		if proto.Unmarshal(msg, &m) != nil {
			return
		}
		req, err := grpcwire.ToRequest(&m)
		if err != nil {
			return
		}
		call, batchable, err := dispatcher.NewCall(req, "", time.Now())
		if !batchable || err != nil || call.Rows > 64 {
			return
		}
		// A second caller of the same key: the first's rows twice,
		// so that its share of the batch differs in size and place.
		other := *req
		other.ID = "other"
		other.Inputs = make([]kserve.Tensor, len(req.Inputs))
		for i, in := range req.Inputs {
			other.Inputs[i] = in
			other.Inputs[i].Data = append(append([]byte(nil), in.Data...), in.Data...)
			other.Inputs[i].Shape = append([]int64{2 * in.Shape[0]}, in.Shape[1:]...)
		}
		b, err := kserve.MergeSameKey([]*kserve.Request{req, &other})
		if err != nil {
			t.Fatalf("merge of two callers of one key: %v", err)
		}
		body, hl := b.AppendBody(nil)
		batched, err := kserve.DecodeRequest(body, hl)
		if err != nil {
			t.Fatalf("the batch does not decode: %v", err)
		}
		// Echo: each input comes back as an output of the same name.
		resp := &kserve.Response{ModelName: "m"}
		for _, in := range batched.Inputs {
			resp.Outputs = append(resp.Outputs, kserve.Tensor{Name: in.Name, Datatype: in.Datatype, Shape: in.Shape, Data: in.Data, Binary: true})
		}
		parts, err := b.Split(resp)
		if err != nil {
			if len(req.Outputs) > 0 {
				return // asked for an output the echo does not have
			}
			t.Fatalf("split: %v", err)
		}
		for c, want := range []*kserve.Request{req, &other} {
			out := grpcwire.ToResponse(parts[c])
			enc, err := proto.Marshal(out)
			if err != nil {
				t.Fatalf("caller %d: marshal: %v", c, err)
			}
			var back pb.ModelInferResponse
			if err := proto.Unmarshal(enc, &back); err != nil {
				t.Fatalf("caller %d: unmarshal: %v", c, err)
			}
			if back.Id != want.ID || len(back.RawOutputContents) != len(back.Outputs) {
				t.Fatalf("caller %d: id %q, %d outputs, %d raw", c, back.Id, len(back.Outputs), len(back.RawOutputContents))
			}
			for i, o := range back.Outputs {
				var in *kserve.Tensor
				for k := range want.Inputs {
					if want.Inputs[k].Name == o.Name {
						in = &want.Inputs[k]
					}
				}
				if in == nil {
					continue // an output requested by name that no input echoes
				}
				if !bytes.Equal(back.RawOutputContents[i], in.Data) || o.Shape[0] != in.Shape[0] {
					t.Fatalf("caller %d output %q: got %d bytes shape %v, want its own %d bytes shape %v",
						c, o.Name, len(back.RawOutputContents[i]), o.Shape, len(in.Data), in.Shape)
				}
			}
		}
	})
}
