package grpcproxy

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// deadlineLead is how long before a caller's deadline the door answers a
// call still running, at most (a tenth of the time the caller gave, for a
// short deadline): time enough to write its status before grpc-go's
// transport resets the stream at the deadline itself.
const deadlineLead = 5 * time.Millisecond

// tritonDeadline is the status Triton's gRPC server (gRPC C-core) answers
// a call whose deadline has passed, whatever the call was doing.
var tritonDeadline = status.New(codes.DeadlineExceeded, "Deadline Exceeded")

// answerDeadline answers a call whose deadline passes as Triton does:
// DEADLINE_EXCEEDED "Deadline Exceeded" in the call's trailers. Left to
// itself, grpc-go's transport resets the stream at the deadline
// (RST_STREAM CANCEL), which a client whose own timer has not fired yet
// reads as CANCELLED. So the handler runs with a deadline a lead earlier
// (its batch is given up, its relayed call cancelled then), and its
// answer, written before the reset, stops it. A call without a deadline
// runs as it came.
func (s *Server) answerDeadline(srv any, ss grpc.ServerStream, h grpc.StreamHandler) error {
	d, ok := ss.Context().Deadline()
	if !ok {
		return h(srv, ss)
	}
	early := d.Add(-min(s.o.deadlineLead, time.Until(d)/10))
	ctx, cancel := context.WithDeadline(ss.Context(), early)
	defer cancel()
	err := h(srv, &deadlineStream{ServerStream: ss, ctx: ctx})
	// The batch's upstream call may fail on its own clock before ctx's
	// fires: what counts is that the deadline has passed.
	if err != nil && status.Code(err) == codes.DeadlineExceeded && !time.Now().Before(early) {
		return tritonDeadline.Err()
	}
	return err
}

// deadlineStream is a call's stream seen through a context of its own.
type deadlineStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *deadlineStream) Context() context.Context { return s.ctx }
