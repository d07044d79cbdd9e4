package grpcproxy

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// unreadyHealth also says why the proxy is not ready, as the dispatcher
// does (an upstream refusing connections, with no model failing).
type unreadyHealth struct {
	fakeHealth
	why atomic.Value
}

func (h *unreadyHealth) Unready() string { s, _ := h.why.Load().(string); return s }

// ServerReady follows the dispatcher's Unready verdict when it has one,
// which covers an upstream refusing connections.
func TestServerReadyFollowsUnready(t *testing.T) {
	h := &unreadyHealth{}
	h.why.Store("")
	s := New(Options{Upstream: readyUpstream{}, Batcher: instantBatcher{}, Health: h})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.srv.Stop()
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	c := pb.NewGRPCInferenceServiceClient(cc)
	for _, tc := range []struct {
		why  string
		want bool
	}{{"", true}, {"upstream refusing connections", false}, {"", true}} {
		h.why.Store(tc.why)
		sr, err := c.ServerReady(context.Background(), &pb.ServerReadyRequest{})
		if err != nil || sr.Ready != tc.want {
			t.Fatalf("unready %q: ServerReady = %v, %v; want %v", tc.why, sr, err, tc.want)
		}
	}
}
