package grpcproxy

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
	"github.com/ratebatch/ratebatch/policy"
)

// addSub is Triton's `simple` model behind the dispatcher's HTTP upstream:
// OUTPUT0 = INPUT0+INPUT1, OUTPUT1 = INPUT0-INPUT1 (INT32).
type addSub struct {
	mu      sync.Mutex
	batches []int
	outs    []dispatcher.Outgoing // what each request carried besides its body
}

func (u *addSub) Infer(_ context.Context, model, version string, batch dispatcher.Body, o dispatcher.Outgoing) (*dispatcher.Reply, error) {
	u.mu.Lock()
	u.outs = append(u.outs, o)
	u.mu.Unlock()
	body, err := io.ReadAll(batch.Reader())
	if err != nil {
		return nil, err
	}
	req, err := kserve.DecodeRequest(body, batch.HeaderLen())
	if err != nil {
		return nil, err
	}
	a, _ := req.Inputs[0].Int32s()
	b, _ := req.Inputs[1].Int32s()
	u.mu.Lock()
	u.batches = append(u.batches, int(req.Inputs[0].Shape[0]))
	u.mu.Unlock()
	sum, diff := make([]int32, len(a)), make([]int32, len(a))
	for i := range a {
		sum[i], diff[i] = a[i]+b[i], a[i]-b[i]
	}
	o0, _ := kserve.NewTensor("OUTPUT0", req.Inputs[0].Shape, sum)
	o1, _ := kserve.NewTensor("OUTPUT1", req.Inputs[0].Shape, diff)
	o0.Binary, o1.Binary = true, true
	out, hl, err := kserve.AppendResponse(nil, &kserve.Response{ModelName: model, ModelVersion: "1", Outputs: []kserve.Tensor{o0, o1}})
	if err != nil {
		return nil, err
	}
	return &dispatcher.Reply{Status: 200, Body: out, HeaderLen: hl, Free: func() {}}, nil
}

func (u *addSub) seen() []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]int(nil), u.batches...)
}

// waitFor sends a batch once rows rows wait, and never otherwise: a test
// decides exactly which callers share a batch.
type waitFor int

func (w waitFor) Decide(q policy.Queue) policy.Decision {
	if q.Rows >= int(w) {
		return policy.Decision{Rows: q.Rows}
	}
	return policy.Decision{}
}
func (w waitFor) Status() policy.Status { return policy.Status{} }

type planner struct{ rule policy.Rule }

func (p planner) Rule() policy.Rule        { return p.rule }
func (p planner) Changed() <-chan struct{} { return nil }

// fakeTriton stands for Triton's gRPC port: it answers relayed calls from
// the raw bytes it got, so a test sees exactly what went through.
type fakeTriton struct {
	calls    atomic.Int32
	md       atomic.Value // metadata.MD of the last call
	deadline atomic.Value // time.Time: the last call's deadline, zero if none
	infer    atomic.Value // []byte: the last relayed ModelInfer message, as it came
}

var metadataAnswer = []byte("\x0a\x06simple\x12\x011") // a ModelMetadataResponse: name, versions

func (f *fakeTriton) handle(_ any, ss grpc.ServerStream) error {
	f.calls.Add(1)
	method, _ := grpc.MethodFromServerStream(ss)
	md, _ := metadata.FromIncomingContext(ss.Context())
	f.md.Store(md)
	d, _ := ss.Context().Deadline()
	f.deadline.Store(d)
	switch method {
	case "/inference.GRPCInferenceService/ModelMetadata":
		var in grpcwire.Frame
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		ss.SetHeader(metadata.Pairs("x-triton", "header"))
		ss.SetTrailer(metadata.Pairs("x-triton-trailer", "trailer"))
		return ss.SendMsg(&grpcwire.Frame{B: metadataAnswer})
	case "/inference.GRPCInferenceService/ModelInfer": // an unbatched model
		var in grpcwire.Frame
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		f.infer.Store(in.B)
		var req pb.ModelInferRequest
		if err := proto.Unmarshal(in.B, &req); err != nil {
			return err
		}
		if req.ModelName == "refused" {
			ss.SetTrailer(metadata.Pairs("x-triton-trailer", "refused"))
			return status.Error(codes.InvalidArgument, "triton refuses it")
		}
		ss.SetHeader(metadata.Pairs("x-triton", "infer-header"))
		ss.SetTrailer(metadata.Pairs("x-triton-trailer", "infer-trailer"))
		return ss.SendMsg(&pb.ModelInferResponse{ModelName: req.ModelName, Id: "from-triton"})
	case "/inference.GRPCInferenceService/ModelStreamInfer": // decoupled: two answers per request
		for {
			var in grpcwire.Frame
			if err := ss.RecvMsg(&in); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			for range 2 {
				if err := ss.SendMsg(&in); err != nil {
					return err
				}
			}
		}
	case "/inference.GRPCInferenceService/ServerLive":
		return status.Error(codes.Unavailable, "triton is starting")
	}
	var in grpcwire.Frame // any other method: echo
	if err := ss.RecvMsg(&in); err != nil {
		return err
	}
	return ss.SendMsg(&in)
}

