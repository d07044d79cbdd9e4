package grpcproxy

import (
	"context"
	"sync/atomic"
	"testing"

	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// unreadyHealth also says why the proxy is not ready, as the dispatcher
// does (an upstream refusing connections, with no model failing).
type unreadyHealth struct {
	fakeHealth
	why atomic.Value
}

func (h *unreadyHealth) Unready() string { s, _ := h.why.Load().(string); return s }

// ServerReady follows the dispatcher's Unready verdict when it has one,
// which covers an upstream refusing connections.
func TestServerReadyFollowsUnready(t *testing.T) {
	h := &unreadyHealth{}
	h.why.Store("")
	c := readyClient(t, h)
	for _, tc := range []struct {
		why  string
		want bool
	}{{"", true}, {"upstream refusing connections", false}, {"", true}} {
		h.why.Store(tc.why)
		sr, err := c.ServerReady(context.Background(), &pb.ServerReadyRequest{})
		if err != nil || sr.Ready != tc.want {
			t.Fatalf("unready %q: ServerReady = %v, %v; want %v", tc.why, sr, err, tc.want)
		}
	}
}
