package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/admin"
	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/grpcproxy"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/orca"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/power/energyfit"
	"github.com/ratebatch/ratebatch/proxy"
	"github.com/ratebatch/ratebatch/registry"
	"github.com/ratebatch/ratebatch/tracing"
	"github.com/ratebatch/ratebatch/ui"
	"github.com/ratebatch/ratebatch/whatif"
)

// openMeter opens the configured energy source (auto resolved by
// config.Config.PowerSource). "none" gives a meter that reports every
// energy figure as absent.
func openMeter(cfg *config.Config, header map[string]string, log *slog.Logger) (*power.Meter, error) {
	kind, metricsURL := cfg.PowerSource()
	o := power.Options{Interval: cfg.Power.Interval, TritonMetricsURL: metricsURL, HTTPClient: httpClient(nil, 0, header), Logger: log}
	if cfg.Power.GPUs != "" {
		for _, g := range strings.Split(cfg.Power.GPUs, ",") {
			o.GPUs = append(o.GPUs, strings.TrimSpace(g))
		}
	}
	src, err := power.Open(kind, o)
	if err != nil {
		return nil, fmt.Errorf("power.source %s: %w", cfg.Power.Source, err)
	}
	m, err := power.NewMeter(src, o)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("power: %w", err)
	}
	return m, nil
}

// New wires the proxy that cfg describes, logging to log. cfg must be
// valid (config.Load validates it). Nothing listens or runs until Listen
// and Run. Each subsystem is built by one constructor, in the order they
// need each other.
func New(cfg *config.Config, log *slog.Logger) (*Server, error) {
	p := &Server{cfg: cfg, log: log, reg: newGatherer(), started: time.Now()}
	up, err := newUpstream(cfg, log)
	if err != nil {
		return nil, err
	}
	p.upstream = up.url
	if err := p.newMeter(up); err != nil {
		return nil, err
	}
	observers, err := p.newObservers(up)
	if err != nil {
		return nil, err
	}
	p.newDispatcher(up, observers)
	p.newRegistry(up)
	p.memory = newMemoryBudget(cfg, log)
	p.reg.MustRegister(p.memory.Collector())
	p.reload.state.Store(&configState{cfg: cfg, version: 1, loaded: p.started})
	p.newLoadReport()
	if err := p.newDoors(up); err != nil {
		return nil, err
	}
	p.newAdmin()
	return p, nil
}

// newGatherer is the process's Prometheus registry, with the Go runtime's,
// the process's and the recovered panics' collectors.
func newGatherer() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), guard.Collector())
	return reg
}

// upstream is how the process reaches Triton: the batches' HTTP client and
// its TLS, the headers the proxy's own calls carry, those the doors forward
// from their callers, and the management client (discovery, statistics,
// health checks).
type upstream struct {
	url     *url.URL
	http    *dispatcher.HTTPUpstream
	tls     *tls.Config
	own     map[string]string
	forward *door.Forwarding
	triton  *triton.Client
}

// newUpstream builds the clients of the upstream cfg names.
func newUpstream(cfg *config.Config, log *slog.Logger) (*upstream, error) {
	up, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	client, err := dispatcher.NewHTTPUpstream(cfg.Upstream, cfg.Upstreams.MaxConns, cfg.Upstreams.Timeout)
	if err != nil {
		return nil, err
	}
	upTLS, err := upstreamTLS(cfg.UpstreamTLS, up.Scheme == "https", up.Hostname(), log)
	if err != nil {
		return nil, err
	}
	client.UseTLS(upTLS)
	// The proxy's own calls to Triton (discovery, statistics, probes,
	// metrics) carry upstream_headers; batches carry their callers'.
	own := cfg.UpstreamHeaderValues(os.LookupEnv)
	client.OwnHeader = own
	forward, err := door.NewForwarding(cfg.ForwardNames(), cfg.RestrictedKeys(), cfg.ForwardHeaderPattern)
	if err != nil {
		return nil, fmt.Errorf("forward_headers, restricted_api: %w", err)
	}
	return &upstream{url: up, http: client, tls: upTLS, own: own, forward: forward,
		triton: triton.NewClient(cfg.Upstream, httpClient(upTLS, 10*time.Second, own))}, nil
}

// newMeter opens the energy meter (power.source).
func (p *Server) newMeter(up *upstream) error {
	meter, err := openMeter(p.cfg, up.own, p.log)
	if err != nil {
		return err
	}
	p.reg.MustRegister(meter)
	p.meter = meter
	return nil
}

