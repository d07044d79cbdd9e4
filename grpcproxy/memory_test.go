package grpcproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// The memory budget at the gRPC door: a message that does not fit is
// refused RESOURCE_EXHAUSTED, small ones are served; while the budget is
// spent new calls are refused before their message is read, but the
// health check still answers; once freed, calls go through again.
func TestMemoryBudgetAtTheGRPCDoor(t *testing.T) {
	budget := membudget.New(callCost + 64<<10)
	r := newRig(t, rigOptions{memory: budget})
	big := simpleRaw("big", make([]int32, 10000), make([]int32, 10000)) // 80 KB of data
	if _, err := r.client.ModelInfer(context.Background(), big); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("a message past the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	small := simpleRaw("small", []int32{1, 2}, []int32{3, 4})
	if _, err := r.client.ModelInfer(context.Background(), small); err != nil {
		t.Fatalf("a small message: %v", err)
	}
	// Spent by others (the HTTP door, say).
	other := membudget.Hold{B: budget}
	other.Force(budget.Limit())
	if _, err := r.client.ModelInfer(context.Background(), small); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a call while the budget is spent: %v, want RESOURCE_EXHAUSTED", err)
	}
	if resp, err := healthpb.NewHealthClient(r.cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health while the budget is spent: %v %v", resp, err)
	}
	other.Release()
	if _, err := r.client.ModelInfer(context.Background(), small); err != nil {
		t.Fatalf("once freed: %v", err)
	}
	if budget.Used() != 0 {
		t.Fatalf("%d bytes still held after the calls", budget.Used())
	}
}

// A ModelInfer past the HTTP door's bounds (inputs, parameters) is
// refused as that door refuses it, INVALID_ARGUMENT, before it is decoded
// or queued.
func TestModelInferBoundsAsHTTP(t *testing.T) {
	r := newRig(t, rigOptions{})
	many := simpleRaw("many", []int32{1}, []int32{2})
	for len(many.Inputs) <= kserve.MaxTensors {
		many.Inputs = append(many.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: "x", Datatype: "INT32", Shape: []int64{1, 1}})
		many.RawInputContents = append(many.RawInputContents, ints(1))
	}
	params := simpleRaw("params", []int32{1}, []int32{2})
	params.Parameters = map[string]*pb.InferParameter{}
	for i := range kserve.MaxParameters + 1 {
		params.Parameters[fmt.Sprint("p", i)] = &pb.InferParameter{}
	}
	for _, tc := range []struct {
		m   *pb.ModelInferRequest
		msg string
	}{{many, "more than 1024 inputs"}, {params, "more than 1024 parameters"}} {
		_, err := r.client.ModelInfer(context.Background(), tc.m)
		if st := status.Convert(err); st.Code() != codes.InvalidArgument || st.Message() != tc.msg {
			t.Errorf("%s: %v, want INVALID_ARGUMENT %q", tc.m.Id, err, tc.msg)
		}
	}
	if b := r.up.seen(); len(b) != 0 {
		t.Errorf("batches sent upstream: %v", b)
	}
}

// What decoding a message takes is held against the memory budget before
// it is decoded: a message whose bytes fit but whose decoding does not (a
// thousand one-element inputs) is refused RESOURCE_EXHAUSTED; the budget
// is never passed.
func TestDecodedSizeChargedBeforeDecoding(t *testing.T) {
	budget := membudget.New(callCost + 256<<10)
	r := newRig(t, rigOptions{memory: budget})
	tiny := simpleRaw("tiny", []int32{1}, []int32{2})
	for len(tiny.Inputs) < kserve.MaxTensors {
		tiny.Inputs = append(tiny.Inputs, &pb.ModelInferRequest_InferInputTensor{Name: fmt.Sprint("x", len(tiny.Inputs)), Datatype: "INT8", Shape: []int64{1, 1}})
		tiny.RawInputContents = append(tiny.RawInputContents, []byte{1})
	}
	if n := proto.Size(tiny); n > 64<<10 {
		t.Fatalf("the message is %d bytes: it should fit the budget", n)
	}
	_, err := r.client.ModelInfer(context.Background(), tiny)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("a message whose decoding does not fit: %v, want RESOURCE_EXHAUSTED", err)
	}
	if budget.Peak() > budget.Limit() || budget.Used() != 0 {
		t.Errorf("budget peak %d of %d, %d still held", budget.Peak(), budget.Limit(), budget.Used())
	}
	if _, err := r.client.ModelInfer(context.Background(), simpleRaw("small", []int32{1, 2}, []int32{3, 4})); err != nil {
		t.Errorf("a small message after: %v", err)
	}
}

