// Package grpcproxy is ratebatch's second front door: Triton's gRPC service
// (inference.GRPCInferenceService, the KServe v2 gRPC protocol). ModelInfer
// calls of batched models go to the same dispatcher queues as the HTTP
// door's, so callers of both doors share batches; every other call, and
// ModelInfer of models the proxy does not batch, is relayed to Triton's
// gRPC port as raw bytes, message by message, so that metadata, config,
// statistics, repository, shared memory, trace and log calls, the
// ModelStreamInfer stream of decoupled models and any method a newer Triton
// adds answer exactly as Triton does.
package grpcproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // clients may compress, as with Triton
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/rawconn"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
	"github.com/ratebatch/ratebatch/tracing"
)

// The readiness methods the door answers itself while the upstream fails.
const (
	methodServerReady = "/inference.GRPCInferenceService/ServerReady"
	methodModelReady  = "/inference.GRPCInferenceService/ModelReady"

	methodRepositoryModelLoad   = "/inference.GRPCInferenceService/RepositoryModelLoad"
	methodRepositoryModelUnload = "/inference.GRPCInferenceService/RepositoryModelUnload"
)

// MethodModelInfer is the one method the door reads.
const MethodModelInfer = "/inference.GRPCInferenceService/ModelInfer"

// Options configure a Server.
type Options struct {
	// Backend is what the door shares with the HTTP door: the queues, the
	// memory budget (limits.memory: a new call is refused with
	// RESOURCE_EXHAUSTED, before its message is read, while the budget is
	// spent, and a ModelInfer message is held against it until the call
	// ends), readiness, tracing and metrics. Without a Batcher every call
	// is relayed.
	Backend door.Backend
	// Upstream reaches Triton's gRPC port (see Dial).
	Upstream grpc.ClientConnInterface
	// MaxRecvBytes bounds a received message, decompressed (RESOURCE_EXHAUSTED
	// past it). Zero: Triton's own limit, 2 GiB - 1.
	MaxRecvBytes int
	// Keepalive of client connections; zero fields take Triton's defaults
	// (ping an idle connection after 2 h, drop it 20 s after an unanswered
	// ping, refuse client pings more often than every 5 minutes).
	KeepaliveTime, KeepaliveTimeout, KeepaliveMinPing time.Duration
	// Abuse bounds of client connections; zero fields take the defaults
	// below. MaxConcurrentStreams bounds the calls one connection runs at
	// once, and with them grpc-go's answer to HTTP/2 rapid reset
	// (CVE-2023-44487): a stream reset at once still holds its slot until
	// its handler returns, so a flood of HEADERS+RST_STREAM is served no
	// faster than that many at a time. MaxHeaderListSize bounds a call's
	// metadata (RESOURCE_EXHAUSTED past it); ConnectionTimeout the time a
	// new connection has to send its preface and settings.
	MaxConcurrentStreams uint32
	MaxHeaderListSize    uint32
	ConnectionTimeout    time.Duration
	// Ready reports whether the proxy serves, for grpc.health.v1; nil: always.
	Ready  func() bool
	Logger *slog.Logger

	// LoadReport, when set, is the proxy's ORCA load report (package
	// orca): sent in the endpoint-load-metrics-bin trailer of every
	// Triton call, and on the xds.service.orca.v3.OpenRcaService stream,
	// at most every 30 s or as the client asks (grpc-go's minimum).
	LoadReport orca.ServerMetricsProvider

	// TLS, when set, is the door's TLS (tls.cert, tls.client_ca); nil:
	// plain text.
	TLS *tls.Config
}

// The door's abuse bounds by default (Options). Triton's clients open a
// few connections and multiplex their calls; 1024 calls at once on one
// connection is far above what a batch of them needs (the queue bounds
// rows anyway) and far below grpc-go's own default, unlimited. Metadata is
// bounded as the HTTP door bounds headers.
const (
	defaultMaxConcurrentStreams = 1024
	defaultMaxHeaderListSize    = 16 << 10
	defaultConnectionTimeout    = 10 * time.Second
)

// Triton's gRPC defaults (its --grpc-keepalive-* options).
const (
	tritonMaxMessage       = math.MaxInt32
	tritonKeepaliveTime    = 2 * time.Hour
	tritonKeepaliveTimeout = 20 * time.Second
	tritonMinPing          = 5 * time.Minute
)