type rig struct {
	addr       string // the door's
	tritonAddr string
	up         *addSub
	triton     *fakeTriton
	disp       *dispatcher.Dispatcher
	srv        *Server
	cc         *grpc.ClientConn
	client     pb.GRPCInferenceServiceClient
	ready      atomic.Bool
}

type rigOptions struct {
	rule       policy.Rule
	queueRows  int
	maxRecv    int
	loadReport orca.ServerMetricsProvider
	memory     *membudget.Budget
	forward    *door.Forwarding
	discoverer door.Discoverer
	conns      *door.Conns
	idle       time.Duration
	lead       time.Duration // the door's deadline lead; zero: the product's
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	r := &rig{up: &addSub{}, triton: &fakeTriton{}}
	r.ready.Store(true)
	// Triton's gRPC port.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.tritonAddr = tl.Addr().String()
	ts := grpc.NewServer(grpc.ForceServerCodecV2(grpcwire.Codec{}), grpc.UnknownServiceHandler(r.triton.handle))
	go ts.Serve(tl)
	t.Cleanup(ts.Stop)
	up, err := Dial(tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })

	if o.rule == nil {
		o.rule = waitFor(1)
	}
	if o.queueRows == 0 {
		o.queueRows = 64
	}
	r.disp = dispatcher.New(dispatcher.Options{Upstream: r.up})
	if err := r.disp.SetModel(dispatcher.ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: o.queueRows, Planner: planner{o.rule}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r.disp.Drain(ctx)
	})
	r.srv = New(Options{Backend: door.Backend{Batcher: r.disp, Memory: o.memory, Forward: o.forward, Discoverer: o.discoverer, Conns: o.conns},
		Upstream: up, MaxRecvBytes: o.maxRecv, Ready: r.ready.Load, LoadReport: o.loadReport, IdleTimeout: o.idle, deadlineLead: o.lead})
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go r.srv.Serve(pl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r.srv.Shutdown(ctx)
	})
	r.addr = pl.Addr().String()
	r.cc, err = grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cc.Close() })
	r.client = pb.NewGRPCInferenceServiceClient(r.cc)
	return r
}

func ints(vs ...int32) []byte {
	b := make([]byte, 0, 4*len(vs))
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

func fromInts(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// simpleRaw is a one-row request of the simple model in the raw form.
func simpleRaw(id string, a, b []int32) *pb.ModelInferRequest {
	shape := []int64{1, int64(len(a))}
	return &pb.ModelInferRequest{
		ModelName: "simple", Id: id,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: "INPUT0", Datatype: "INT32", Shape: shape},
			{Name: "INPUT1", Datatype: "INT32", Shape: shape},
		},
		RawInputContents: [][]byte{ints(a...), ints(b...)},
	}
}

func simpleTyped(id string, a, b []int32) *pb.ModelInferRequest {
	m := simpleRaw(id, a, b)
	m.RawInputContents = nil
	m.Inputs[0].Contents = &pb.InferTensorContents{IntContents: a}
	m.Inputs[1].Contents = &pb.InferTensorContents{IntContents: b}
	return m
}

func output(t *testing.T, resp *pb.ModelInferResponse, name string) []int32 {
	t.Helper()
	for i, o := range resp.GetOutputs() {
		if o.GetName() == name {
			if len(resp.GetRawOutputContents()) != len(resp.GetOutputs()) {
				t.Fatalf("%d outputs but %d raw_output_contents", len(resp.GetOutputs()), len(resp.GetRawOutputContents()))
			}
			return fromInts(resp.GetRawOutputContents()[i])
		}
	}
	t.Fatalf("no output %s in %v", name, resp)
	return nil
}

