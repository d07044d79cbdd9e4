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
	"log/slog"
	"math"
	"net"
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
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/rawconn"
	"github.com/ratebatch/ratebatch/kserve/grpcwire"
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

// New returns the gRPC front door. It stays one function: it is the
// door's grpc.Server options, each with the default it takes, read as one
// list.
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
