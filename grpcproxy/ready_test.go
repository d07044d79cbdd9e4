package grpcproxy

import (
	"context"
	"github.com/ratebatch/ratebatch/door"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// readyUpstream is a Triton that says ready to every readiness call.
type readyUpstream struct{ downUpstream }

func (readyUpstream) Invoke(_ context.Context, _ string, _ any, out any, _ ...grpc.CallOption) error {
	out.(*grpcwire.Frame).B = []byte{0x08, 0x01} // ready: true, in both answers
	return nil
}

type fakeHealth struct{ model, all atomic.Bool }

func (h *fakeHealth) Failing(model string) (bool, string) {
	return model == "simple" && h.model.Load(), "failing"
}
func (h *fakeHealth) Unready() string {
	if h.all.Load() {
		return "every batched model is failing"
	}
	return ""
}

// ServerReady and ModelReady say not ready while the outlier detector finds
// the upstream or the model failing, and are Triton's otherwise.
func TestReadinessFollowsTheOutlierDetector(t *testing.T) {
	h := &fakeHealth{}
	c := readyClient(t, h)
	check := func(server, simple, other bool) {
		t.Helper()
		ctx := context.Background()
		sr, err := c.ServerReady(ctx, &pb.ServerReadyRequest{})
		if err != nil || sr.Ready != server {
			t.Fatalf("ServerReady = %v, %v; want %v", sr, err, server)
		}
		for name, want := range map[string]bool{"simple": simple, "other": other} {
			mr, err := c.ModelReady(ctx, &pb.ModelReadyRequest{Name: name})
			if err != nil || mr.Ready != want {
				t.Fatalf("ModelReady(%s) = %v, %v; want %v", name, mr, err, want)
			}
		}
	}
	check(true, true, true)
	h.model.Store(true)
	check(true, false, true)
	h.all.Store(true)
	check(false, false, true)
}

// readyClient serves a door with health h in front of a Triton that says
// ready, until the test ends, and returns a client of it.
func readyClient(t *testing.T, h door.Health) pb.GRPCInferenceServiceClient {
	t.Helper()
	s := New(Options{Backend: door.Backend{Batcher: instantBatcher{}, Health: h}, Upstream: readyUpstream{}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(s.srv.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return pb.NewGRPCInferenceServiceClient(cc)
}