func TestCallersShareABatchAndGetTheirOwnRows(t *testing.T) {
	r := newRig(t, rigOptions{rule: waitFor(4)})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := []int32{int32(i), int32(10 * i), 7}
			b := []int32{1, 2, int32(i)}
			req := simpleRaw(fmt.Sprint("caller-", i), a, b)
			if i%2 == 1 {
				req = simpleTyped(fmt.Sprint("caller-", i), a, b) // both forms in one batch
			}
			resp, err := r.client.ModelInfer(context.Background(), req)
			if err != nil {
				errs <- fmt.Errorf("caller %d: %w", i, err)
				return
			}
			sum, diff := output(t, resp, "OUTPUT0"), output(t, resp, "OUTPUT1")
			for k := range a {
				if sum[k] != a[k]+b[k] || diff[k] != a[k]-b[k] {
					errs <- fmt.Errorf("caller %d: got sum %v diff %v for a %v b %v", i, sum, diff, a, b)
					return
				}
			}
			if resp.GetId() != fmt.Sprint("caller-", i) || resp.GetModelName() != "simple" || resp.GetModelVersion() != "1" {
				errs <- fmt.Errorf("caller %d: id %q model %q version %q", i, resp.GetId(), resp.GetModelName(), resp.GetModelVersion())
			}
			if got := resp.GetOutputs()[0].GetShape(); len(got) != 2 || got[0] != 1 || got[1] != 3 {
				errs <- fmt.Errorf("caller %d: output shape %v, want [1 3]", i, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := r.up.seen(); len(got) != 1 || got[0] != 4 {
		t.Errorf("upstream saw batches %v, want one of 4 rows", got)
	}
}

func TestRequestedOutputsAndBytes(t *testing.T) {
	r := newRig(t, rigOptions{})
	req := simpleRaw("one", []int32{5}, []int32{3})
	req.Outputs = []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: "OUTPUT1"}}
	resp, err := r.client.ModelInfer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Outputs) != 1 || resp.Outputs[0].Name != "OUTPUT1" || output(t, resp, "OUTPUT1")[0] != 2 {
		t.Errorf("asked for OUTPUT1 only, got %v", resp)
	}
}

func TestBadInputIsInvalidArgument(t *testing.T) {
	r := newRig(t, rigOptions{})
	cases := []struct {
		name string
		edit func(m *pb.ModelInferRequest)
		want string
	}{
		{"raw contents too short", func(m *pb.ModelInferRequest) { m.RawInputContents[0] = m.RawInputContents[0][:3] }, "needs 4 bytes, data has 3"},
		{"raw contents for some inputs", func(m *pb.ModelInferRequest) { m.RawInputContents = m.RawInputContents[:1] }, "unable to find data for input tensor 'INPUT1'"},
		{"unknown datatype", func(m *pb.ModelInferRequest) { m.Inputs[0].Datatype = "FP8" }, "unknown datatype 'FP8'"},
		{"huge declared shape", func(m *pb.ModelInferRequest) {
			m.Inputs[0].Shape = []int64{1, 1 << 40}
			m.Inputs[1].Shape = []int64{1, 1 << 40}
		}, "needs 4398046511104 bytes, data has 4"},
		{"overflowing shape", func(m *pb.ModelInferRequest) { m.Inputs[0].Shape = []int64{1, 1 << 40, 1 << 40} }, "too many elements"},
		{"negative dimension", func(m *pb.ModelInferRequest) { m.Inputs[0].Shape = []int64{1, -1} }, "negative dimension"},
		{"typed and raw", func(m *pb.ModelInferRequest) { m.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1}} }, "contents field must not be specified when using raw_input_contents"},
		{"typed count", func(m *pb.ModelInferRequest) {
			m.RawInputContents = nil
			m.Inputs[0].Contents = &pb.InferTensorContents{IntContents: []int32{1, 2}}
			m.Inputs[1].Contents = &pb.InferTensorContents{IntContents: []int32{1}}
		}, "needs 1 elements, int_contents has 2"},
		{"typed wrong list", func(m *pb.ModelInferRequest) {
			m.RawInputContents = nil
			m.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: []float32{1}}
		}, "int_contents has 0"},
		{"FP16 typed", func(m *pb.ModelInferRequest) {
			m.RawInputContents = nil
			m.Inputs[0].Datatype = "FP16"
		}, "FP16 has no typed contents"},
		{"BYTES length past the end", func(m *pb.ModelInferRequest) {
			m.Inputs[0].Datatype = "BYTES"
			m.RawInputContents[0] = []byte{9, 0, 0, 0}
		}, "runs past the end"},
		{"bad priority", func(m *pb.ModelInferRequest) {
			m.Parameters = map[string]*pb.InferParameter{"priority": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "high"}}}
		}, "parameter 'priority'"},
		{"rows over max batch", func(m *pb.ModelInferRequest) {
			m.Inputs[0].Shape, m.Inputs[1].Shape = []int64{9, 1}, []int64{9, 1}
			m.RawInputContents = [][]byte{make([]byte, 36), make([]byte, 36)}
		}, "batch-size must be <= 8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := simpleRaw("bad", []int32{1}, []int32{2})
			tc.edit(m)
			_, err := r.client.ModelInfer(context.Background(), m)
			if status.Code(err) != codes.InvalidArgument || !bytes.Contains([]byte(status.Convert(err).Message()), []byte(tc.want)) {
				t.Errorf("got %v, want INVALID_ARGUMENT naming %q", err, tc.want)
			}
		})
	}
	if got := r.up.seen(); len(got) != 0 {
		t.Errorf("bad requests reached the upstream: batches %v", got)
	}
	// The door still serves.
	if _, err := r.client.ModelInfer(context.Background(), simpleRaw("ok", []int32{1}, []int32{2})); err != nil {
		t.Fatalf("after bad input: %v", err)
	}
}

