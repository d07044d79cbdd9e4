package grpcproxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/kserve"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

// instantBatcher batches "simple" and answers each call with its own
// inputs, at once, without a queue.
type instantBatcher struct{}

func (instantBatcher) Model(name string) (int, bool) { return 8, name == "simple" }
func (instantBatcher) Delivered(dispatcher.Result)   {}
func (instantBatcher) Submit(_ context.Context, _ string, c *dispatcher.Call) dispatcher.Result {
	if err := c.Req.DecodeData(); err != nil {
		return dispatcher.Result{Err: err}
	}
	resp := &kserve.Response{ModelName: "simple", ID: c.Req.ID}
	for _, in := range c.Req.Inputs {
		out := in
		out.Parameters = nil
		resp.Outputs = append(resp.Outputs, out)
	}
	return dispatcher.Result{Resp: resp}
}

// downUpstream is a Triton gRPC port that is not there: every relayed call
// fails at once with UNAVAILABLE.
type downUpstream struct{}

func (downUpstream) Invoke(context.Context, string, any, any, ...grpc.CallOption) error {
	return status.Error(codes.Unavailable, "upstream down")
}
func (downUpstream) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	return nil, status.Error(codes.Unavailable, "upstream down")
}

// wireDoor serves the gRPC door on loopback for the wire tests, with small
// abuse bounds so that they are reached, and a health client to it.
func wireDoor(tb testing.TB) (addr string, health healthpb.HealthClient) {
	tb.Helper()
	s := New(Options{Backend: door.Backend{Batcher: instantBatcher{}}, Upstream: downUpstream{}, MaxRecvBytes: 1 << 20,
		MaxConcurrentStreams: 8, MaxHeaderListSize: 4 << 10, ConnectionTimeout: 2 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go s.Serve(ln)
	tb.Cleanup(func() { s.srv.Stop() })
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cc.Close() })
	return ln.Addr().String(), healthpb.NewHealthClient(cc)
}

// frames writes HTTP/2 frames with the framer of x/net, for seeds.
type frames struct {
	buf bytes.Buffer
	fr  *http2.Framer
	enc *hpack.Encoder
	hb  bytes.Buffer
}

func newFrames() *frames {
	f := &frames{}
	f.fr = http2.NewFramer(&f.buf, nil)
	f.enc = hpack.NewEncoder(&f.hb)
	return f
}

func (f *frames) headers(stream uint32, path string, end bool, extra ...string) *frames {
	f.hb.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", "proxy"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		f.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	for i := 0; i+1 < len(extra); i += 2 {
		f.enc.WriteField(hpack.HeaderField{Name: extra[i], Value: extra[i+1]})
	}
	f.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: f.hb.Bytes(), EndHeaders: true, EndStream: end})
	return f
}

// message writes one gRPC message (uncompressed) as a DATA frame.
func (f *frames) message(stream uint32, msg []byte, end bool) *frames {
	b := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	f.fr.WriteData(stream, end, append(b, msg...))
	return f
}

func (f *frames) bytes() []byte { return append([]byte(nil), f.buf.Bytes()...) }

// exchangeRaw writes the client preface, a SETTINGS frame and raw on a new
// connection, half-closes it and reads until the door closes it. It fails
// when the door does not close within 5 s.
func exchangeRaw(t *testing.T, addr string, raw []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetLinger(0)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		var pre bytes.Buffer
		pre.WriteString(http2.ClientPreface)
		http2.NewFramer(&pre, nil).WriteSettings()
		c.Write(pre.Bytes())
		c.Write(raw)
		c.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the door kept a half-closed connection open 5 s after %d bytes of frames", len(raw))
	}
	return got
}