// Server serves Triton's gRPC API.
type Server struct {
	o       Options
	door    *door.Door
	srv     *grpc.Server
	log     *slog.Logger
	closing atomic.Bool
}

// New returns the gRPC front door.
func New(o Options) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxRecvBytes <= 0 {
		o.MaxRecvBytes = tritonMaxMessage
	}
	ka := keepalive.ServerParameters{Time: o.KeepaliveTime, Timeout: o.KeepaliveTimeout}
	if ka.Time <= 0 {
		ka.Time = tritonKeepaliveTime
	}
	if ka.Timeout <= 0 {
		ka.Timeout = tritonKeepaliveTimeout
	}
	minPing := o.KeepaliveMinPing
	if minPing <= 0 {
		minPing = tritonMinPing
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = defaultMaxConcurrentStreams
	}
	if o.MaxHeaderListSize == 0 {
		o.MaxHeaderListSize = defaultMaxHeaderListSize
	}
	if o.ConnectionTimeout <= 0 {
		o.ConnectionTimeout = defaultConnectionTimeout
	}
	s := &Server{o: o, door: door.New(o.Backend, door.GRPC), log: o.Logger}
	// grpc-go recovers no handler's panic: one would end the process. The
	// recovering interceptors come first, so that they are the outermost.
	opts := []grpc.ServerOption{grpc.InTapHandle(s.tap), grpc.ChainUnaryInterceptor(s.recoverUnary), grpc.ChainStreamInterceptor(s.recoverStream)}
	if o.LoadReport != nil {
		opts = append(opts, orca.CallMetricsServerOption(o.LoadReport))
	}
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	s.srv = grpc.NewServer(append(opts,
		grpc.ForceServerCodecV2(grpcwire.Codec{}),
		grpc.UnknownServiceHandler(s.handle),
		grpc.MaxRecvMsgSize(o.MaxRecvBytes),
		grpc.MaxSendMsgSize(tritonMaxMessage),
		grpc.KeepaliveParams(ka),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minPing}),
		grpc.MaxConcurrentStreams(o.MaxConcurrentStreams),
		grpc.MaxHeaderListSize(o.MaxHeaderListSize),
		grpc.ConnectionTimeout(o.ConnectionTimeout),
		// Calls run on a few long-lived workers instead of a new goroutine
		// each, whose stack grew anew for every call (runtime.newstack in
		// a relayed ModelInfer's profile, BenchmarkRelay).
		grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
	)...)
	healthpb.RegisterHealthServer(s.srv, &health{s: s})
	if o.LoadReport != nil {
		// Fails only without a provider, which was checked.
		_ = orca.Register(s.srv, orca.ServiceOptions{ServerMetricsProvider: o.LoadReport})
	}
	return s
}

// Dial returns the pass-through client of Triton's gRPC port at addr
// (host:port). Messages of any size Triton accepts go through. Its
// connections make raw reads and writes (package rawconn); dialing them
// ourselves also means no HTTPS_PROXY from the environment, which has no
// place between the proxy and the Triton beside it.
func Dial(addr string) (*grpc.ClientConn, error) { return DialTLS(addr, nil) }

// DialTLS is Dial speaking TLS with tc (nil: plain text), for a Triton
// started with --grpc-use-ssl.
func DialTLS(addr string, tc *tls.Config) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if tc != nil {
		creds = credentials.NewTLS(tc)
	}
	cc, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(dialRaw),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(grpcwire.Codec{}),
			grpc.MaxCallRecvMsgSize(tritonMaxMessage), grpc.MaxCallSendMsgSize(tritonMaxMessage)))
	if err != nil {
		return nil, fmt.Errorf("upstream gRPC %s: %w", addr, err)
	}
	return cc, nil
}

func dialRaw(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return rawconn.Wrap(c), nil
}

// Serve serves on ln until Shutdown; its connections make raw reads and
// writes (package rawconn).
func (s *Server) Serve(ln net.Listener) error {
	if err := s.srv.Serve(rawconn.Listener{Listener: ln}); !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Shutdown stops accepting, reports NOT_SERVING, lets calls in progress
// finish and closes the connections, or cuts them when ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closing.Store(true)
	done := make(chan struct{})
	go func() { s.srv.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.srv.Stop()
		<-done
		return fmt.Errorf("grpc: %w", ctx.Err())
	}
}

