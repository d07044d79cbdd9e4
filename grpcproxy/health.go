package grpcproxy

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// health answers grpc.health.v1 for the proxy itself: SERVING once it has
// read the upstream's models (as /readyz), NOT_SERVING while it shuts down.
type health struct {
	healthpb.UnimplementedHealthServer
	s *Server
}

// services the health check knows: the whole server and Triton's service.
func knownService(name string) bool {
	return name == "" || name == "inference.GRPCInferenceService"
}

func (h *health) state() healthpb.HealthCheckResponse_ServingStatus {
	if h.s.closing.Load() || (h.s.o.Ready != nil && !h.s.o.Ready()) {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

func (h *health) Check(_ context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !knownService(r.GetService()) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", r.GetService())
	}
	return &healthpb.HealthCheckResponse{Status: h.state()}, nil
}

// Watch sends the status, then every change of it (checked each second).
func (h *health) Watch(r *healthpb.HealthCheckRequest, w grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	last := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		if knownService(r.GetService()) {
			st = h.state()
		}
		if st != last {
			if err := w.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-w.Context().Done():
			return status.FromContextError(w.Context().Err()).Err()
		case <-tick.C:
		}
	}
}
