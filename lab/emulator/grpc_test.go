package emulator

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratebatch/ratebatch/kserve"
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

// The config, statistics and repository index perf_analyzer and
// tritonclient read over gRPC say what the HTTP door's JSON says.
func TestGRPCDoorConfigStatsIndex(t *testing.T) {
	s, hs := newTestServer(t, Options{})
	c := grpcClient(t, s)
	ctx := context.Background()

	var want kserve.ModelConfig
	getJSON(t, hs.URL+"/v2/models/simple/config", &want)
	cr, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "simple"})
	if err != nil {
		t.Fatal(err)
	}
	got := cr.GetConfig()
	if got.GetName() != want.Name || int(got.GetMaxBatchSize()) != want.MaxBatchSize || got.GetMaxBatchSize() == 0 ||
		got.GetPlatform() != want.Platform || got.GetBackend() != want.Backend {
		t.Fatalf("config %v, want the HTTP door's %+v", got, want)
	}
	if len(got.GetInput()) != len(want.Input) || len(got.GetOutput()) != len(want.Output) {
		t.Fatalf("config has %d inputs and %d outputs, want %d and %d", len(got.GetInput()), len(got.GetOutput()), len(want.Input), len(want.Output))
	}
	for i, in := range got.GetInput() {
		w := want.Input[i]
		if in.GetName() != w.Name || in.GetDataType().String() != w.DataType || !slices.Equal(in.GetDims(), []int64(w.Dims)) {
			t.Errorf("input %d = %v, want %+v", i, in, w)
		}
	}
	if in := got.GetInput()[0]; in.GetDataType() != pb.DataType_TYPE_INT32 {
		t.Errorf("simple's INPUT0 is %v, want TYPE_INT32", in.GetDataType())
	}
	if g := got.GetInstanceGroup(); len(g) != 1 || int(g[0].GetCount()) != want.InstanceGroup[0].Count || g[0].GetKind() != pb.ModelInstanceGroup_KIND_GPU {
		t.Errorf("instance groups %v, want %+v", g, want.InstanceGroup)
	}
	if got.GetVersionPolicy().GetLatest().GetNumVersions() != 1 {
		t.Errorf("version policy %v, want latest 1", got.GetVersionPolicy())
	}

	in0, in1 := simpleInputs(3, []int64{3, 16}, 1)
	if r := post(t, hs.URL+"/v2/models/simple/infer", jsonBody(t, nil, nil, in0, in1), -1); r.status != http.StatusOK {
		t.Fatalf("infer: status %d", r.status)
	}
	st, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "simple"})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetModelStats()) != 1 {
		t.Fatalf("%d model statistics, want 1", len(st.GetModelStats()))
	}
	ms := st.GetModelStats()[0]
	if ms.GetName() != "simple" || ms.GetInferenceCount() != 3 || ms.GetExecutionCount() != 1 ||
		ms.GetInferenceStats().GetSuccess().GetCount() != 1 || ms.GetInferenceStats().GetSuccess().GetNs() == 0 {
		t.Errorf("statistics %v, want 3 rows in 1 successful execution of simple", ms)
	}
	if b := ms.GetBatchStats(); len(b) != 1 || b[0].GetBatchSize() != 3 || b[0].GetComputeInfer().GetCount() != 1 {
		t.Errorf("batch statistics %v, want one execution of batch size 3", b)
	}
	all, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.GetModelStats()) != len(s.models) || len(s.models) < 2 {
		t.Errorf("statistics of every model: %d entries, want %d", len(all.GetModelStats()), len(s.models))
	}

	if err := s.SetModelReady("simple", false); err != nil {
		t.Fatal(err)
	}
	for _, ready := range []bool{false, true} {
		idx, err := c.RepositoryIndex(ctx, &pb.RepositoryIndexRequest{Ready: ready})
		if err != nil {
			t.Fatal(err)
		}
		var simple *pb.RepositoryIndexResponse_ModelIndex
		for _, m := range idx.GetModels() {
			if m.GetName() == "simple" {
				simple = m
			}
		}
		switch {
		case ready && simple != nil:
			t.Errorf("ready-only index lists the unloaded simple: %v", simple)
		case !ready && (simple == nil || simple.GetState() != "UNAVAILABLE"):
			t.Errorf("full index lists simple as %v, want UNAVAILABLE", simple)
		case len(idx.GetModels()) == 0:
			t.Error("empty index")
		}
	}

	for name, call := range map[string]func() error{
		"config":     func() error { _, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "nope"}); return err },
		"statistics": func() error { _, err := c.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: "nope"}); return err },
		"version": func() error {
			_, err := c.ModelConfig(ctx, &pb.ModelConfigRequest{Name: "simple", Version: "9"})
			return err
		},
	} {
		if code := status.Code(call()); code != codes.NotFound {
			t.Errorf("%s of an unknown model: code %v, want NotFound", name, code)
		}
	}
}