// newObservers are what watch the dispatcher's events beside each model's
// monitor: the meter, the decision log DecisionLogEnv asks for, and
// the tracer, whose batch spans' context goes upstream as traceparent (the
// requests' spans are the doors').
func (p *Server) newObservers(up *upstream) (dispatcher.Observers, error) {
	observers := dispatcher.Observers{p.meter.Observer()}
	decisions, decisionsFile, err := openDecisionLog()
	if err != nil {
		return nil, err
	}
	if decisions != nil {
		observers = append(observers, decisions)
	}
	p.decisions, p.decisionsFile = decisions, decisionsFile
	tracer, err := tracing.New(context.Background(), tracing.Config{Endpoint: p.cfg.Tracing.OTLPEndpoint, Version: moduleVersion()})
	if err != nil {
		return nil, err
	}
	if tracer != nil {
		observers = append(observers, &tracing.Batches{T: tracer})
		up.http.Header = func(ctx context.Context, h *fasthttp.RequestHeader) { tracer.Inject(ctx, tracing.HeaderCarrier{H: h}) }
	}
	p.tracer = tracer
	// The what-if keeps every model's arrivals as they come; once a
	// second it reads the meter and the queues' callers (the dispatcher,
	// built after the observers).
	p.arrivals = newArrivals(p.cfg.WhatIf, p.meter, func(model string) (policy.Callers, bool) { return p.disp.Callers(model) })
	if p.arrivals != nil {
		observers = append(observers, p.arrivals)
	}
	return observers, nil
}

// newDispatcher builds the queues, sending batches through up and telling
// observers what they do.
func (p *Server) newDispatcher(up *upstream, observers dispatcher.Observers) {
	cfg := p.cfg
	p.disp = dispatcher.New(dispatcher.Options{
		Upstream: up.http, Retries: cfg.Upstreams.Retries, Hold: cfg.Upstreams.Hold, RetryAfter: cfg.Limits.RetryAfter,
		Metrics: dispatcher.NewMetrics(p.reg), Logger: p.log,
		Outlier: dispatcher.Outlier{ConsecutiveErrors: cfg.Upstreams.FailingAfter, HungFactor: cfg.Upstreams.HungFactor,
			HungMin: cfg.Upstreams.HungMin, ProbeInterval: cfg.Upstreams.ProbeInterval},
		Check:    dispatcher.HealthCheck{Checker: up.triton, Interval: cfg.Upstreams.HealthCheckInterval},
		Observer: observers,
		// The dispatcher tells the registry of models the upstream no
		// longer serves.
		ModelChanged: func(model string) { p.models.Changed(model) },
	})
	p.reg.MustRegister(p.disp.Collector())
}

// newRegistry builds the model registry over the dispatcher's queues.
func (p *Server) newRegistry(up *upstream) {
	p.models = registry.New(up.triton, p.disp, p.cfg, p.log)
	p.reg.MustRegister(registry.NewCollector(p.models))
}

// newLoadReport builds what learns from the models' state and reports it:
// the energy fit of zeta(b) per model and the ORCA load report.
func (p *Server) newLoadReport() {
	p.energyFit = energyfit.New(p.meter, p.disp.Snapshots, p.models.Monitors)
	p.load = orca.New(orca.Live(p.models.Statuses, p.disp.Snapshots, p.meter.Snapshot))
	p.reg.MustRegister(p.load.Collector())
}

// newDoors builds the data port and, with grpc_listen, the gRPC door. Both
// doors share one backend: callers of either share batches, the memory
// budget and the metrics.
func (p *Server) newDoors(up *upstream) error {
	cfg := p.cfg
	var err error
	if cfg.TLS.On() {
		if p.doorTLS, err = newDoorTLS(cfg.TLS, p.log); err != nil {
			return err
		}
	}
	rules, err := cfg.RestrictedAPI.Rules()
	if err != nil {
		return fmt.Errorf("restricted_api: %w", err)
	}
	p.access.Set(rules)
	p.front = door.NewMetrics(p.reg)
	conns := &door.Conns{Max: cfg.Limits.MaxConnections, PerClient: cfg.Limits.MaxConnsPerClient}
	back := door.Backend{Batcher: p.disp, Discoverer: p.models, Health: p.disp, Memory: p.memory, Tracer: p.tracer, Metrics: p.front,
		Forward: up.forward, Access: &p.access, Conns: conns}
	p.data = proxy.New(proxy.Options{
		Backend: back, Upstream: up.url, MaxBodyBytes: int64(cfg.Limits.MaxBodyBytes),
		RetryAfter:          cfg.Limits.RetryAfter,
		Hold:                cfg.Upstreams.Hold,
		ReadHeaderTimeout:   cfg.Limits.ReadHeaderTimeout,
		ReadTimeout:         cfg.Limits.ReadTimeout,
		WriteTimeout:        cfg.Limits.WriteTimeout,
		IdleTimeout:         cfg.Limits.IdleTimeout,
		UpstreamIdleTimeout: cfg.Limits.UpstreamIdle,
		Logger:              p.log, LoadReport: p.load.HeaderValue,
	})
	p.data.UseUpstreamTLS(up.tls)
	if cfg.GRPCListen == "" {
		return nil
	}
	return p.newGRPCDoor(back)
}

