package grpcwire

import (
	"github.com/ratebatch/ratebatch/kserve"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// ToModelMetadata is the gRPC form of GET /v2/models/{m}'s answer.
func ToModelMetadata(md kserve.ModelMetadata) *pb.ModelMetadataResponse {
	return &pb.ModelMetadataResponse{
		Name: md.Name, Versions: md.Versions, Platform: md.Platform,
		Inputs: toTensors(md.Inputs), Outputs: toTensors(md.Outputs),
	}
}

// FromModelMetadata is the HTTP form of a ModelMetadata answer.
func FromModelMetadata(m *pb.ModelMetadataResponse) kserve.ModelMetadata {
	return kserve.ModelMetadata{
		Name: m.GetName(), Versions: m.GetVersions(), Platform: m.GetPlatform(),
		Inputs: fromTensors(m.GetInputs()), Outputs: fromTensors(m.GetOutputs()),
	}
}

func toTensors(ts []kserve.TensorMetadata) []*pb.ModelMetadataResponse_TensorMetadata {
	out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(ts))
	for i, t := range ts {
		out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
	}
	return out
}

func fromTensors(ts []*pb.ModelMetadataResponse_TensorMetadata) []kserve.TensorMetadata {
	out := make([]kserve.TensorMetadata, len(ts))
	for i, t := range ts {
		out[i] = kserve.TensorMetadata{Name: t.GetName(), Datatype: t.GetDatatype(), Shape: t.GetShape()}
	}
	return out
}
