package grpcproxy

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// BenchmarkRelay measures what relaying adds to a unary call: the same
// ModelMetadata call straight to a stand-in Triton and through the door,
// in one run, on loopback. Compare the two ns/op (the proxy's minus the
// direct one is the relay's added latency at concurrency 1).
//
//	go test -run '^$' -bench Relay -benchtime 3s ./grpcproxy
func BenchmarkRelay(b *testing.B) {
	r := newRig(b, rigOptions{})
	tritonConn, err := grpc.NewClient(r.tritonAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer tritonConn.Close()
	for _, tc := range []struct {
		name string
		cc   *grpc.ClientConn
	}{{"direct", tritonConn}, {"proxy", r.cc}} {
		b.Run(tc.name, func(b *testing.B) {
			in, out := &grpcwire.Frame{B: []byte("\x0a\x06simple")}, &grpcwire.Frame{}
			ctx := context.Background()
			for b.Loop() {
				if err := tc.cc.Invoke(ctx, "/inference.GRPCInferenceService/ModelMetadata", in, out, grpc.ForceCodecV2(grpcwire.Codec{})); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBatchedInfer is one gRPC caller's ModelInfer through the door's
// batching path (convert, queue, merge, split, convert back) against an
// upstream that answers at once.
func BenchmarkBatchedInfer(b *testing.B) {
	r := newRig(b, rigOptions{})
	req := simpleRaw("b", make([]int32, 16), make([]int32, 16))
	ctx := context.Background()
	var resp *pb.ModelInferResponse
	var err error
	for b.Loop() {
		if resp, err = r.client.ModelInfer(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	_ = resp
}
