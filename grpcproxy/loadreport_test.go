package grpcproxy

import (
	"context"
	"testing"

	v3data "github.com/cncf/xds/go/xds/data/orca/v3"
	v3svc "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/kserve/grpcwire"
)

type fixedLoad struct{ rho float64 }

func (f fixedLoad) ServerMetrics() *orca.ServerMetrics {
	return &orca.ServerMetrics{CPUUtilization: -1, MemUtilization: -1, AppUtilization: f.rho, QPS: 12.5, EPS: -1,
		Utilization: map[string]float64{}, RequestCost: map[string]float64{}, NamedMetrics: map[string]float64{"queue_rows": 3}}
}

func trailerReport(t *testing.T, what string, md metadata.MD) {
	t.Helper()
	vs := md.Get("endpoint-load-metrics-bin")
	if len(vs) != 1 {
		t.Errorf("%s: trailers %v, want one endpoint-load-metrics-bin", what, md)
		return
	}
	var pb v3data.OrcaLoadReport
	if err := proto.Unmarshal([]byte(vs[0]), &pb); err != nil {
		t.Errorf("%s: trailer does not parse as OrcaLoadReport: %v", what, err)
		return
	}
	if pb.ApplicationUtilization != 0.625 || pb.RpsFractional != 12.5 || pb.NamedMetrics["queue_rows"] != 3 {
		t.Errorf("%s: report %v", what, &pb)
	}
}

// Every answer of the gRPC door, batched, relayed, refused by Triton or by
// the proxy, carries the ORCA trailer; the out-of-band stream sends the
// same report.
func TestLoadReportTrailerAndStream(t *testing.T) {
	r := newRig(t, rigOptions{loadReport: fixedLoad{0.625}})
	ctx := context.Background()

	var tr metadata.MD
	if _, err := r.client.ModelInfer(ctx, simpleRaw("a", []int32{1}, []int32{2}), grpc.Trailer(&tr)); err != nil {
		t.Fatal(err)
	}
	trailerReport(t, "batched", tr)

	tr = nil
	bad := simpleRaw("b", []int32{1}, []int32{2})
	bad.Inputs[0].Datatype = "NOPE"
	if _, err := r.client.ModelInfer(ctx, bad, grpc.Trailer(&tr)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad input: %v", err)
	}
	trailerReport(t, "refused by the proxy", tr)

	tr = nil
	other := simpleRaw("", []int32{1}, []int32{1})
	other.ModelName = "refused"
	if _, err := r.client.ModelInfer(ctx, other, grpc.Trailer(&tr)); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("refused by Triton: %v", err)
	}
	trailerReport(t, "refused by Triton", tr)
	if len(tr.Get("x-triton-trailer")) != 1 {
		t.Errorf("Triton's own trailer lost: %v", tr)
	}

	tr = nil
	var got grpcwire.Frame
	if err := r.cc.Invoke(ctx, "/inference.GRPCInferenceService/ModelMetadata", &grpcwire.Frame{B: []byte("\x0a\x06simple")}, &got,
		grpc.ForceCodecV2(grpcwire.Codec{}), grpc.Trailer(&tr)); err != nil {
		t.Fatal(err)
	}
	trailerReport(t, "relayed", tr)

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := v3svc.NewOpenRcaServiceClient(r.cc).StreamCoreMetrics(sctx, &v3svc.OrcaLoadReportRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatalf("out-of-band stream: %v", err)
	}
	if first.ApplicationUtilization != 0.625 || first.RpsFractional != 12.5 {
		t.Errorf("out-of-band report %v", first)
	}
}

// Without a LoadReport the door adds nothing and offers no ORCA service.
func TestNoLoadReport(t *testing.T) {
	r := newRig(t, rigOptions{})
	var tr metadata.MD
	if _, err := r.client.ModelInfer(context.Background(), simpleRaw("a", []int32{1}, []int32{2}), grpc.Trailer(&tr)); err != nil {
		t.Fatal(err)
	}
	if v := tr.Get("endpoint-load-metrics-bin"); len(v) != 0 {
		t.Errorf("trailer %v without a LoadReport", v)
	}
}
