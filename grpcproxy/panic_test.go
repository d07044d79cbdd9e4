package grpcproxy

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
)

func setHandleHook(t *testing.T, f func(method string, msg []byte)) {
	testHookHandle.Store(&f)
	t.Cleanup(func() { testHookHandle.Store(nil) })
}

// A panic while a ModelInfer call is handled ends that call with INTERNAL;
// the calls beside it are answered, and the door serves on.
func TestHandlerPanicFailsOnlyItsCall(t *testing.T) {
	r := newRig(t, rigOptions{})
	setHandleHook(t, func(_ string, msg []byte) {
		if bytes.Contains(msg, []byte("panic-me")) {
			panic("injected gRPC handler panic")
		}
	})
	before := guard.Count("grpc")
	const n = 24
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprint("ok-", i)
			if i%3 == 0 {
				id = "panic-me"
			}
			resp, err := r.client.ModelInfer(context.Background(), simpleRaw(id, []int32{int32(i)}, []int32{1}))
			if err == nil && len(resp.RawOutputContents) == 0 {
				err = fmt.Errorf("no output")
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%3 == 0 {
			if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "injected gRPC handler panic") {
				t.Fatalf("panicking call: %v, want INTERNAL naming the panic", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("call %d beside the panics: %v", i, err)
		}
	}
	if got := guard.Count("grpc") - before; got != n/3 {
		t.Fatalf("counted %d panics, want %d", got, n/3)
	}
}

// A panic in the goroutine relaying a stream's client messages ends that
// stream with INTERNAL and no other.
func TestRelayPanicFailsOnlyItsStream(t *testing.T) {
	r := newRig(t, rigOptions{})
	setHandleHook(t, func(method string, msg []byte) {
		if bytes.Contains(msg, []byte("panic-relay")) {
			panic("injected relay panic")
		}
	})
	before := guard.Count("grpc_relay")
	open := func() grpc.ClientStream {
		st, err := r.cc.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
			"/inference.GRPCInferenceService/ModelStreamInfer", grpc.ForceCodecV2(grpcwire.Codec{}))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	good, bad := open(), open()
	if err := bad.SendMsg(&grpcwire.Frame{B: []byte("panic-relay")}); err != nil {
		t.Fatal(err)
	}
	if err := bad.RecvMsg(&grpcwire.Frame{}); status.Code(err) != codes.Internal {
		t.Fatalf("stream whose relay panicked: %v, want INTERNAL", err)
	}
	if err := good.SendMsg(&grpcwire.Frame{B: []byte("fine")}); err != nil {
		t.Fatal(err)
	}
	var f grpcwire.Frame
	if err := good.RecvMsg(&f); err != nil || string(f.B) != "fine" {
		t.Fatalf("stream beside it: %q, %v", f.B, err)
	}
	good.CloseSend()
	if got := guard.Count("grpc_relay") - before; got != 1 {
		t.Fatalf("counted %d relay panics, want 1", got)
	}
}
