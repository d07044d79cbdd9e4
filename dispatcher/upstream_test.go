package dispatcher

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
)

// A port nothing listens on refuses the connection: a ConnError with Dial
// set, which marks the upstream down.
func TestHTTPUpstreamRefusedIsDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	u, err := NewHTTPUpstream("http://"+addr, 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := kserve.NewTensor("X", []int64{1}, []int32{1})
	b, err := kserve.Merge([]*kserve.Request{{Inputs: []kserve.Tensor{in}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = u.Infer("m", "", b)
	var ce *ConnError
	if !errors.As(err, &ce) || !ce.Dial {
		t.Fatalf("Infer to a closed port: %v, want a *ConnError with Dial set", err)
	}
}

func TestIsDialError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: errors.New("connect: connection refused")}, false}, // text alone does not count
		{&net.OpError{Op: "dial", Err: syscallErr("ECONNREFUSED")}, true},
		{&net.OpError{Op: "dial", Err: syscallErr("EHOSTUNREACH")}, true},
		{&net.OpError{Op: "dial", Err: syscallErr("ETIMEDOUT")}, false}, // busy, not down
		{&net.OpError{Op: "read", Err: syscallErr("ECONNRESET")}, false},
	} {
		if got := isDialError(tt.err); got != tt.want {
			t.Errorf("isDialError(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func syscallErr(name string) error {
	switch name {
	case "ECONNREFUSED":
		return syscall.ECONNREFUSED
	case "EHOSTUNREACH":
		return syscall.EHOSTUNREACH
	case "ETIMEDOUT":
		return syscall.ETIMEDOUT
	}
	return syscall.ECONNRESET
}
