package server

import (
	"context"
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

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/grpcproxy"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/orca"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/power/energyfit"
	"github.com/ratebatch/ratebatch/proxy"
	"github.com/ratebatch/ratebatch/registry"
	"github.com/ratebatch/ratebatch/tracing"
	"github.com/ratebatch/ratebatch/ui"
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
// and Run.
func New(cfg *config.Config, log *slog.Logger) (*Server, error) {
	up, err := url.Parse(cfg.Upstream)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), guard.Collector())
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
	meter, err := openMeter(cfg, own, log)
	if err != nil {
		return nil, err
	}
	reg.MustRegister(meter)
	observers := dispatcher.Observers{meter.Observer()}
	trace, traceFile, err := openDecisionTrace()
	if err != nil {
		return nil, err
	}
	if trace != nil {
		observers = append(observers, trace)
	}
	// Tracing: the batches' spans from the dispatcher's events, their
	// context written upstream as traceparent; the requests' spans at the
	// doors.
	tracer, err := tracing.New(context.Background(), tracing.Config{Endpoint: cfg.Tracing.OTLPEndpoint, Version: moduleVersion()})
	if err != nil {
		return nil, err
	}
	if tracer != nil {
		observers = append(observers, &tracing.Batches{T: tracer})
		client.Header = func(ctx context.Context, h *fasthttp.RequestHeader) { tracer.Inject(ctx, tracing.HeaderCarrier{H: h}) }
	}
	tc := triton.NewClient(cfg.Upstream, httpClient(upTLS, 10*time.Second, own))
	var mr *registry.Models // the dispatcher tells it of models the upstream no longer serves
	disp := dispatcher.New(dispatcher.Options{
		Upstream: client, Retries: cfg.Upstreams.Retries, Hold: cfg.Upstreams.Hold, RetryAfter: cfg.Limits.RetryAfter,
		Metrics: dispatcher.NewMetrics(reg), Logger: log,
		Outlier: dispatcher.Outlier{ConsecutiveErrors: cfg.Upstreams.FailingAfter, HungFactor: cfg.Upstreams.HungFactor,
			HungMin: cfg.Upstreams.HungMin, ProbeInterval: cfg.Upstreams.ProbeInterval},
		Check:        dispatcher.HealthCheck{Checker: tc, Interval: cfg.Upstreams.HealthCheckInterval},
		Observer:     observers,
		ModelChanged: func(model string) { mr.Changed(model) },
	})
	reg.MustRegister(disp.Collector())
	mr = registry.New(tc, disp, cfg, log)
	reg.MustRegister(registry.NewCollector(mr))

	memory := newMemoryBudget(cfg, log)
	reg.MustRegister(memory.Collector())
	p := &Server{cfg: cfg, log: log, memory: memory, reg: reg, disp: disp, models: mr, meter: meter, upstream: up, started: time.Now(),
		front: door.NewMetrics(reg), trace: trace, traceFile: traceFile, tracer: tracer}
	p.reload.state.Store(&configState{cfg: cfg, version: 1, loaded: p.started})
	if cfg.TLS.On() {
		if p.doorTLS, err = newDoorTLS(cfg.TLS, log); err != nil {
			return nil, err
		}
	}
	p.ui = ui.NewRecorder(ui.Options{States: ui.StatesOf(mr, disp, meter), Modes: modesOf(mr), Gatherer: reg})
	p.energyFit = energyfit.New(meter, disp.Snapshots, mr.Monitors)
	load := orca.New(orca.Live(mr.Statuses, disp.Snapshots, meter.Snapshot))
	p.load = load
	reg.MustRegister(load.Collector())
	// Both doors share one backend: callers of either share batches, the
	// memory budget and the metrics.
	rules, err := cfg.RestrictedAPI.Rules()
	if err != nil {
		return nil, fmt.Errorf("restricted_api: %w", err)
	}
	p.access.Set(rules)
	conns := &door.Conns{Max: cfg.Limits.MaxConnections, PerClient: cfg.Limits.MaxConnsPerClient}
	back := door.Backend{Batcher: disp, Discoverer: mr, Health: disp, Memory: memory, Tracer: tracer, Metrics: p.front,
		Forward: forward, Access: &p.access, Conns: conns}
	p.data = proxy.New(proxy.Options{
		Backend: back, Upstream: up, MaxBodyBytes: int64(cfg.Limits.MaxBodyBytes),
		RetryAfter:          cfg.Limits.RetryAfter,
		Hold:                cfg.Upstreams.Hold,
		ReadHeaderTimeout:   cfg.Limits.ReadHeaderTimeout,
		ReadTimeout:         cfg.Limits.ReadTimeout,
		WriteTimeout:        cfg.Limits.WriteTimeout,
		IdleTimeout:         cfg.Limits.IdleTimeout,
		UpstreamIdleTimeout: cfg.Limits.UpstreamIdle,
		Logger:              log, LoadReport: load.HeaderValue,
	})
	p.data.UseUpstreamTLS(upTLS)
	if cfg.GRPCListen != "" {
		grpcTLS, err := upstreamTLS(cfg.UpstreamTLS, cfg.UpstreamTLS.GRPC, hostOf(cfg.UpstreamGRPCAddr()), log)
		if err != nil {
			return nil, err
		}
		cc, err := grpcproxy.DialTLS(cfg.UpstreamGRPCAddr(), grpcTLS)
		if err != nil {
			return nil, err
		}
		p.grpcUp = cc
		p.grpc = grpcproxy.New(grpcproxy.Options{
			Backend: back, Upstream: cc, MaxRecvBytes: int(cfg.Limits.MaxBodyBytes),
			MaxConcurrentStreams: uint32(cfg.Limits.GRPCMaxStreams), IdleTimeout: cfg.Limits.IdleTimeout,
			Ready: mr.Ready, Logger: log, LoadReport: load,
			TLS: p.doorTLS.serverConfig("h2"),
		})
	}
	p.admin = &http.Server{
		Handler: proxy.NewAdmin(proxy.AdminOptions{
			Gatherer: reg, Status: p.status, SetPolicy: mr.SetPolicy, Policies: func() any { return mr.Policies() },
			Token: cfg.AdminToken, Logger: log,
			Ready: mr.Ready, Unready: mr.Unready, Pprof: cfg.AdminPprof, UI: p.ui.Handler("/ui"),
			Cmdline: config.RedactArgs(os.Args), Hosts: cfg.AdminHostNames(),
		}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
	return p, nil
}

// moduleVersion is the binary's module version for the spans' resource.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}

// DecisionTraceEnv names the environment variable that, set to a file
// path, makes serve write the dispatcher's decision trace there
// (dispatcher.DecisionTrace): a measuring tool, not a log.
const DecisionTraceEnv = "RATEBATCH_DECISION_TRACE"

// openDecisionTrace opens the decision trace DecisionTraceEnv asks for;
// nil when it is not set.
func openDecisionTrace() (*dispatcher.DecisionTrace, *os.File, error) {
	path := os.Getenv(DecisionTraceEnv)
	if path == "" {
		return nil, nil, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", DecisionTraceEnv, err)
	}
	return dispatcher.NewDecisionTrace(f, time.Now()), f, nil
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
