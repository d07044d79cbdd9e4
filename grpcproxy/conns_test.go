package grpcproxy

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// A connection past the doors' bound has its calls refused
// RESOURCE_EXHAUSTED, naming the bound, and is closed; the connections
// within it are served; once one closes, a new one is served.
func TestConnectionBound(t *testing.T) {
	conns := &door.Conns{Max: 1}
	r := newRig(t, rigOptions{conns: conns})
	if _, err := r.client.ModelInfer(context.Background(), simpleRaw("1", []int32{1}, []int32{2})); err != nil {
		t.Fatal(err)
	}
	dial := func() *grpc.ClientConn {
		cc, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	second := pb.NewGRPCInferenceServiceClient(dial())
	_, err := second.ModelInfer(context.Background(), simpleRaw("2", []int32{1}, []int32{2}))
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "limits.max_connections") {
		t.Fatalf("a call on a connection past the bound: %v, want RESOURCE_EXHAUSTED naming limits.max_connections", err)
	}
	if _, err := r.client.ModelInfer(context.Background(), simpleRaw("3", []int32{1}, []int32{2})); err != nil {
		t.Fatalf("the connection within the bound: %v", err)
	}
	r.cc.Close()
	testpoll.Until(t, "the first connection to be closed", func() bool { return conns.Open() == 0 })
	third := pb.NewGRPCInferenceServiceClient(dial())
	if _, err := third.ModelInfer(context.Background(), simpleRaw("4", []int32{1}, []int32{2})); err != nil {
		t.Fatalf("a new connection once the first closed: %v", err)
	}
}

// A connection without a call for the idle timeout is closed by the door.
func TestIdleConnectionClosed(t *testing.T) {
	conns := &door.Conns{Max: 100}
	r := newRig(t, rigOptions{conns: conns, idle: 200 * time.Millisecond})
	if _, err := r.client.ModelInfer(context.Background(), simpleRaw("1", []int32{1}, []int32{2})); err != nil {
		t.Fatal(err)
	}
	if conns.Open() != 1 {
		t.Fatalf("%d connections open, want 1", conns.Open())
	}
	testpoll.Until(t, "the idle connection to be closed", func() bool { return conns.Open() == 0 })
}
