package emulator

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// GRPC is the emulator's gRPC door (Triton's port 8001): liveness,
// readiness, server and model metadata, and ModelInfer, which runs the same
// execution as the HTTP door's infer, so a gRPC caller and an HTTP caller
// queue for the same instances and count in the same statistics. Other
// methods answer UNIMPLEMENTED. Register it on a grpc.Server:
//
//	pb.RegisterGRPCInferenceServiceServer(srv, em.GRPC())
func (s *Server) GRPC() pb.GRPCInferenceServiceServer { return grpcDoor{s: s} }

type grpcDoor struct {
	pb.UnimplementedGRPCInferenceServiceServer
	s *Server
}

func (g grpcDoor) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (g grpcDoor) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: g.s.ready.Load()}, nil
}

func (g grpcDoor) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: serverName, Version: serverVersion, Extensions: extensions}, nil
}

// model resolves a name and version as withModel does, with Triton's
// gRPC code for a model it does not serve.
func (g grpcDoor) model(name, version string) (*model, error) {
	m, ok := g.s.byName[name]
	if !ok || (version != "" && version != modelVersion) {
		return nil, status.Error(codes.NotFound, unknownModel(name, version))
	}
	return m, nil
}

func (g grpcDoor) ModelReady(_ context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	m, err := g.model(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, err
	}
	return &pb.ModelReadyResponse{Ready: m.ready.Load()}, nil
}

func (g grpcDoor) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	m, err := g.model(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, err
	}
	return grpcwire.ToModelMetadata(m.metadata()), nil
}

// ModelInfer converts the request to kserve's form, as the proxy's door
// does, and executes it; the answer carries raw_output_contents, as
// Triton's does.
func (g grpcDoor) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	s := g.s
	start := s.clock.Now()
	m, err := g.model(r.GetModelName(), r.GetModelVersion())
	if err != nil {
		return nil, err
	}
	if !m.ready.Load() {
		return nil, status.Error(codes.Unavailable, notReady(m))
	}
	req, err := grpcwire.ToRequest(r)
	if err != nil {
		m.stats.fail(s.clock.Now().Sub(start))
		return nil, status.Error(grpcwire.Code(kserve.ErrorStatus(err)), err.Error())
	}
	inBytes := 0
	for _, t := range req.Inputs {
		inBytes += len(t.Data)
	}
	var resp *pb.ModelInferResponse
	err = s.execute(ctx, m, req, exchange{start: start, received: start, inBytes: inBytes,
		write: func(out *kserve.Response) error {
			resp = grpcwire.ToResponse(out)
			return ctx.Err()
		}})
	switch {
	case err == nil:
		return resp, nil
	case errors.Is(err, errDrop):
		return nil, status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, errNobody):
		return nil, status.Error(codes.Canceled, err.Error())
	}
	return nil, status.Error(grpcwire.Code(kserve.ErrorStatus(err)), err.Error())
}