// newGRPCDoor builds the gRPC door on back and its client of Triton's
// gRPC port.
func (p *Server) newGRPCDoor(back door.Backend) error {
	cfg := p.cfg
	grpcTLS, err := upstreamTLS(cfg.UpstreamTLS, cfg.UpstreamTLS.GRPC, hostOf(cfg.UpstreamGRPCAddr()), p.log)
	if err != nil {
		return err
	}
	cc, err := grpcproxy.DialTLS(cfg.UpstreamGRPCAddr(), grpcTLS)
	if err != nil {
		return err
	}
	p.grpcUp = cc
	p.grpc = grpcproxy.New(grpcproxy.Options{
		Backend: back, Upstream: cc, MaxRecvBytes: int(cfg.Limits.MaxBodyBytes),
		MaxConcurrentStreams: uint32(cfg.Limits.GRPCMaxStreams), IdleTimeout: cfg.Limits.IdleTimeout,
		Ready: p.models.Ready, Logger: p.log, LoadReport: p.load,
		TLS: p.doorTLS.serverConfig("h2"),
	})
	return nil
}

// newAdmin builds the admin port: metrics, status, health, the policy
// switch, the live page and the what-if.
func (p *Server) newAdmin() {
	cfg, mr := p.cfg, p.models
	p.ui = ui.NewRecorder(ui.Options{States: ui.StatesOf(mr, p.disp, p.meter), Modes: modesOf(mr), Gatherer: p.reg})
	o := admin.Options{
		Gatherer: p.reg, Status: p.status, SetPolicy: mr.SetPolicy, Policies: func() any { return mr.Policies() },
		Token: cfg.AdminToken, Logger: p.log,
		Ready: mr.Ready, Unready: mr.Unready, Pprof: cfg.AdminPprof, UI: p.ui.Handler("/ui"),
		Cmdline: config.RedactArgs(os.Args), Hosts: cfg.AdminHostNames(),
	}
	if p.arrivals != nil {
		replayer := whatif.NewReplayer(p.arrivals, mr, whatif.Config{CPU: cfg.WhatIf.CPU, MinArrivals: cfg.WhatIf.MinArrivals})
		o.WhatIf, o.Arrivals = replayer.Handler(), p.arrivals.ArrivalsHandler()
	}
	p.admin = &http.Server{
		Handler:           admin.New(o),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
}

// newArrivals is the what-if's recorder that whatif configures, nil when
// it keeps no arrivals.
func newArrivals(c config.WhatIf, meter *power.Meter, callers func(string) (policy.Callers, bool)) *whatif.Recorder {
	if c.Arrivals <= 0 {
		return nil
	}
	return whatif.NewRecorder(whatif.Options{Arrivals: c.Arrivals, Models: c.Models, MaxMinutes: c.MaxMinutes,
		Meter: meter.Snapshot, Callers: callers})
}

// moduleVersion is the binary's module version for the spans' resource.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}

// DecisionLogEnv names the environment variable that, set to a file
// path, makes serve write the dispatcher's decision log there
// (dispatcher.DecisionLog): a measuring tool, not the process's log.
const DecisionLogEnv = "RATEBATCH_DECISION_LOG"

// decisionLogEnvOld is DecisionLogEnv's earlier name, read when
// DecisionLogEnv is not set so that scripts written for it keep working.
const decisionLogEnvOld = "RATEBATCH_DECISION_TRACE"

// openDecisionLog opens the decision log DecisionLogEnv asks for; nil
// when it is not set.
func openDecisionLog() (*dispatcher.DecisionLog, *os.File, error) {
	env := DecisionLogEnv
	path := os.Getenv(env)
	if path == "" {
		env = decisionLogEnvOld
		path = os.Getenv(env)
	}
	if path == "" {
		return nil, nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", env, err)
	}
	return dispatcher.NewDecisionLog(f, time.Now()), f, nil
}

// newMemoryBudget is limits.memory, or its default from the cgroup.
func newMemoryBudget(cfg *config.Config, log *slog.Logger) *membudget.Budget {
	limit, source := int64(cfg.Limits.Memory), "limits.memory"
	if limit == 0 {
		limit, source = membudget.Default()
	}
	log.Info("memory budget of requests and answers", "bytes", limit, "from", source)
	return membudget.New(limit)
}
