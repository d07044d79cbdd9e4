package grpcproxy

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ctxStream is a server stream that is only its context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s ctxStream) Context() context.Context { return s.ctx }

// A call whose deadline passes while its handler runs is answered
// DEADLINE_EXCEEDED "Deadline Exceeded", as Triton answers it, before the
// deadline itself (when grpc-go's transport would reset the stream); a
// call without a deadline, and an error that is not the deadline's, are
// left as they are.
func TestAnswerDeadline(t *testing.T) {
	s := &Server{o: Options{deadlineLead: deadlineLead}}
	var handlerDeadline time.Time // the deadline waitThen's handler ran with
	waitThen := func(err error) grpc.StreamHandler {
		return func(_ any, ss grpc.ServerStream) error {
			handlerDeadline, _ = ss.Context().Deadline()
			<-ss.Context().Done()
			return err
		}
	}
	queued := status.Error(codes.DeadlineExceeded, "deadline exceeded while the request was queued")
	tests := []struct {
		name    string
		timeout time.Duration // 0: no deadline
		h       grpc.StreamHandler
		want    error
	}{
		{"a batched call given up", 200 * time.Millisecond, waitThen(queued), tritonDeadline.Err()},
		{"a relayed call cancelled", 200 * time.Millisecond, waitThen(status.Error(codes.DeadlineExceeded, "context deadline exceeded")), tritonDeadline.Err()},
		{"another error at the deadline", 200 * time.Millisecond, waitThen(status.Error(codes.Internal, "x")), status.Error(codes.Internal, "x")},
		{"a deadline error before the deadline", time.Minute, func(any, grpc.ServerStream) error { return queued }, queued},
		{"no deadline", 0, func(_ any, ss grpc.ServerStream) error {
			if _, ok := ss.Context().Deadline(); ok {
				return status.Error(codes.Internal, "a deadline appeared")
			}
			return nil
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			var d time.Time
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
				d, _ = ctx.Deadline()
			}
			handlerDeadline = time.Time{}
			err := s.answerDeadline(nil, ctxStream{ctx: ctx}, tt.h)
			if status.Convert(err).Proto().String() != status.Convert(tt.want).Proto().String() {
				t.Fatalf("answered %v, want %v", err, tt.want)
			}
			if lead := d.Sub(handlerDeadline); !handlerDeadline.IsZero() && (lead <= 0 || lead > deadlineLead) {
				t.Errorf("the handler ran with a deadline %v before the caller's, want within (0, %v]", lead, deadlineLead)
			}
		})
	}
}

// The door answers a call whose deadline passes in its queue as Triton
// does, before the client's own timer says so in its words ("context
// deadline exceeded"), or grpc-go's reset in its (a client that reads the
// reset first: CANCELLED). The product's lead (TestAnswerDeadline) is a
// few milliseconds, which a machine loaded by a race-detector run can
// spend before the answer is written: here the door answers 100 ms early,
// so the test sees the answer through the whole path, not the scheduler.
// A loaded machine may still let the client's timer win once; not three
// times.
func TestDeadlinePassedAnsweredAsTriton(t *testing.T) {
	r := newRig(t, rigOptions{rule: waitFor(2), lead: 100 * time.Millisecond}) // a lone call waits for a partner that never comes
	var got []error
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := r.client.ModelInfer(ctx, simpleRaw("d", []int32{1}, []int32{2}))
		cancel()
		if status.Code(err) == codes.DeadlineExceeded && status.Convert(err).Message() == tritonDeadline.Message() {
			return
		}
		got = append(got, err)
	}
	t.Fatalf("answered %v; want DEADLINE_EXCEEDED %q", got, tritonDeadline.Message())
}