func inferMessage(tb testing.TB) []byte {
	b, err := proto.Marshal(simpleRaw("w", []int32{1, 2}, []int32{3, 4}))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// FuzzGRPCWire feeds the gRPC door arbitrary and mutated HTTP/2 frames
// after a valid preface: calls of each kind (batched ModelInfer, relayed,
// health), resets, pings, window updates, oversized and malformed ones.
// Whatever comes in, no handler may panic (a recovered panic counts as a
// failure), the door must close the half-closed connection, and it must
// go on answering its health check.
func FuzzGRPCWire(f *testing.F) {
	msg := inferMessage(f)
	f.Add(newFrames().headers(1, MethodModelInfer, false).message(1, msg, true).bytes())
	f.Add(newFrames().headers(1, "/inference.GRPCInferenceService/ModelMetadata", false).message(1, []byte("\x0a\x06simple"), true).bytes())
	f.Add(newFrames().headers(1, "/grpc.health.v1.Health/Check", false).message(1, nil, true).bytes())
	rr := newFrames()
	for i := uint32(1); i < 40; i += 2 {
		rr.headers(i, MethodModelInfer, false)
		rr.fr.WriteRSTStream(i, http2.ErrCodeCancel)
	}
	f.Add(rr.bytes())
	odd := newFrames().headers(1, MethodModelInfer, false, "x-big", string(bytes.Repeat([]byte("m"), 8<<10)))
	odd.fr.WritePing(false, [8]byte{1})
	odd.fr.WriteWindowUpdate(0, 1<<30)
	odd.message(1, msg[:len(msg)/2], false)
	f.Add(odd.bytes())
	f.Add([]byte{0, 0, 4, 1, 5, 0, 0, 0, 1, 0x83, 0x86, 0x84, 0x41}) // a truncated HEADERS

	addr, health := wireDoor(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		before := guard.Count("grpc") + guard.Count("grpc_relay")
		exchangeRaw(t, addr, raw)
		if n := guard.Count("grpc") + guard.Count("grpc_relay"); n != before {
			t.Fatalf("a handler panicked (%d recovered)", n-before)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if resp, err := health.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("the door stopped answering its health check: %v %v", resp, err)
		}
	})
}

// A flood of streams each opened and reset at once (HTTP/2 rapid reset)
// costs the door at most MaxConcurrentStreams calls at a time and leaves it
// serving.
func TestRapidResetLeavesTheDoorServing(t *testing.T) {
	addr, health := wireDoor(t)
	rr := newFrames()
	for i := uint32(1); i < 4000; i += 2 {
		rr.headers(i, MethodModelInfer, false)
		rr.fr.WriteRSTStream(i, http2.ErrCodeCancel)
	}
	exchangeRaw(t, addr, rr.bytes())
	if resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after a rapid reset flood: %v %v", resp, err)
	}
}

// Metadata past MaxHeaderListSize is refused; the door serves on.
func TestOversizedMetadataIsRefused(t *testing.T) {
	addr, health := wireDoor(t)
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	big := string(bytes.Repeat([]byte("m"), 8<<10))
	err = cc.Invoke(metadataCtx(ctx, "x-big", big), MethodModelInfer, simpleRaw("m", []int32{1}, []int32{2}), new(pb.ModelInferResponse))
	if err == nil {
		t.Fatal("8 KiB of metadata accepted with MaxHeaderListSize 4 KiB")
	}
	if resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after oversized metadata: %v %v", resp, err)
	}
}

// The door's first SETTINGS frame carries its bounds: clients keep to
// MAX_CONCURRENT_STREAMS and MAX_HEADER_LIST_SIZE, and grpc-go refuses
// streams and header lists past them.
func TestDoorAdvertisesItsBounds(t *testing.T) {
	addr, _ := wireDoor(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	fr.WriteSettings()
	got := map[http2.SettingID]uint32{}
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := frame.(*http2.SettingsFrame); ok && !sf.IsAck() {
			sf.ForeachSetting(func(s http2.Setting) error { got[s.ID] = s.Val; return nil })
			break
		}
	}
	if got[http2.SettingMaxConcurrentStreams] != 8 || got[http2.SettingMaxHeaderListSize] != 4<<10 {
		t.Fatalf("settings %v, want MAX_CONCURRENT_STREAMS 8 and MAX_HEADER_LIST_SIZE 4096", got)
	}
}

func metadataCtx(ctx context.Context, kv ...string) context.Context {
	return metadata.NewOutgoingContext(ctx, metadata.Pairs(kv...))
}
