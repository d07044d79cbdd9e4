package grpcproxy

import (
	"context"
	"errors"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
	"github.com/ratebatch/ratebatch/tracing"
)

// modelInfer serves a ModelInfer call: a batched model's by the doors'
// call path (door.Door: admitted, its call queued for a batch, its answer
// written), as the HTTP door's infer; any other relayed.
func (s *Server) modelInfer(ss grpc.ServerStream) error {
	var a door.Admission
	s.door.Admit(&a, "", time.Now())
	defer a.Release()
	in, err := s.admit(ss, &a)
	if err != nil {
		return err
	}
	if !s.door.Batches(a.Model) {
		return s.forwardUnary(ss, MethodModelInfer, in, &a.Hold)
	}
	batchable, err := s.read(ss.Context(), in, &a)
	switch {
	case !batchable: // shared memory, sequences, ...: Triton handles those itself
		s.door.PassedWhole(a.Model)
		return s.forwardUnary(ss, MethodModelInfer, in, &a.Hold)
	case err != nil:
		return s.fail(a.Model, err)
	}
	s.trace(ss.Context(), &a)
	res := a.Submit(ss.Context())
	return s.reply(ss, &res, &a)
}

// admit receives a ModelInfer message, holds its bytes and what its call
// costs beside them (callCost) against the memory budget until the call
// ends, and reads the model it names (a.Model) without decoding the rest:
// a call that is only relayed is never decoded.
func (s *Server) admit(ss grpc.ServerStream, a *door.Admission) (*grpcwire.Frame, error) {
	if !a.Hold.Grow(callCost) {
		return nil, s.refuse("", door.NoRoom("memory_calls", s.door.Memory.Limit(), callCost))
	}
	in := &grpcwire.Frame{}
	if err := s.recv(ss, in); err != nil {
		return nil, err
	}
	if n := callCost + int64(len(in.B)); !a.Hold.Grow(n) {
		return nil, s.refuse("", door.NoRoom("memory_declared", s.door.Memory.Limit(), n))
	}
	if hook := testHookHandle.Load(); hook != nil {
		(*hook)(MethodModelInfer, in.B)
	}
	model, version, err := grpcwire.InferTarget(in.B)
	if err != nil {
		return nil, s.fail("", malformed(err))
	}
	// The model and version are checked before the model is looked up,
	// as the HTTP door checks its path's.
	if !door.CheckModel(model) {
		return nil, s.fail("", door.NoModel(model))
	}
	if _, err := door.Version(version); err != nil {
		return nil, s.fail("", err)
	}
	a.Model = model
	return in, nil
}

// read decodes a ModelInfer message into its call for the dispatcher
// (a.Call); not batchable: the call is Triton's to handle. What decoding
// will take is read from the message first (grpcwire.ScanInfer) and held
// against the memory budget before a byte is decoded; a message past the
// HTTP door's bounds (inputs, outputs, parameters, dimensions) is refused
// as that door refuses it.
func (s *Server) read(ctx context.Context, in *grpcwire.Frame, a *door.Admission) (batchable bool, err error) {
	cost, err := grpcwire.ScanInfer(in.B)
	var ke *kserve.Error
	switch {
	case errors.As(err, &ke):
		return true, err
	case err != nil:
		return true, malformed(err)
	}
	if n := a.Hold.Held() + cost.Decoded; !a.Hold.Grow(n) {
		s.door.Refused("memory_decoded")
		return true, door.NoRoom("memory_decoded", s.door.Memory.Limit(), n)
	}
	m := &pb.ModelInferRequest{}
	if err := proto.Unmarshal(in.B, m); err != nil {
		return true, malformed(err)
	}
	req, err := grpcwire.ToRequest(m)
	if err != nil {
		return true, err
	}
	version, err := door.Version(m.GetModelVersion())
	if err != nil {
		return true, err
	}
	call, batchable, err := dispatcher.NewCall(req, version, a.Start)
	if !batchable || err != nil {
		return batchable, err
	}
	if p, ok := peer.FromContext(ctx); ok {
		call.Source = door.GRPCSource(p.Addr)
	}
	a.Call = call
	a.Forward(func(name string) []byte { return metadataValue(ctx, name) }, func(f func(name, value []byte)) { eachMetadata(ctx, f) })
	return true, nil
}

// metadataValue is the first value of the call's metadata key (lower
// case), nil when it has none.
func metadataValue(ctx context.Context, key string) []byte {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return []byte(v[0])
	}
	return nil
}

// eachMetadata calls f with each key of the call's metadata and its first
// value.
func eachMetadata(ctx context.Context, f func(name, value []byte)) {
	md, _ := metadata.FromIncomingContext(ctx)
	for k, v := range md {
		if len(v) > 0 {
			f([]byte(k), []byte(v[0]))
		}
	}
}

// trace starts the call's span in the trace its metadata names, when the
// door traces.
func (s *Server) trace(ctx context.Context, a *door.Admission) {
	if s.door.Tracing() {
		md, _ := metadata.FromIncomingContext(ctx)
		a.Trace(tracing.MetadataCarrier(md))
	}
}

// malformed is the error of a ModelInfer message that does not decode:
// INVALID_ARGUMENT, as Triton answers it.
func malformed(err error) error {
	return &kserve.Error{Status: http.StatusBadRequest, Msg: "malformed ModelInferRequest: " + err.Error()}
}

// reply sends a batched call's answer, or its error.
func (s *Server) reply(ss grpc.ServerStream, res *dispatcher.Result, a *door.Admission) error {
	if res.Err != nil {
		a.Span.End(door.StatusCode(res.Err), res.Err.Error())
		return s.fail(a.Model, res.Err)
	}
	err := ss.SendMsg(grpcwire.ToResponse(res.Resp)) // marshals before it returns
	a.Answered(res, 0)
	a.Span.End(http.StatusOK, "")
	if err != nil {
		s.log.Debug("writing gRPC response", "model", a.Model, "err", err)
	}
	return err
}

// fail answers a batched call's error with the status Triton would give
// (door.GRPCStatus).
func (s *Server) fail(model string, err error) error {
	st := door.GRPCStatus(err)
	s.door.Failed(model, st.Code().String())
	return st.Err()
}

// refuse answers a call the proxy refuses for now (RESOURCE_EXHAUSTED),
// counted by its reason.
func (s *Server) refuse(model string, r *door.Refusal) error {
	s.door.Refused(r.Reason)
	return s.fail(model, r)
}
