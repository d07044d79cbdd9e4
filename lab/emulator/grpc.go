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
// readiness, server and model metadata, model config, statistics, the
// repository index (what perf_analyzer and tritonclient ask before they
// infer), and ModelInfer, which runs the same
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

// ModelConfig answers with the configuration GET /v2/models/{m}/config
// writes, in model_config.proto's form.
func (g grpcDoor) ModelConfig(_ context.Context, r *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	m, err := g.model(r.GetName(), r.GetVersion())
	if err != nil {
		return nil, err
	}
	return &pb.ModelConfigResponse{Config: toConfig(m.config())}, nil
}

// toConfig converts the JSON form of a model config to the protobuf one.
func toConfig(c kserve.ModelConfig) *pb.ModelConfig {
	out := &pb.ModelConfig{
		Name: c.Name, Platform: c.Platform, Backend: c.Backend, MaxBatchSize: int32(c.MaxBatchSize),
		VersionPolicy: &pb.ModelVersionPolicy{PolicyChoice: &pb.ModelVersionPolicy_Latest_{
			Latest: &pb.ModelVersionPolicy_Latest{NumVersions: 1}}},
	}
	for _, t := range c.Input {
		out.Input = append(out.Input, &pb.ModelInput{Name: t.Name, DataType: pb.DataType(pb.DataType_value[t.DataType]),
			Format: pb.ModelInput_Format(pb.ModelInput_Format_value[t.Format]), Dims: t.Dims})
	}
	for _, t := range c.Output {
		out.Output = append(out.Output, &pb.ModelOutput{Name: t.Name, DataType: pb.DataType(pb.DataType_value[t.DataType]), Dims: t.Dims})
	}
	for _, ig := range c.InstanceGroup {
		gpus := make([]int32, len(ig.GPUs))
		for i, n := range ig.GPUs {
			gpus[i] = int32(n)
		}
		out.InstanceGroup = append(out.InstanceGroup, &pb.ModelInstanceGroup{Name: ig.Name, Count: int32(ig.Count),
			Gpus: gpus, Kind: pb.ModelInstanceGroup_Kind(pb.ModelInstanceGroup_Kind_value[ig.Kind])})
	}
	return out
}

// ModelStatistics answers with the statistics GET /v2/models[/{m}]/stats
// writes: every model's when the name is empty, as Triton does.
func (g grpcDoor) ModelStatistics(_ context.Context, r *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	models := g.s.models
	if r.GetName() != "" {
		m, err := g.model(r.GetName(), r.GetVersion())
		if err != nil {
			return nil, err
		}
		models = []*model{m}
	}
	resp := &pb.ModelStatisticsResponse{}
	for _, m := range models {
		resp.ModelStats = append(resp.ModelStats, toStatistics(m.stats.snapshot()))
	}
	return resp, nil
}

func toDuration(d DurationStat) *pb.StatisticDuration {
	return &pb.StatisticDuration{Count: d.Count, Ns: d.NS}
}

func toStatistics(s ModelStats) *pb.ModelStatistics {
	is := s.InferenceStats
	out := &pb.ModelStatistics{
		Name: s.Name, Version: s.Version, LastInference: s.LastInference,
		InferenceCount: s.InferenceCount, ExecutionCount: s.ExecutionCount,
		InferenceStats: &pb.InferStatistics{
			Success: toDuration(is.Success), Fail: toDuration(is.Fail), Queue: toDuration(is.Queue),
			ComputeInput: toDuration(is.ComputeInput), ComputeInfer: toDuration(is.ComputeInfer),
			ComputeOutput: toDuration(is.ComputeOutput), CacheHit: toDuration(is.CacheHit), CacheMiss: toDuration(is.CacheMiss),
		},
	}
	for _, b := range s.BatchStats {
		out.BatchStats = append(out.BatchStats, &pb.InferBatchStatistics{BatchSize: b.BatchSize,
			ComputeInput: toDuration(b.ComputeInput), ComputeInfer: toDuration(b.ComputeInfer), ComputeOutput: toDuration(b.ComputeOutput)})
	}
	return out
}

// RepositoryIndex lists every model with its state, or only the ready ones
// when asked, as POST /v2/repository/index does.
func (g grpcDoor) RepositoryIndex(_ context.Context, r *pb.RepositoryIndexRequest) (*pb.RepositoryIndexResponse, error) {
	resp := &pb.RepositoryIndexResponse{}
	for _, e := range g.s.index(r.GetReady()) {
		resp.Models = append(resp.Models, &pb.RepositoryIndexResponse_ModelIndex{Name: e.Name, Version: e.Version, State: e.State, Reason: e.Reason})
	}
	return resp, nil
}