// tap refuses a new call while the memory budget is spent: grpc-go reads
// a whole message before the handler sees it, so the budget is kept here,
// before the first byte of it is read, with the exact size checked once
// it is in (modelInfer). The health service is never refused.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	b := s.door.Memory
	if b != nil && b.Used() >= b.Limit() && !strings.HasPrefix(info.FullMethodName, "/grpc.health.v1.") {
		return ctx, s.refuse("", &door.Refusal{Reason: "memory_spent",
			Msg: fmt.Sprintf("the proxy's memory budget (%d bytes) is spent; retry later", b.Limit())})
	}
	return ctx, nil
}

// recoverUnary contains a panic of a unary handler (the health check):
// its call ends with INTERNAL, the others are served on.
func (s *Server) recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = status.Error(codes.Internal, guard.Recovered(s.log, "grpc", v).Error())
		}
	}()
	return h(ctx, req)
}

// recoverStream contains a panic of a stream handler, which every
// inference and relayed call is (the door serves them as streams of an
// unknown service): the call ends with INTERNAL, the others are served on.
// A call queued in the dispatcher is answered before Submit returns, the
// dispatcher containing its own panics, so none is left behind. The call
// runs under answerDeadline (called here: a second interceptor in grpc-go's
// chain would cost a closure per call).
func (s *Server) recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = status.Error(codes.Internal, guard.Recovered(s.log, "grpc", v).Error())
			s.door.Failed("", codes.Internal.String())
		}
	}()
	return s.answerDeadline(srv, ss, h)
}

// testHookHandle, set only by tests, runs as each call is handled, with
// its method and, for ModelInfer of a batched model, the model: tests make
// it panic. An atomic pointer: tests set it while the server runs.
var testHookHandle atomic.Pointer[func(method string, msg []byte)]

// handle serves every call of a service the server does not declare: all
// of Triton's, read (ModelInfer) or relayed (the rest).
func (s *Server) handle(_ any, ss grpc.ServerStream) error {
	if s.o.LoadReport != nil {
		orca.CallMetricsRecorderFromContext(ss.Context()) // asks for the trailer
	}
	method, _ := grpc.MethodFromServerStream(ss)
	if method == MethodModelInfer && s.door.Batcher != nil {
		return s.modelInfer(ss)
	}
	if s.door.Health != nil && (method == methodServerReady || method == methodModelReady) {
		return s.ready(ss, method)
	}
	if method == methodRepositoryModelLoad || method == methodRepositoryModelUnload {
		return s.repositoryChange(ss, method)
	}
	return s.forward(ss, method, nil)
}

// repositoryChange relays a repository load or unload and, once Triton
// has answered it, tells the doors that the model it names may have
// changed (door.Door.RepositoryChanged), as the HTTP door does.
func (s *Server) repositoryChange(ss grpc.ServerStream, method string) error {
	in := &grpcwire.Frame{}
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	// model_name is field 2 of RepositoryModelLoadRequest and of
	// RepositoryModelUnloadRequest.
	if model, err := stringField(in.B, 2); err == nil {
		defer s.door.RepositoryChanged(model)
	}
	return s.forwardUnary(ss, method, in)
}

// ready answers ServerReady (ModelReady) with ready false while the
// doors' verdict on the upstream (the model) is not ready, and relays it
// otherwise, so that Triton's own answer stands when the proxy has
// nothing to add.
func (s *Server) ready(ss grpc.ServerStream, method string) error {
	in := &grpcwire.Frame{}
	if err := ss.RecvMsg(in); err != nil {
		return err
	}
	var why string
	if method == methodModelReady {
		var m pb.ModelReadyRequest
		if err := proto.Unmarshal(in.B, &m); err != nil {
			return status.Errorf(codes.InvalidArgument, "malformed ModelReadyRequest: %v", err)
		}
		why = s.door.ModelUnready(m.GetName())
	} else {
		why = s.door.Unready()
	}
	if why == "" {
		return s.forwardUnary(ss, method, in)
	}
	if method == methodModelReady {
		return ss.SendMsg(&pb.ModelReadyResponse{Ready: false})
	}
	return ss.SendMsg(&pb.ServerReadyResponse{Ready: false})
}