func TestFullQueueIsResourceExhausted(t *testing.T) {
	r := newRig(t, rigOptions{rule: waitFor(100), queueRows: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 2 { // fill the queue; they wait until cancelled
		go r.client.ModelInfer(ctx, simpleRaw("", []int32{1}, []int32{1}))
	}
	waitQueued(t, r.disp, 2)
	_, err := r.client.ModelInfer(context.Background(), simpleRaw("", []int32{1}, []int32{1}))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("third caller on a queue of 2 rows: got %v, want RESOURCE_EXHAUSTED", err)
	}
}

func waitQueued(t *testing.T, d *dispatcher.Dispatcher, rows int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := d.Snapshots()
		if len(s) == 1 && s[0].QueuedRows == rows {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue never held %d rows: %+v", rows, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDeadlineAndCancelLeaveTheQueue(t *testing.T) {
	r := newRig(t, rigOptions{rule: waitFor(100)})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := r.client.ModelInfer(ctx, simpleRaw("", []int32{1}, []int32{1}))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("queued past grpc-timeout: got %v, want DEADLINE_EXCEEDED", err)
	}
	waitQueued(t, r.disp, 0)

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, err := r.client.ModelInfer(ctx, simpleRaw("", []int32{1}, []int32{1}))
		done <- err
	}()
	waitQueued(t, r.disp, 1)
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Errorf("cancelled: got %v, want CANCELED", err)
	}
	waitQueued(t, r.disp, 0)
	if got := r.up.seen(); len(got) != 0 {
		t.Errorf("withdrawn calls reached the upstream: %v", got)
	}
}

