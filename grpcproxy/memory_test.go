package grpcproxy

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratebatch/ratebatch/internal/membudget"
)

// The memory budget at the gRPC door: a message that does not fit is
// refused RESOURCE_EXHAUSTED, small ones are served; while the budget is
// spent new calls are refused before their message is read, but the
// health check still answers; once freed, calls go through again.
func TestMemoryBudgetAtTheGRPCDoor(t *testing.T) {
	budget := membudget.New(4 << 10)
	r := newRig(t, rigOptions{memory: budget})
	big := simpleRaw("big", make([]int32, 2000), make([]int32, 2000)) // 16 KB of data
	if _, err := r.client.ModelInfer(context.Background(), big); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("a message past the budget: %v, want RESOURCE_EXHAUSTED", err)
	}
	small := simpleRaw("small", []int32{1, 2}, []int32{3, 4})
	if _, err := r.client.ModelInfer(context.Background(), small); err != nil {
		t.Fatalf("a small message: %v", err)
	}
	// Spent by others (the HTTP door, say).
	other := membudget.Hold{B: budget}
	other.Force(4 << 10)
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