// modelInfer serves a ModelInfer call: a batched model's by the doors'
// call path (door.Door: admitted, its call queued for a batch, its answer
// written), as the HTTP door's infer; any other relayed.
func (s *Server) modelInfer(ss grpc.ServerStream) error {
	var a door.Admission
	s.door.Admit(&a, "", time.Now())
	defer a.Release()
	in, err := s.admit(ss, &a)
	if err != nil {
		return err
	}
	if !s.door.Batches(a.Model) {
		return s.forwardUnary(ss, MethodModelInfer, in)
	}
	batchable, err := s.read(ss.Context(), in, &a)
	switch {
	case !batchable: // shared memory, sequences, ...: Triton handles those itself
		s.door.PassedWhole(a.Model)
		return s.forwardUnary(ss, MethodModelInfer, in)
	case err != nil:
		return s.fail(a.Model, err)
	}
	s.trace(ss.Context(), &a)
	res := a.Submit(ss.Context())
	return s.reply(ss, &res, &a)
}

// admit receives a ModelInfer message, holds its bytes against the memory
// budget until the call ends, and reads the model it names (a.Model)
// without decoding the rest: a call that is only relayed is never decoded.
func (s *Server) admit(ss grpc.ServerStream, a *door.Admission) (*grpcwire.Frame, error) {
	in := &grpcwire.Frame{}
	if err := ss.RecvMsg(in); err != nil {
		return nil, err
	}
	if !a.Hold.Grow(int64(len(in.B))) {
		return nil, s.refuse("", door.NoRoom("memory_declared", s.door.Memory.Limit(), int64(len(in.B))))
	}
	if hook := testHookHandle.Load(); hook != nil {
		(*hook)(MethodModelInfer, in.B)
	}
	model, err := modelName(in.B)
	if err != nil {
		return nil, s.fail("", malformed(err))
	}
	a.Model = model
	return in, nil
}

// read decodes a ModelInfer message into its call for the dispatcher
// (a.Call); not batchable: the call is Triton's to handle.
func (s *Server) read(ctx context.Context, in *grpcwire.Frame, a *door.Admission) (batchable bool, err error) {
	m := &pb.ModelInferRequest{}
	if err := proto.Unmarshal(in.B, m); err != nil {
		return true, malformed(err)
	}
	req, err := grpcwire.ToRequest(m)
	if err != nil {
		return true, err
	}
	call, batchable, err := dispatcher.NewCall(req, m.GetModelVersion(), a.Start)
	if !batchable || err != nil {
		return batchable, err
	}
	if p, ok := peer.FromContext(ctx); ok {
		call.Source = door.GRPCSource(p.Addr)
	}
	a.Call = call
	a.Forward(func(name string) []byte { return metadataValue(ctx, name) }, func(f func(name, value []byte)) { eachMetadata(ctx, f) })
	return true, nil
}

// metadataValue is the first value of the call's metadata key (lower
// case), nil when it has none.
func metadataValue(ctx context.Context, key string) []byte {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return []byte(v[0])
	}
	return nil
}

// eachMetadata calls f with each key of the call's metadata and its first
// value.
func eachMetadata(ctx context.Context, f func(name, value []byte)) {
	md, _ := metadata.FromIncomingContext(ctx)
	for k, v := range md {
		if len(v) > 0 {
			f([]byte(k), []byte(v[0]))
		}
	}
}

// trace starts the call's span in the trace its metadata names, when the
// door traces.
func (s *Server) trace(ctx context.Context, a *door.Admission) {
	if s.door.Tracing() {
		md, _ := metadata.FromIncomingContext(ctx)
		a.Trace(tracing.MetadataCarrier(md))
	}
}

// malformed is the error of a ModelInfer message that does not decode:
// INVALID_ARGUMENT, as Triton answers it.
func malformed(err error) error {
	return &kserve.Error{Status: http.StatusBadRequest, Msg: "malformed ModelInferRequest: " + err.Error()}
}