// A relayed stream holds what it costs while open and each message while
// it is held: a message that does not fit ends the stream with
// RESOURCE_EXHAUSTED; nothing stays held once the calls end.
func TestRelayedMessagesChargedWhileHeld(t *testing.T) {
	budget := membudget.New(callCost + 64<<10)
	r := newRig(t, rigOptions{memory: budget})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := r.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		"/inference.GRPCInferenceService/ModelStreamInfer", grpc.ForceCodecV2(grpcwire.Codec{}))
	if err != nil {
		t.Fatal(err)
	}
	small := bytes.Repeat([]byte{'s'}, 1<<10)
	if err := st.SendMsg(&grpcwire.Frame{B: small}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := st.RecvMsg(&grpcwire.Frame{}); err != nil {
			t.Fatalf("answer to a small message: %v", err)
		}
	}
	if used := budget.Used(); used < callCost {
		t.Errorf("an open stream holds %d bytes of the budget, want at least %d", used, callCost)
	}
	if err := st.SendMsg(&grpcwire.Frame{B: make([]byte, 100<<10)}); err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(&grpcwire.Frame{})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("a message past the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	testpoll.Until(t, "the budget to be free", func() bool { return budget.Used() == 0 })
}

// A flood of streams that send nothing is bounded by the memory budget
// too: each holds its cost while open, and once the budget is spent new
// calls are refused RESOURCE_EXHAUSTED, the open ones served on.
func TestGRPCStreamFloodIsBounded(t *testing.T) {
	budget := membudget.New(16 * callCost)
	r := newRig(t, rigOptions{memory: budget})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var open []grpc.ClientStream
	var refused error
	for i := 0; i < 64 && refused == nil; i++ {
		st, err := r.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
			"/inference.GRPCInferenceService/ModelStreamInfer", grpc.ForceCodecV2(grpcwire.Codec{}))
		if err != nil {
			t.Fatal(err)
		}
		// A stream's status comes with its first answer: one message each.
		// A stream refused before it reads ends at once, and gRPC's SendMsg
		// then says only io.EOF: the status is RecvMsg's to give.
		if err := st.SendMsg(&grpcwire.Frame{B: []byte("x")}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if err := st.RecvMsg(&grpcwire.Frame{}); err != nil {
			refused = err
			break
		}
		open = append(open, st)
	}
	if status.Code(refused) != codes.ResourceExhausted || len(open) == 0 || len(open) > 16 {
		t.Fatalf("%d streams open, then %v; want at most 16, then RESOURCE_EXHAUSTED", len(open), refused)
	}
	if budget.Peak() > budget.Limit() {
		t.Errorf("budget peak %d of %d", budget.Peak(), budget.Limit())
	}
	for _, st := range open { // served on
		if err := st.SendMsg(&grpcwire.Frame{B: []byte("y")}); err != nil {
			t.Fatal(err)
		}
		if err := st.RecvMsg(&grpcwire.Frame{}); err != nil {
			t.Fatalf("an open stream after the refusal: %v", err)
		}
	}
	cancel()
	testpoll.Until(t, "the budget to be free", func() bool { return budget.Used() == 0 })
}
