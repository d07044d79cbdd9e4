package loadgen

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/ratebatch/ratebatch/kserve/inference"
	"github.com/ratebatch/ratebatch/lab/emulator"
)

// spoilt answers through the emulator's gRPC door but spoils some calls:
// every wrongEvery-th answer has OUTPUT0's first byte changed, every
// failEvery-th call fails UNAVAILABLE.
type spoilt struct {
	pb.GRPCInferenceServiceServer
	n                     atomic.Int64
	wrongEvery, failEvery int64
	wrong, failed         atomic.Int64
}

func (s *spoilt) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	n := s.n.Add(1)
	if s.failEvery > 0 && n%s.failEvery == 0 {
		s.failed.Add(1)
		return nil, status.Error(codes.Unavailable, "spoilt")
	}
	resp, err := s.GRPCInferenceServiceServer.ModelInfer(ctx, r)
	if err == nil && s.wrongEvery > 0 && n%s.wrongEvery == 0 {
		s.wrong.Add(1)
		resp.RawOutputContents[0][0]++
	}
	return resp, err
}

func grpcEmulator(t *testing.T, door *spoilt) string {
	t.Helper()
	em, err := emulator.New(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	door.GRPCInferenceServiceServer = em.GRPC()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterGRPCInferenceServiceServer(srv, door)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// Over gRPC the run learns the inputs from ModelMetadata, every answer is
// verified against its own request, and spoilt answers and failed calls are
// counted under their own kinds, as often as the server spoilt them.
func TestRunOverGRPC(t *testing.T) {
	tests := []struct {
		name                  string
		target                func(addr string) string
		rows                  int
		wrongEvery, failEvery int64
	}{
		{"host:port", func(a string) string { return a }, 1, 0, 0},
		{"grpc:// and 3 rows", func(a string) string { return "grpc://" + a }, 3, 0, 0},
		{"spoilt", func(a string) string { return a }, 1, 7, 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			door := &spoilt{wrongEvery: tt.wrongEvery, failEvery: tt.failEvery}
			addr := grpcEmulator(t, door)
			res, err := Run(context.Background(), Config{Target: tt.target(addr), Model: "simple", GRPC: true,
				Rate: ConstantRate(400), Duration: 300 * time.Millisecond, Seed: 3, Rows: tt.rows, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			checkAccount(t, res)
			if tt.wrongEvery > 0 && (door.wrong.Load() == 0 || door.failed.Load() == 0) {
				t.Fatalf("the server spoilt %d and failed %d: too few calls to test", door.wrong.Load(), door.failed.Load())
			}
			s := res.Summary
			if s.Sent == 0 || s.Sent != door.n.Load() {
				t.Fatalf("sent %d, the server saw %d", s.Sent, door.n.Load())
			}
			if got, want := int64(s.ErrorsByKind["mismatch"]), door.wrong.Load(); got != want {
				t.Errorf("%d mismatches counted, the server spoilt %d answers (first: %q)", got, want, res.FirstVerifyError)
			}
			if got, want := int64(s.StatusCounts[503]), door.failed.Load(); got != want {
				t.Errorf("%d answers counted 503, the server failed %d calls UNAVAILABLE", got, want)
			}
			if s.OK != s.Sent-door.wrong.Load()-door.failed.Load() {
				t.Errorf("ok %d of %d sent with %d spoilt and %d failed", s.OK, s.Sent, door.wrong.Load(), door.failed.Load())
			}
		})
	}
}

func TestGRPCConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Target: "http://127.0.0.1:1", Model: "simple", GRPC: true},
		{Target: "127.0.0.1", Model: "simple", GRPC: true},
		{Target: "127.0.0.1:1", Model: "simple", GRPC: true, Binary: true},
	} {
		cfg.Rate, cfg.Duration = ConstantRate(1), time.Second
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("Run(%+v) did not refuse", cfg)
		}
	}
}
