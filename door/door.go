// Package door is the contract of ratebatch's front doors, the HTTP door
// (package proxy) and the gRPC door (package grpcproxy): what they need
// of the queues behind them (Batcher, Discoverer, Health, gathered in a
// Backend); the one call path of an inference call of a batched model,
// whichever door it came through (Door: the model's lookup, the
// admission against the memory budget, the queue, the answer's
// accounting, the metrics and their protocol label, the callers'
// namespace); and how an error of a batched call becomes an answer, an
// HTTP status with a KServe v2 error body or Triton's gRPC status code,
// so that a client hears the same through either door. The doors define
// it, as its users; the dispatcher and the registry implement it. A new
// door (an OpenAI-compatible front, KServe v1) is a package that reads
// its protocol, takes this path and writes its answers.
package door

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
)

// Batcher queues inference calls of the models it batches
// (*dispatcher.Dispatcher is one).
type Batcher interface {
	// Model reports whether the model is batched and its max batch size.
	Model(name string) (maxBatch int, ok bool)
	// Submit queues c and returns its answer, or ctx's error once the
	// caller is gone.
	Submit(ctx context.Context, model string, c *dispatcher.Call) dispatcher.Result
	// Delivered tells that Submit's result has been written to its
	// caller: the call's latency ends there (dispatcher.Answer).
	Delivered(r dispatcher.Result)
}

// Discoverer learns models on demand; optional (*registry.Models is one).
type Discoverer interface {
	// Ensure looks the model up upstream if it is not known yet.
	Ensure(ctx context.Context, model string)
	// Changed tells that the model may have changed upstream (a door
	// passed a repository load or unload of it through): its mode is to
	// be decided again. It must not block.
	Changed(model string)
}

// Health is the proxy's verdict on the upstream, which the doors'
// readiness answers give (*dispatcher.Dispatcher is one).
type Health interface {
	// Failing reports whether a batched model is marked failing, and why.
	Failing(model string) (failing bool, reason string)
	// Unready says why the upstream should not be sent traffic (it
	// refuses connections, every batched model is failing), "" when it
	// should.
	Unready() string
}

// Kind is what decides a door's answer to an error.
type Kind int

const (
	// Internal is any error of no other kind: 500, INTERNAL.
	Internal Kind = iota
	// Status is a *kserve.Error, which carries its HTTP status; its gRPC
	// code is Triton's for that status (grpcwire.Code).
	Status
	// UnknownModel is dispatcher.ErrUnknownModel: 404, NOT_FOUND.
	UnknownModel
	// QueueFull is dispatcher.ErrQueueFull: 503, and RESOURCE_EXHAUSTED
	// as Triton answers a full queue.
	QueueFull
	// Refused is a *Refusal, the proxy's own "not now": 503,
	// RESOURCE_EXHAUSTED.
	Refused
	// Deadline is the caller's deadline passing while its call was
	// queued: DEADLINE_EXCEEDED (504 over HTTP, whose door has no
	// deadline of its own).
	Deadline
	// Canceled is the caller going away: CANCELLED (over HTTP the door
	// closes the connection instead of answering; 499, as nginx counts
	// it, is the status it would have).
	Canceled
)

var kindNames = [...]string{"internal", "status", "unknown_model", "queue_full", "refused", "deadline", "canceled"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// KindOf classifies err; the first kind that matches wins, in the order
// of the cases, so that a full queue, also a 503 *kserve.Error, is
// QueueFull.
func KindOf(err error) Kind {
	var ke *kserve.Error
	var r *Refusal
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return Deadline
	case errors.Is(err, context.Canceled):
		return Canceled
	case errors.Is(err, dispatcher.ErrQueueFull):
		return QueueFull
	case errors.Is(err, dispatcher.ErrUnknownModel):
		return UnknownModel
	case errors.As(err, &r):
		return Refused
	case errors.As(err, &ke) && ke.Status != 0:
		return Status
	}
	return Internal
}

// StatusCode is the HTTP status of the answer to err.
func StatusCode(err error) int {
	switch KindOf(err) {
	case Status:
		return kserve.ErrorStatus(err)
	case UnknownModel:
		return http.StatusNotFound
	case QueueFull, Refused:
		return http.StatusServiceUnavailable
	case Deadline:
		return http.StatusGatewayTimeout
	case Canceled:
		return statusClientClosed
	}
	return http.StatusInternalServerError
}

// statusClientClosed is nginx's status of a request whose client hung up
// (grpcwire.HTTPStatus counts CANCELLED as it).
const statusClientClosed = 499

// GRPCStatus is the gRPC status of the answer to err, as Triton's gRPC
// server gives it; its message is err's, but for a deadline or a
// cancellation, which say what happened in the caller's words.
func GRPCStatus(err error) *status.Status {
	switch KindOf(err) {
	case Deadline:
		return status.New(codes.DeadlineExceeded, "deadline exceeded while the request was queued")
	case Canceled:
		return status.New(codes.Canceled, "request cancelled by the client")
	case QueueFull, Refused:
		return status.New(codes.ResourceExhausted, err.Error())
	case UnknownModel:
		return status.New(codes.NotFound, err.Error())
	case Status:
		return status.New(grpcwire.Code(kserve.ErrorStatus(err)), err.Error())
	}
	return status.New(codes.Internal, err.Error())
}

// Refusal is the proxy refusing a call for now, before it queues it: its
// memory budget has no room, or a large body found no turn to be read.
// The client retries later (the HTTP door says when, in Retry-After).
type Refusal struct {
	// Reason labels the refusal in the metrics (memory_declared, ...).
	Reason string
	Msg    string
}

func (r *Refusal) Error() string { return r.Msg }

// NoRoom is the refusal of a call whose n bytes do not fit the memory
// budget of limit bytes now.
func NoRoom(reason string, limit, n int64) *Refusal {
	return &Refusal{Reason: reason, Msg: fmt.Sprintf(
		"the proxy's memory budget (%d bytes) has no room for this request's %d bytes now; retry later", limit, n)}
}