// reply sends a batched call's answer, or its error.
func (s *Server) reply(ss grpc.ServerStream, res *dispatcher.Result, a *door.Admission) error {
	if res.Err != nil {
		a.Span.End(door.StatusCode(res.Err), res.Err.Error())
		return s.fail(a.Model, res.Err)
	}
	err := ss.SendMsg(grpcwire.ToResponse(res.Resp)) // marshals before it returns
	a.Answered(res, 0)
	a.Span.End(http.StatusOK, "")
	if err != nil {
		s.log.Debug("writing gRPC response", "model", a.Model, "err", err)
	}
	return err
}

// fail answers a batched call's error with the status Triton would give
// (door.GRPCStatus).
func (s *Server) fail(model string, err error) error {
	st := door.GRPCStatus(err)
	s.door.Failed(model, st.Code().String())
	return st.Err()
}

// refuse answers a call the proxy refuses for now (RESOURCE_EXHAUSTED),
// counted by its reason.
func (s *Server) refuse(model string, r *door.Refusal) error {
	s.door.Refused(r.Reason)
	return s.fail(model, r)
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
// trailers and status. first, when set, is a message already read.
func (s *Server) forward(ss grpc.ServerStream, method string, first *grpcwire.Frame) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	ctx = outgoing(ctx)
	cs, err := s.o.Upstream.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		s.passed(true)
		return err
	}
	// Client to upstream.
	var relayPanic atomic.Pointer[error] // the relay's panic, the call's status
	go func() {
		defer func() { // this goroutine's panic would end the process
			if v := recover(); v != nil {
				err := status.Error(codes.Internal, guard.Recovered(s.log, "grpc_relay", v).Error())
				relayPanic.Store(&err)
				cancel() // the upstream call ends, and with it the client's
			}
		}()
		if first != nil {
			if cs.SendMsg(first) != nil {
				return // the upstream's status comes from RecvMsg below
			}
		}
		for {
			f := &grpcwire.Frame{}
			err := ss.RecvMsg(f)
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
			if cs.SendMsg(f) != nil {
				return
			}
		}
	}()
	// Upstream to client.
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
			if p := relayPanic.Load(); p != nil {
				s.passed(true)
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
		if err := ss.SendMsg(f); err != nil {
			return err
		}
	}
}

// forwardUnary relays a unary call whose one message is already read
// (ModelInfer of a model the proxy does not batch) as one upstream call:
// no stream and no goroutine of its own, which is what a relayed
// ModelInfer costs most. Headers, trailers and status are the upstream's.
func (s *Server) forwardUnary(ss grpc.ServerStream, method string, in *grpcwire.Frame) error {
	var header, trailer metadata.MD
	out := &grpcwire.Frame{}
	err := s.o.Upstream.Invoke(outgoing(ss.Context()), method, in, out, grpc.Header(&header), grpc.Trailer(&trailer))
	ss.SetTrailer(trailer)
	if err != nil {
		s.passed(status.Code(err) == codes.Unavailable)
		return err
	}
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

// modelName reads a ModelInferRequest's model_name (field 1) without
// decoding the rest.
func modelName(b []byte) (string, error) { return stringField(b, 1) }

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

// health answers grpc.health.v1 for the proxy itself: SERVING once it has
// read the upstream's models (as /readyz), NOT_SERVING while it shuts down.
type health struct {
	healthpb.UnimplementedHealthServer
	s *Server
}

// services the health check knows: the whole server and Triton's service.
func knownService(name string) bool {
	return name == "" || name == "inference.GRPCInferenceService"
}

func (h *health) state() healthpb.HealthCheckResponse_ServingStatus {
	if h.s.closing.Load() || (h.s.o.Ready != nil && !h.s.o.Ready()) {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

func (h *health) Check(_ context.Context, r *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !knownService(r.GetService()) {
		return nil, status.Errorf(codes.NotFound, "unknown service %q", r.GetService())
	}
	return &healthpb.HealthCheckResponse{Status: h.state()}, nil
}

// Watch sends the status, then every change of it (checked each second).
func (h *health) Watch(r *healthpb.HealthCheckRequest, w grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	last := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		st := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		if knownService(r.GetService()) {
			st = h.state()
		}
		if st != last {
			if err := w.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-w.Context().Done():
			return status.FromContextError(w.Context().Err()).Err()
		case <-tick.C:
		}
	}
}
