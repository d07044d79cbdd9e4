package grpcproxy

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// ready answers ServerReady (ModelReady) with ready false while the
// doors' verdict on the upstream (the model) is not ready, and relays it
// otherwise, so that Triton's own answer stands when the proxy has
// nothing to add.
func (s *Server) ready(ss grpc.ServerStream, method string) error {
	in := &grpcwire.Frame{}
	if err := s.recv(ss, in); err != nil {
		return err
	}
	var why string
	if method == methodModelReady {
		var m pb.ModelReadyRequest
		if err := proto.Unmarshal(in.B, &m); err != nil {
			return status.Errorf(codes.InvalidArgument, "malformed ModelReadyRequest: %v", err)
		}
		why = s.door.ModelUnready(m.GetName())
	} else {
		why = s.door.Unready()
	}
	if why == "" {
		h := membudget.Hold{B: s.door.Memory}
		defer h.Release()
		return s.forwardUnary(ss, method, in, &h)
	}
	if method == methodModelReady {
		return ss.SendMsg(&pb.ModelReadyResponse{Ready: false})
	}
	return ss.SendMsg(&pb.ServerReadyResponse{Ready: false})
}
