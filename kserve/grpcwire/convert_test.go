package grpcwire

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/kserve"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// A client reads back what a server sent: ToResponse then FromResponse is
// the identity on names, datatypes, shapes, data, id and parameters.
func TestResponseRoundTrip(t *testing.T) {
	in := &kserve.Response{ModelName: "simple", ModelVersion: "1", ID: "r7",
		Parameters: kserve.Parameters{"sequence_id": int64(3)},
		Outputs: []kserve.Tensor{
			{Name: "OUTPUT0", Datatype: kserve.Int32, Shape: []int64{1, 2}, Data: []byte{1, 0, 0, 0, 2, 0, 0, 0}},
			{Name: "S", Datatype: kserve.Bytes, Shape: []int64{1}, Data: kserve.AppendBytesElement(nil, []byte("hi"))},
		}}
	b, err := proto.Marshal(ToResponse(in))
	if err != nil {
		t.Fatal(err)
	}
	var m pb.ModelInferResponse
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out, err := FromResponse(&m)
	if err != nil {
		t.Fatal(err)
	}
	if out.ID != in.ID || out.ModelName != in.ModelName || !reflect.DeepEqual(out.Parameters, in.Parameters) {
		t.Fatalf("header %+v, want %+v", out, in)
	}
	for i := range in.Outputs {
		g, w := out.Outputs[i], in.Outputs[i]
		if g.Name != w.Name || g.Datatype != w.Datatype || !reflect.DeepEqual(g.Shape, w.Shape) || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("output %d: %+v, want %+v", i, g, w)
		}
	}
}

func TestFromResponse(t *testing.T) {
	out := func(dt string, shape ...int64) *pb.ModelInferResponse_InferOutputTensor {
		return &pb.ModelInferResponse_InferOutputTensor{Name: "O", Datatype: dt, Shape: shape}
	}
	typed := out("INT32", 2)
	typed.Contents = &pb.InferTensorContents{IntContents: []int32{1, -1}}
	tests := []struct {
		name    string
		m       *pb.ModelInferResponse
		want    []byte
		wantErr bool
	}{
		{"typed contents are packed", &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{typed}},
			[]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, false},
		{"raw entries must match outputs", &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{out("INT32", 1)},
			RawOutputContents: [][]byte{{0, 0, 0, 0}, {}}}, nil, true},
		{"raw data must fit the shape", &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{out("INT32", 2)},
			RawOutputContents: [][]byte{{0, 0, 0, 0}}}, nil, true},
		{"unknown datatype", &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{out("INT3", 1)},
			RawOutputContents: [][]byte{{0, 0, 0, 0}}}, nil, true},
		{"negative dimension", &pb.ModelInferResponse{Outputs: []*pb.ModelInferResponse_InferOutputTensor{out("INT32", -1)}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := FromResponse(tt.m)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if err == nil && !bytes.Equal(r.Outputs[0].Data, tt.want) {
				t.Errorf("data %v, want %v", r.Outputs[0].Data, tt.want)
			}
		})
	}
}

// HTTPStatus inverts Code for every status a proxy or Triton answers.
func TestCodeAndHTTPStatus(t *testing.T) {
	for _, s := range []int{200, 400, 401, 403, 404, 409, 429, 501, 503, 504, 500} {
		if got := HTTPStatus(Code(s)); got != s {
			t.Errorf("HTTPStatus(Code(%d) = %v) = %d", s, Code(s), got)
		}
	}
	for c, want := range map[codes.Code]int{codes.Canceled: 499, codes.Unknown: http.StatusInternalServerError, codes.DataLoss: http.StatusInternalServerError} {
		if got := HTTPStatus(c); got != want {
			t.Errorf("HTTPStatus(%v) = %d, want %d", c, got, want)
		}
	}
}

func TestModelMetadataRoundTrip(t *testing.T) {
	md := kserve.ModelMetadata{Name: "simple", Versions: []string{"1"}, Platform: "ensemble",
		Inputs:  []kserve.TensorMetadata{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{-1, 16}}},
		Outputs: []kserve.TensorMetadata{{Name: "OUTPUT0", Datatype: "INT32", Shape: []int64{-1, 16}}}}
	if got := FromModelMetadata(ToModelMetadata(md)); !reflect.DeepEqual(got, md) {
		t.Fatalf("round trip %+v, want %+v", got, md)
	}
}

// FuzzFromResponse: any message a server sends is read or refused with an
// error, never a panic; what is read is consistent with its shape and goes
// back out unchanged.
func FuzzFromResponse(f *testing.F) {
	seed, _ := proto.Marshal(ToResponse(&kserve.Response{ID: "a", Outputs: []kserve.Tensor{
		{Name: "O", Datatype: kserve.FP32, Shape: []int64{1}, Data: []byte{0, 0, 128, 63}}}}))
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m pb.ModelInferResponse
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		r, err := FromResponse(&m)
		if err != nil {
			return
		}
		for _, o := range r.Outputs {
			if err := o.CheckData(); err != nil {
				t.Fatalf("accepted output %s whose data does not fit: %v", o.Name, err)
			}
		}
		again, err := FromResponse(ToResponse(r))
		if err != nil {
			t.Fatalf("re-reading what was read: %v", err)
		}
		for i := range r.Outputs {
			if !bytes.Equal(again.Outputs[i].Data, r.Outputs[i].Data) {
				t.Fatalf("output %d changed on the way back", i)
			}
		}
	})
}
