package door

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/kserve"
)

// TestKinds maps an error of every kind to its HTTP status and its gRPC
// code: the answers the two doors give, written out by hand from what each
// door answered before they shared this table (Triton's codes for gRPC).
func TestKinds(t *testing.T) {
	seen := map[Kind]bool{}
	queueFull := fmt.Errorf("%w: %w", &kserve.Error{Status: 503, Msg: "model 'm' queue is full"}, dispatcher.ErrQueueFull)
	for _, tc := range []struct {
		name string
		err  error
		kind Kind
		http int
		grpc codes.Code
		msg  string // the gRPC message when not err's
	}{
		{"400", &kserve.Error{Status: 400, Msg: "x"}, Status, 400, codes.InvalidArgument, ""},
		{"415", &kserve.Error{Status: 415, Msg: "x"}, Status, 415, codes.InvalidArgument, ""},
		{"413", &kserve.Error{Status: 413, Msg: "x"}, Status, 413, codes.ResourceExhausted, ""},
		{"404", &kserve.Error{Status: 404, Msg: "x"}, Status, 404, codes.NotFound, ""},
		{"shutting down", &kserve.Error{Status: 503, Msg: "shutting down"}, Status, 503, codes.Unavailable, ""},
		{"unreachable", &kserve.Error{Status: 502, Msg: "unreachable"}, Status, 502, codes.Unavailable, ""},
		{"slow upstream", &kserve.Error{Status: 504, Msg: "slow"}, Status, 504, codes.DeadlineExceeded, ""},
		{"500", &kserve.Error{Status: 500, Msg: "x"}, Status, 500, codes.Internal, ""},
		{"wrapped 400", fmt.Errorf("reading: %w", &kserve.Error{Status: 400, Msg: "x"}), Status, 400, codes.InvalidArgument, ""},
		{"no status", &kserve.Error{Msg: "x"}, Internal, 500, codes.Internal, ""},
		{"plain", errors.New("plain"), Internal, 500, codes.Internal, ""},
		{"unknown model", fmt.Errorf("%w: m", dispatcher.ErrUnknownModel), UnknownModel, 404, codes.NotFound, ""},
		{"queue full", queueFull, QueueFull, 503, codes.ResourceExhausted, ""},
		{"no room", NoRoom("memory_declared", 100, 200), Refused, 503, codes.ResourceExhausted, ""},
		{"deadline", fmt.Errorf("queued: %w", context.DeadlineExceeded), Deadline, 504, codes.DeadlineExceeded,
			"deadline exceeded while the request was queued"},
		{"canceled", fmt.Errorf("wrapped: %w", context.Canceled), Canceled, 499, codes.Canceled,
			"request cancelled by the client"},
	} {
		seen[tc.kind] = true
		t.Run(tc.name, func(t *testing.T) {
			if got := KindOf(tc.err); got != tc.kind {
				t.Errorf("kind %v, want %v", got, tc.kind)
			}
			if got := StatusCode(tc.err); got != tc.http {
				t.Errorf("HTTP status %d, want %d", got, tc.http)
			}
			st := GRPCStatus(tc.err)
			want := tc.msg
			if want == "" {
				want = tc.err.Error()
			}
			if st.Code() != tc.grpc || st.Message() != want {
				t.Errorf("gRPC %v %q, want %v %q", st.Code(), st.Message(), tc.grpc, want)
			}
		})
	}
	// Every kind has its row, and its name.
	for k := Kind(0); int(k) < len(kindNames); k++ {
		if !seen[k] {
			t.Errorf("kind %v has no row in the table", k)
		}
	}
	if got := Kind(len(kindNames)).String(); !strings.HasPrefix(got, "Kind(") {
		t.Errorf("a kind past the last is named %q", got)
	}
}

func TestNoRoomSaysWhatDidNotFit(t *testing.T) {
	r := NoRoom("memory_growing", 1<<20, 3<<20)
	if r.Reason != "memory_growing" || !strings.Contains(r.Error(), "(1048576 bytes)") || !strings.Contains(r.Error(), "3145728 bytes now") {
		t.Errorf("%+v", r)
	}
}