func TestPassThrough(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-client", "42")

	// A method the proxy does not declare, raw bytes both ways, with
	// metadata, headers and trailers.
	var header, trailer metadata.MD
	var got grpcwire.Frame
	err := r.cc.Invoke(ctx, "/inference.GRPCInferenceService/ModelMetadata", &grpcwire.Frame{B: []byte("\x0a\x06simple")}, &got,
		grpc.ForceCodecV2(grpcwire.Codec{}), grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.B, metadataAnswer) {
		t.Errorf("ModelMetadata answer %q, want Triton's %q", got.B, metadataAnswer)
	}
	if header.Get("x-triton")[0] != "header" || trailer.Get("x-triton-trailer")[0] != "trailer" {
		t.Errorf("headers %v trailers %v: want Triton's", header, trailer)
	}
	if md := r.triton.md.Load().(metadata.MD); len(md.Get("x-client")) != 1 || md.Get("x-client")[0] != "42" {
		t.Errorf("Triton got metadata %v, want x-client: 42", md)
	}

	// The client's deadline goes with a relayed call.
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.cc.Invoke(dctx, "/inference.GRPCInferenceService/ModelMetadata", &grpcwire.Frame{B: []byte("x")}, &got, grpc.ForceCodecV2(grpcwire.Codec{})); err != nil {
		t.Fatal(err)
	}
	if d := r.triton.deadline.Load().(time.Time); d.IsZero() || time.Until(d) > time.Minute || time.Until(d) < 50*time.Second {
		t.Errorf("Triton saw deadline %v, want the client's, about a minute away", d)
	}

	// A method of a newer Triton.
	if err := r.cc.Invoke(ctx, "/inference.GRPCInferenceService/SomethingNew", &grpcwire.Frame{B: []byte("abc")}, &got, grpc.ForceCodecV2(grpcwire.Codec{})); err != nil || string(got.B) != "abc" {
		t.Errorf("unknown method: got %q, %v; want it relayed", got.B, err)
	}

	// Triton's error status comes back as it is.
	if _, err := r.client.ServerLive(ctx, &pb.ServerLiveRequest{}); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "triton is starting" {
		t.Errorf("ServerLive: got %v, want Triton's UNAVAILABLE", err)
	}

	// ModelInfer of a model the proxy does not batch.
	other := simpleRaw("", []int32{1}, []int32{1})
	other.ModelName = "not_batched"
	var ih, it metadata.MD
	if resp, err := r.client.ModelInfer(ctx, other, grpc.Header(&ih), grpc.Trailer(&it)); err != nil || resp.Id != "from-triton" || resp.ModelName != "not_batched" {
		t.Errorf("unbatched model: got %v, %v; want Triton's answer", resp, err)
	}
	if len(ih.Get("x-triton")) != 1 || len(it.Get("x-triton-trailer")) != 1 || it.Get("x-triton-trailer")[0] != "infer-trailer" {
		t.Errorf("unbatched model: headers %v trailers %v, want Triton's", ih, it)
	}
	if md := r.triton.md.Load().(metadata.MD); len(md.Get("x-client")) != 1 {
		t.Errorf("unbatched model: Triton got metadata %v, want x-client", md)
	}
	// Triton's refusal comes back as it is, with its trailer.
	other.ModelName = "refused"
	it = nil
	if _, err := r.client.ModelInfer(ctx, other, grpc.Trailer(&it)); status.Code(err) != codes.InvalidArgument ||
		status.Convert(err).Message() != "triton refuses it" || len(it.Get("x-triton-trailer")) != 1 {
		t.Errorf("refused by Triton: got %v with trailers %v, want its INVALID_ARGUMENT and trailer", err, it)
	}
	// A shared-memory input passes through too.
	shm := simpleRaw("", []int32{1}, []int32{1})
	shm.RawInputContents = nil
	for _, in := range shm.Inputs {
		in.Parameters = map[string]*pb.InferParameter{"shared_memory_region": {ParameterChoice: &pb.InferParameter_StringParam{StringParam: "r"}}}
	}
	if resp, err := r.client.ModelInfer(ctx, shm); err != nil || resp.Id != "from-triton" {
		t.Errorf("shared-memory input: got %v, %v; want Triton's answer", resp, err)
	}
}

func TestStreamIsRelayedMessageByMessage(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := r.cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		"/inference.GRPCInferenceService/ModelStreamInfer", grpc.ForceCodecV2(grpcwire.Codec{}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := []byte(fmt.Sprint("request ", i))
		if err := st.SendMsg(&grpcwire.Frame{B: msg}); err != nil {
			t.Fatal(err)
		}
		// Each answer arrives before the client sends the next request:
		// nothing waits for the stream's end.
		for range 2 {
			var f grpcwire.Frame
			if err := st.RecvMsg(&f); err != nil || !bytes.Equal(f.B, msg) {
				t.Fatalf("answer to %q: got %q, %v", msg, f.B, err)
			}
		}
	}
	st.CloseSend()
	if err := st.RecvMsg(&grpcwire.Frame{}); err != io.EOF {
		t.Errorf("end of stream: got %v, want EOF", err)
	}
}

