package emulator

import (
	"context"
	"encoding/binary"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// grpcClient serves s's gRPC door on a loopback port and dials it.
func grpcClient(t *testing.T, s *Server) pb.GRPCInferenceServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, s.GRPC())
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewGRPCInferenceServiceClient(cc)
}

func int32s(vs ...int32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// The gRPC door runs the HTTP door's execution: the simple model's sums
// and differences come back in raw_output_contents, the execution counts
// in the same statistics, and errors carry Triton's gRPC codes.
func TestGRPCDoor(t *testing.T) {
	s, _ := newTestServer(t, Options{})
	c := grpcClient(t, s)
	ctx := context.Background()

	md, err := c.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "simple"})
	if err != nil {
		t.Fatal(err)
	}
	if md.GetName() != "simple" || len(md.GetInputs()) != 2 || md.GetInputs()[0].GetName() != "INPUT0" {
		t.Fatalf("metadata %v, want simple with INPUT0 and INPUT1", md)
	}
	if r, err := c.ServerReady(ctx, &pb.ServerReadyRequest{}); err != nil || !r.GetReady() {
		t.Fatalf("ServerReady = %v, %v", r, err)
	}

	a, b := make([]int32, 32), make([]int32, 32)
	for i := range a {
		a[i], b[i] = int32(i), int32(100-3*i)
	}
	req := &pb.ModelInferRequest{ModelName: "simple", Id: "r1",
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: []int64{2, 16}},
			{Name: "INPUT1", Datatype: "INT32", Shape: []int64{2, 16}},
		},
		RawInputContents: [][]byte{int32s(a...), int32s(b...)}}
	resp, err := c.ModelInfer(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetId() != "r1" || len(resp.GetRawOutputContents()) != 2 {
		t.Fatalf("answer id %q with %d raw outputs", resp.GetId(), len(resp.GetRawOutputContents()))
	}
	for k, o := range resp.GetOutputs() {
		raw := resp.GetRawOutputContents()[k]
		for i := range a {
			got := int32(binary.LittleEndian.Uint32(raw[4*i:]))
			want := a[i] + b[i]
			if o.GetName() == "OUTPUT1" {
				want = a[i] - b[i]
			}
			if got != want {
				t.Fatalf("%s[%d] = %d, want %d", o.GetName(), i, got, want)
			}
		}
	}
	if st, _ := s.Stats("simple"); st.InferenceCount != 2 || st.ExecutionCount != 1 {
		t.Errorf("statistics count %d rows in %d executions, want 2 in 1", st.InferenceCount, st.ExecutionCount)
	}

	for _, tt := range []struct {
		name string
		req  *pb.ModelInferRequest
		code codes.Code
	}{
		{"unknown model", &pb.ModelInferRequest{ModelName: "nope"}, codes.NotFound},
		{"unknown version", &pb.ModelInferRequest{ModelName: "simple", ModelVersion: "7"}, codes.NotFound},
		{"missing input", &pb.ModelInferRequest{ModelName: "simple", Inputs: req.Inputs[:1], RawInputContents: req.RawInputContents[:1]}, codes.InvalidArgument},
		{"short data", &pb.ModelInferRequest{ModelName: "simple", Inputs: req.Inputs, RawInputContents: [][]byte{int32s(1), int32s(2)}}, codes.InvalidArgument},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.ModelInfer(ctx, tt.req)
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code %v (%v), want %v", got, err, tt.code)
			}
			if status.Convert(err).Message() == "" {
				t.Error("the error names nothing")
			}
		})
	}
}
