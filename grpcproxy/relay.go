package grpcproxy

import (
	"context"
	"io"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
)

// repositoryChange relays a repository load or unload and, once Triton
// has answered it, tells the doors that the model it names may have
// changed (door.Door.RepositoryChanged), as the HTTP door does.
func (s *Server) repositoryChange(ss grpc.ServerStream, method string) error {
	h := membudget.Hold{B: s.door.Memory}
	defer h.Release()
	in := &grpcwire.Frame{}
	if err := s.recv(ss, in); err != nil {
		return err
	}
	h.Force(int64(len(in.B)))
	// model_name is field 2 of RepositoryModelLoadRequest and of
	// RepositoryModelUnloadRequest.
	if model, err := stringField(in.B, 2); err == nil {
		defer s.door.RepositoryChanged(model)
	}
	return s.forwardUnary(ss, method, in, &h)
}

// passed counts a relayed call, and whether it failed to reach the
// upstream.
func (s *Server) passed(failed bool) {
	s.door.Passed()
	if failed {
		s.door.PassFailed()
	}
}

// forward relays a call to the upstream message by message, both ways at
// once (a stream's messages are not waited for), with the client's
// metadata and deadline, and gives the client the upstream's headers,
// trailers and status. The call's own cost (callCost) is held against
// the memory budget while it lasts, and each message while it is held
// (heldFrames): a client's from its arrival until it is written upstream
// (one that does not fit ends the call with RESOURCE_EXHAUSTED), an
// answer from its arrival until it is written to the client (forced: the
// upstream's work is done).
func (s *Server) forward(ss grpc.ServerStream, method string) error {
	call := membudget.Hold{B: s.door.Memory}
	defer call.Release()
	if !call.Grow(callCost) {
		return s.refuse("", door.NoRoom("memory_calls", s.door.Memory.Limit(), callCost))
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	ctx = outgoing(ctx)
	cs, err := s.o.Upstream.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		s.passed(true)
		return err
	}
	var relayErr atomic.Pointer[error] // the relay's end, the call's status
	go s.relayUp(ss, cs, method, cancel, &relayErr)
	// Upstream to client.
	down := heldFrames{b: s.door.Memory}
	defer down.release()
	for n := 0; ; n++ {
		f := &grpcwire.Frame{}
		err := cs.RecvMsg(f)
		if n == 0 && err == nil {
			if h, herr := cs.Header(); herr == nil {
				if err := ss.SendHeader(h); err != nil {
					return err
				}
			}
		}
		if err != nil {
			if p := relayErr.Load(); p != nil {
				s.passed(status.Code(*p) == codes.Internal)
				return *p
			}
			ss.SetTrailer(cs.Trailer())
			if err == io.EOF {
				s.passed(false)
				return nil
			}
			s.passed(status.Code(err) == codes.Unavailable && n == 0)
			return err
		}
		down.force(len(f.B))
		err = ss.SendMsg(f)
		down.sent()
		if err != nil {
			return err
		}
	}
}

// relayUp relays a call's client messages to the upstream, each held
// against the memory budget until sent, until the client ends its side.
// A message that does not fit, or a panic, ends the call (relayErr, its
// status, and cancel); the upstream's status comes to forward otherwise.
func (s *Server) relayUp(ss grpc.ServerStream, cs grpc.ClientStream, method string, cancel context.CancelFunc, relayErr *atomic.Pointer[error]) {
	up := heldFrames{b: s.door.Memory}
	defer up.release()
	defer func() { // this goroutine's panic would end the process
		if v := recover(); v != nil {
			err := status.Error(codes.Internal, guard.Recovered(s.log, "grpc_relay", v).Error())
			relayErr.Store(&err)
			cancel() // the upstream call ends, and with it the client's
		}
	}()
	for {
		f := &grpcwire.Frame{}
		err := s.recv(ss, f)
		if hook := testHookHandle.Load(); hook != nil && err == nil {
			(*hook)(method, f.B)
		}
		if err != nil {
			if err == io.EOF {
				cs.CloseSend()
			} else {
				cancel() // the client's stream broke: abandon the upstream call
			}
			return
		}
		if !up.grow(len(f.B)) {
			err := s.refuse("", door.NoRoom("memory_relayed", s.door.Memory.Limit(), int64(len(f.B))))
			relayErr.Store(&err)
			cancel()
			return
		}
		err = cs.SendMsg(f)
		up.sent()
		if err != nil {
			return
		}
	}
}

// heldFrames holds the messages a relayed stream keeps in one direction
// against the memory budget. grpc-go's SendMsg returns once a message is
// queued, not written: the stream's write quota lets one message past it
// at a time, so the message sent stays held until the next one is sent
// (by then grpc-go has written it), or until the call ends.
type heldFrames struct {
	b          *membudget.Budget
	last, next membudget.Hold
}

// grow holds the next message's n bytes beside the last one's, if they
// fit.
func (h *heldFrames) grow(n int) bool {
	h.next.B = h.b
	return h.next.Grow(int64(n))
}

// force holds the next message's n bytes whether or not they fit.
func (h *heldFrames) force(n int) {
	h.next.B = h.b
	h.next.Force(int64(n))
}

// sent tells that the next message was sent: the last one is written.
func (h *heldFrames) sent() {
	h.last.Release()
	h.last, h.next = h.next, h.last
}

func (h *heldFrames) release() {
	h.last.Release()
	h.next.Release()
}

// forwardUnary relays a unary call whose one message is already read
// (ModelInfer of a model the proxy does not batch) as one upstream call:
// no stream and no goroutine of its own, which is what a relayed
// ModelInfer costs most. Headers, trailers and status are the upstream's.
// The answer is held in h, beside the message, until it is sent (forced:
// the upstream's work is done).
func (s *Server) forwardUnary(ss grpc.ServerStream, method string, in *grpcwire.Frame, h *membudget.Hold) error {
	var header, trailer metadata.MD
	out := &grpcwire.Frame{}
	err := s.o.Upstream.Invoke(outgoing(ss.Context()), method, in, out, grpc.Header(&header), grpc.Trailer(&trailer))
	ss.SetTrailer(trailer)
	if err != nil {
		s.passed(status.Code(err) == codes.Unavailable)
		return err
	}
	h.Force(int64(len(out.B)))
	if err := ss.SendHeader(header); err != nil {
		return err
	}
	if err := ss.SendMsg(out); err != nil {
		return err
	}
	s.passed(false)
	return nil
}

// outgoing carries the client's metadata to the upstream call, less what
// belongs to the client's own connection.
func outgoing(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	out := make(metadata.MD, len(md))
	for k, v := range md {
		if strings.HasPrefix(k, ":") || k == "user-agent" || k == "content-type" || k == "te" {
			continue
		}
		out[k] = v
	}
	return metadata.NewOutgoingContext(ctx, out)
}

// stringField reads the string field num of a message without decoding
// the rest: the last occurrence wins, as in proto3 decoding.
func stringField(b []byte, field protowire.Number) (string, error) {
	var name string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
		if num == field && typ == protowire.BytesType {
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", protowire.ParseError(n)
			}
			name, b = string(v), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", protowire.ParseError(n)
		}
		b = b[n:]
	}
	return name, nil
}
