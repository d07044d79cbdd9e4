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
	"github.com/ratebatch/ratebatch/internal/membudget"
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
	// IdleTimeout closes a client connection without a call for this
	// long (limits.idle_timeout, as the HTTP door's keep-alive
	// connections; grpc-go's MaxConnectionIdle); zero: never.
	IdleTimeout time.Duration
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

	// deadlineLead replaces deadlineLead, for a test that must see the
	// door's answer reach its client before the client's own timer on a
	// machine too loaded to keep the product's lead.
	deadlineLead time.Duration
}

// A call costs the process memory beside its messages while it lasts:
// its stream's state and buffers here and upstream and its goroutines
// (about 26 KiB, scripts/grpcflood.sh's streams-1 case). callCost is
// held against the memory budget from before a call's first message is
// read until it ends: a flood of streams spends the budget as it spends
// memory, and is refused (RESOURCE_EXHAUSTED) once the budget is spent
// (TestGRPCStreamFloodIsBounded). What its client sends is charged as it
// is read (recvConn). The stream's window is fixed, not grown with the
// bandwidth-delay product as grpc-go would: a grown window is more a
// stream may send ahead of its reads. A message being read opens the
// window to its length, so the window bounds only what arrives before;
// the connection's window, which grpc-go replenishes as data arrives,
// bounds no memory and is left wide.
const (
	streamWindow = 64 << 10
	connWindow   = 16 << 20
	callCost     = 32 << 10
)

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
	if o.deadlineLead <= 0 {
		o.deadlineLead = deadlineLead
	}
	ka := keepalive.ServerParameters{Time: o.KeepaliveTime, Timeout: o.KeepaliveTimeout, MaxConnectionIdle: o.IdleTimeout}
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
		grpc.InitialWindowSize(streamWindow),
		grpc.InitialConnWindowSize(connWindow),
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
// writes (package rawconn), are counted against the doors' bounds
// (door.Conns), and what they read is charged to the memory budget until
// a call takes it (recvConn).
func (s *Server) Serve(ln net.Listener) error {
	l := s.door.Conns.Listener(rawconn.Listener{Listener: ln})
	if s.door.Memory != nil {
		l = recvListener{Listener: l, b: s.door.Memory, over: int64(s.o.MaxRecvBytes)}
	}
	if err := s.srv.Serve(l); !errors.Is(err, grpc.ErrServerStopped) {
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

// tap refuses, before a stream is made: a call on a connection past the
// doors' bounds (door.Conns: RESOURCE_EXHAUSTED, and the connection
// closes); a call of a method the operator closed to clients, or opened
// only to a header it lacks (restricted_api, door.Access), as Triton
// refuses a restricted protocol (UNAVAILABLE); and a new call while the
// memory budget is spent: grpc-go reads
// a whole message before the handler sees it, so the budget is kept here,
// before the first byte of it is read, with the exact size checked once
// it is in (modelInfer). The health service is never refused.
func (s *Server) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if r := door.ConnRefused(p.Addr, time.Second); r != nil {
			return ctx, s.refuse("", r)
		}
	}
	if err := s.door.Access.GRPC(info.FullMethodName, info.Header); err != nil {
		s.door.Refused("restricted")
		s.door.Failed("", status.Code(err).String())
		return ctx, err
	}
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
	if m := meterOf(ss.Context()); m != nil {
		m.started()
		defer m.ended()
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
	return s.forward(ss, method)
}

// repositoryChange relays a repository load or unload and, once Triton
// has answered it, tells the doors that the model it names may have
// changed (door.Door.RepositoryChanged), as the HTTP door does.
func (s *Server) repositoryChange(ss grpc.ServerStream, method string) error {
	h := membudget.Hold{B: s.door.Memory}
	defer h.Release()
	in := &grpcwire.Frame{}
	if err := s.recv(ss, in); err != nil {
		return err
	}
	h.Force(int64(len(in.B)))
	// model_name is field 2 of RepositoryModelLoadRequest and of
	// RepositoryModelUnloadRequest.
	if model, err := stringField(in.B, 2); err == nil {
		defer s.door.RepositoryChanged(model)
	}
	return s.forwardUnary(ss, method, in, &h)
}

// ready answers ServerReady (ModelReady) with ready false while the
// doors' verdict on the upstream (the model) is not ready, and relays it
// otherwise, so that Triton's own answer stands when the proxy has
// nothing to add.
func (s *Server) ready(ss grpc.ServerStream, method string) error {
	in := &grpcwire.Frame{}
	if err := s.recv(ss, in); err != nil {
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
		h := membudget.Hold{B: s.door.Memory}
		defer h.Release()
		return s.forwardUnary(ss, method, in, &h)
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
		return s.forwardUnary(ss, MethodModelInfer, in, &a.Hold)
	}
	batchable, err := s.read(ss.Context(), in, &a)
	switch {
	case !batchable: // shared memory, sequences, ...: Triton handles those itself
		s.door.PassedWhole(a.Model)
		return s.forwardUnary(ss, MethodModelInfer, in, &a.Hold)
	case err != nil:
		return s.fail(a.Model, err)
	}
	s.trace(ss.Context(), &a)
	res := a.Submit(ss.Context())
	return s.reply(ss, &res, &a)
}

// admit receives a ModelInfer message, holds its bytes and what its call
// costs beside them (callCost) against the memory budget until the call
// ends, and reads the model it names (a.Model) without decoding the rest:
// a call that is only relayed is never decoded.
func (s *Server) admit(ss grpc.ServerStream, a *door.Admission) (*grpcwire.Frame, error) {
	if !a.Hold.Grow(callCost) {
		return nil, s.refuse("", door.NoRoom("memory_calls", s.door.Memory.Limit(), callCost))
	}
	in := &grpcwire.Frame{}
	if err := s.recv(ss, in); err != nil {
		return nil, err
	}
	if n := callCost + int64(len(in.B)); !a.Hold.Grow(n) {
		return nil, s.refuse("", door.NoRoom("memory_declared", s.door.Memory.Limit(), n))
	}
	if hook := testHookHandle.Load(); hook != nil {
		(*hook)(MethodModelInfer, in.B)
	}
	model, version, err := grpcwire.InferTarget(in.B)
	if err != nil {
		return nil, s.fail("", malformed(err))
	}
	// The model and version are checked before the model is looked up,
	// as the HTTP door checks its path's.
	if !door.CheckModel(model) {
		return nil, s.fail("", door.NoModel(model))
	}
	if _, err := door.Version(version); err != nil {
		return nil, s.fail("", err)
	}
	a.Model = model
	return in, nil
}

// read decodes a ModelInfer message into its call for the dispatcher
// (a.Call); not batchable: the call is Triton's to handle. What decoding
// will take is read from the message first (grpcwire.ScanInfer) and held
// against the memory budget before a byte is decoded; a message past the
// HTTP door's bounds (inputs, outputs, parameters, dimensions) is refused
// as that door refuses it.
func (s *Server) read(ctx context.Context, in *grpcwire.Frame, a *door.Admission) (batchable bool, err error) {
	cost, err := grpcwire.ScanInfer(in.B)
	var ke *kserve.Error
	switch {
	case errors.As(err, &ke):
		return true, err
	case err != nil:
		return true, malformed(err)
	}
	if n := a.Hold.Held() + cost.Decoded; !a.Hold.Grow(n) {
		s.door.Refused("memory_decoded")
		return true, door.NoRoom("memory_decoded", s.door.Memory.Limit(), n)
	}
	m := &pb.ModelInferRequest{}
	if err := proto.Unmarshal(in.B, m); err != nil {
		return true, malformed(err)
	}
	req, err := grpcwire.ToRequest(m)
	if err != nil {
		return true, err
	}
	version, err := door.Version(m.GetModelVersion())
	if err != nil {
		return true, err
	}
	call, batchable, err := dispatcher.NewCall(req, version, a.Start)
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
// trailers and status. The call's own cost (callCost) is held against
// the memory budget while it lasts, and each message while it is held
// (heldFrames): a client's from its arrival until it is written upstream
// (one that does not fit ends the call with RESOURCE_EXHAUSTED), an
// answer from its arrival until it is written to the client (forced: the
// upstream's work is done).
func (s *Server) forward(ss grpc.ServerStream, method string) error {
	call := membudget.Hold{B: s.door.Memory}
	defer call.Release()
	if !call.Grow(callCost) {
		return s.refuse("", door.NoRoom("memory_calls", s.door.Memory.Limit(), callCost))
	}
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	ctx = outgoing(ctx)
	cs, err := s.o.Upstream.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		s.passed(true)
		return err
	}
	var relayErr atomic.Pointer[error] // the relay's end, the call's status
	go s.relayUp(ss, cs, method, cancel, &relayErr)
	// Upstream to client.
	down := heldFrames{b: s.door.Memory}
	defer down.release()
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
			if p := relayErr.Load(); p != nil {
				s.passed(status.Code(*p) == codes.Internal)
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
		down.force(len(f.B))
		err = ss.SendMsg(f)
		down.sent()
		if err != nil {
			return err
		}
	}
}

// relayUp relays a call's client messages to the upstream, each held
// against the memory budget until sent, until the client ends its side.
// A message that does not fit, or a panic, ends the call (relayErr, its
// status, and cancel); the upstream's status comes to forward otherwise.
func (s *Server) relayUp(ss grpc.ServerStream, cs grpc.ClientStream, method string, cancel context.CancelFunc, relayErr *atomic.Pointer[error]) {
	up := heldFrames{b: s.door.Memory}
	defer up.release()
	defer func() { // this goroutine's panic would end the process
		if v := recover(); v != nil {
			err := status.Error(codes.Internal, guard.Recovered(s.log, "grpc_relay", v).Error())
			relayErr.Store(&err)
			cancel() // the upstream call ends, and with it the client's
		}
	}()
	for {
		f := &grpcwire.Frame{}
		err := s.recv(ss, f)
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
		if !up.grow(len(f.B)) {
			err := s.refuse("", door.NoRoom("memory_relayed", s.door.Memory.Limit(), int64(len(f.B))))
			relayErr.Store(&err)
			cancel()
			return
		}
		err = cs.SendMsg(f)
		up.sent()
		if err != nil {
			return
		}
	}
}

// recv receives a call's next message, and gives back to the memory
// budget what its connection's receive meter had charged for it: the
// call's own hold takes it over.
func (s *Server) recv(ss grpc.ServerStream, f *grpcwire.Frame) error {
	err := ss.RecvMsg(f)
	if err == nil {
		if m := meterOf(ss.Context()); m != nil {
			m.took(len(f.B))
		}
	}
	return err
}

// heldFrames holds the messages a relayed stream keeps in one direction
// against the memory budget. grpc-go's SendMsg returns once a message is
// queued, not written: the stream's write quota lets one message past it
// at a time, so the message sent stays held until the next one is sent
// (by then grpc-go has written it), or until the call ends.
type heldFrames struct {
	b          *membudget.Budget
	last, next membudget.Hold
}

// grow holds the next message's n bytes beside the last one's, if they
// fit.
func (h *heldFrames) grow(n int) bool {
	h.next.B = h.b
	return h.next.Grow(int64(n))
}

// force holds the next message's n bytes whether or not they fit.
func (h *heldFrames) force(n int) {
	h.next.B = h.b
	h.next.Force(int64(n))
}

// sent tells that the next message was sent: the last one is written.
func (h *heldFrames) sent() {
	h.last.Release()
	h.last, h.next = h.next, h.last
}

func (h *heldFrames) release() {
	h.last.Release()
	h.next.Release()
}

// forwardUnary relays a unary call whose one message is already read
// (ModelInfer of a model the proxy does not batch) as one upstream call:
// no stream and no goroutine of its own, which is what a relayed
// ModelInfer costs most. Headers, trailers and status are the upstream's.
// The answer is held in h, beside the message, until it is sent (forced:
// the upstream's work is done).
func (s *Server) forwardUnary(ss grpc.ServerStream, method string, in *grpcwire.Frame, h *membudget.Hold) error {
	var header, trailer metadata.MD
	out := &grpcwire.Frame{}
	err := s.o.Upstream.Invoke(outgoing(ss.Context()), method, in, out, grpc.Header(&header), grpc.Trailer(&trailer))
	ss.SetTrailer(trailer)
	if err != nil {
		s.passed(status.Code(err) == codes.Unavailable)
		return err
	}
	h.Force(int64(len(out.B)))
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