func TestHealthAndLimits(t *testing.T) {
	r := newRig(t, rigOptions{maxRecv: 1 << 10})
	h := healthpb.NewHealthClient(r.cc)
	check := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		resp, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != want {
			t.Errorf("health: got %v, %v; want %v", resp, err, want)
		}
	}
	check(healthpb.HealthCheckResponse_SERVING)
	r.ready.Store(false)
	check(healthpb.HealthCheckResponse_NOT_SERVING)
	r.ready.Store(true)
	if _, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown service: got %v, want NOT_FOUND", err)
	}

	big := simpleRaw("", make([]int32, 300), make([]int32, 300))
	if _, err := r.client.ModelInfer(context.Background(), big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("message over max_body_bytes: got %v, want RESOURCE_EXHAUSTED", err)
	}
	// gzip and deflate, as tritonclient's compression_algorithm sends them.
	for _, alg := range []string{gzip.Name, "deflate"} {
		resp, err := r.client.ModelInfer(context.Background(), simpleRaw("z", []int32{4}, []int32{1}), grpc.UseCompressor(alg))
		if err != nil || output(t, resp, "OUTPUT0")[0] != 5 {
			t.Errorf("%s call: %v, %v", alg, resp, err)
		}
	}
}

// perf_analyzer sends triton_enable_empty_final_response, which only
// Triton's gRPC front end accepts: it must not reach the HTTP batch.
func TestGRPCOnlyParameterStaysBehind(t *testing.T) {
	m := simpleRaw("", []int32{1}, []int32{1})
	m.Parameters = map[string]*pb.InferParameter{
		"triton_enable_empty_final_response": {ParameterChoice: &pb.InferParameter_BoolParam{BoolParam: false}},
		"custom":                             {ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: 7}},
	}
	req, err := grpcwire.ToRequest(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := req.Parameters["triton_enable_empty_final_response"]; ok || req.Parameters["custom"] != int64(7) {
		t.Errorf("parameters %v: want custom=7 (int64) only", req.Parameters)
	}
}

// A gRPC call is tagged with its connection: calls of two connections are
// two sources, each busy with its call and no partner of the other's
// batch; a second call on one connection while its first waits makes it
// a multiplexing source, a possible partner while it has fewer calls than
// it has had at once, of unknown kind until its arrivals have been
// paired with its answers; a connection that carried one call is no
// partner yet.
func TestCallsKnowTheirConnection(t *testing.T) {
	r := newRig(t, rigOptions{rule: waitFor(3)})
	cc2, err := grpc.NewClient(r.cc.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	other := pb.NewGRPCInferenceServiceClient(cc2)
	answered := make(chan error, 3)
	send := func(c pb.GRPCInferenceServiceClient) {
		go func() {
			_, err := c.ModelInfer(context.Background(), simpleRaw("", []int32{1}, []int32{1}))
			answered <- err
		}()
	}
	send(r.client)
	send(other)
	waitQueued(t, r.disp, 2)
	if st := r.disp.Snapshots()[0].Sources; !st.Known || st.Population != 2 || st.Busy != 2 || st.Partners != 0 || st.OpenLoop != 0 {
		t.Fatalf("one call on each of two connections: sources %+v; want 2, both busy, no partner", st)
	}
	send(r.client) // the third row: the batch goes, and all three are answered
	for range 3 {
		if err := <-answered; err != nil {
			t.Fatal(err)
		}
	}
	// The multiplexing connection is two partners; the other, which has
	// carried one call, none until it sends again (it may have closed).
	if st := r.disp.Snapshots()[0].Sources; !st.Known || st.Population != 2 || st.Busy != 0 || st.Idle != 2 || st.Unknown != 2 || st.Concurrency != 3 || st.Partners != 2 {
		t.Fatalf("after two overlapping calls on one connection: sources %+v; want 2 idle, not learnt yet, 3 calls at once at most, 2 partners", st)
	}
}

// A ModelInfer of a batched model with one input in shared memory and the
// other in raw_input_contents, as tritonclient sends it: read as Triton
// reads it, then passed to Triton exactly as sent (a call in shared
// memory never batches), and Triton's answer comes back.
func TestSharedMemoryBesideRawPassesThrough(t *testing.T) {
	r := newRig(t, rigOptions{})
	sent, err := os.ReadFile("../kserve/grpcwire/testdata/tritonclient-shm-input0.bin")
	if err != nil {
		t.Fatal(err)
	}
	var out pb.ModelInferResponse
	if err := r.cc.Invoke(context.Background(), MethodModelInfer, &grpcwire.Frame{B: sent}, &out, grpc.ForceCodecV2(grpcwire.Codec{})); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if out.Id != "from-triton" {
		t.Fatalf("answer %v, want Triton's", &out)
	}
	if got, _ := r.triton.infer.Load().([]byte); !bytes.Equal(got, sent) {
		t.Fatalf("Triton got %d bytes, not the %d sent", len(got), len(sent))
	}
	if got := r.up.seen(); len(got) != 0 {
		t.Fatalf("the call was batched: %v", got)
	}
	// Triton counts it as a request of the model: so does the door.
	if n := testutil.ToFloat64(r.srv.door.Metrics.PassedWhole.WithLabelValues("simple", "grpc")); n != 1 {
		t.Fatalf("ratebatch_passthrough_inferences_total %v, want 1", n)
	}
}

// A gRPC caller's deadline bounds its batch's upstream call, as it would
// bound its call to Triton: the dispatcher sends the batch with it.
func TestDeadlineReachesTheBatch(t *testing.T) {
	r := newRig(t, rigOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	want, _ := ctx.Deadline()
	if _, err := r.client.ModelInfer(ctx, simpleRaw("d", []int32{1}, []int32{2})); err != nil {
		t.Fatal(err)
	}
	r.up.mu.Lock()
	got := r.up.outs[len(r.up.outs)-1].Until
	r.up.mu.Unlock()
	if d := got.Sub(want); got.IsZero() || d < -time.Second || d > time.Second {
		t.Fatalf("the batch's deadline %v, want the caller's %v", got, want)
	}
}

// The gRPC door gives a batched call the metadata that decides who may
// call, as the HTTP door gives its headers: callers with different
// credentials never share a batch, and each batch carries its callers'
// upstream; a merged batch carries no caller's traceparent.
func TestGRPCDoorForwardsWhoMayCall(t *testing.T) {
	fw, err := door.NewForwarding(nil, []string{"api-key"}, "")
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, rigOptions{rule: waitFor(2), forward: fw})
	var wg sync.WaitGroup
	for i := range 4 {
		who := []string{"alice", "bob"}[i%2]
		wg.Go(func() {
			ctx := metadataCtx(context.Background(), "authorization", "Bearer "+who, door.GRPCRestrictedPrefix+"api-key", who+"-key", "traceparent", fmt.Sprint("00-", i))
			if _, err := r.client.ModelInfer(ctx, simpleRaw(who, []int32{int32(i)}, []int32{1})); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	r.up.mu.Lock()
	defer r.up.mu.Unlock()
	seen := map[string]bool{}
	for i, o := range r.up.outs {
		seen[o.Header] = true
		if r.up.batches[i] != 2 || o.Trace != "" {
			t.Errorf("batch %d: %d rows, traceparent %q; want 2 rows, none", i, r.up.batches[i], o.Trace)
		}
	}
	if len(seen) != 2 || !seen["authorization\x00Bearer alice\x00api-key\x00alice-key\x00"] || !seen["authorization\x00Bearer bob\x00api-key\x00bob-key\x00"] {
		t.Fatalf("batches carried %q, want alice's and bob's apart", r.up.outs)
	}
}

// changes records the models the door told of a repository change.
type changes struct {
	mu     sync.Mutex
	models []string
}

func (c *changes) Ensure(context.Context, string) {}
func (c *changes) Changed(model string) {
	c.mu.Lock()
	c.models = append(c.models, model)
	c.mu.Unlock()
}

// TestRepositoryChangeIsTold: RepositoryModelLoad and Unload are relayed
// as they came, and once Triton has answered the door tells that the
// model they name (model_name, field 2) may have changed; other calls
// tell nothing.
func TestRepositoryChangeIsTold(t *testing.T) {
	var c changes
	r := newRig(t, rigOptions{discoverer: &c})
	ctx := context.Background()
	// repository_name "" (field 1), model_name (field 2), as tritonclient sends them.
	for _, call := range []struct{ method, model string }{{"RepositoryModelLoad", "m1"}, {"RepositoryModelUnload", "m2"}, {"ModelMetadata", "m3"}} {
		in := append([]byte{0x12, byte(len(call.model))}, call.model...)
		var got grpcwire.Frame
		if err := r.cc.Invoke(ctx, "/inference.GRPCInferenceService/"+call.method, &grpcwire.Frame{B: in}, &got, grpc.ForceCodecV2(grpcwire.Codec{})); err != nil {
			t.Fatalf("%s: %v", call.method, err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.models) != 2 || c.models[0] != "m1" || c.models[1] != "m2" {
		t.Fatalf("told of %q, want m1 (load) and m2 (unload)", c.models)
	}
}
