// Package server assembles `ratebatch serve`: from one configuration it
// builds the whole process (the data port, the gRPC door, the admin port,
// the dispatcher, the model registry, the energy meter, the live page) and
// runs it until its context ends. The command only parses flags and config;
// the end-to-end tests build the same process here and reach its parts
// through the accessors.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/grpcproxy"
	"github.com/ratebatch/ratebatch/internal/membudget"
	"github.com/ratebatch/ratebatch/internal/procs"
	"github.com/ratebatch/ratebatch/internal/redact"
	"github.com/ratebatch/ratebatch/orca"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/power/energyfit"
	"github.com/ratebatch/ratebatch/proxy"
	"github.com/ratebatch/ratebatch/registry"
	"github.com/ratebatch/ratebatch/tracing"
	"github.com/ratebatch/ratebatch/ui"
	"github.com/ratebatch/ratebatch/whatif"
)

// SizeProcs applies the procs option to this process. GOMAXPROCS is the
// process's, not one Server's, so the command calls it beside New. With 0 and no
// GOMAXPROCS in the environment a procs.Sizer keeps the Go processors to
// what the proxy's CPU use needs until ctx is done. The channel is closed
// at once when the count is fixed, else once the Sizer has given the
// runtime its default back.
func SizeProcs(ctx context.Context, n int, log *slog.Logger) <-chan struct{} {
	done := make(chan struct{})
	if n > 0 {
		runtime.GOMAXPROCS(n)
		close(done)
		return done
	}
	if v := os.Getenv("GOMAXPROCS"); v != "" { // the runtime ignores it empty
		log.Info("Go processors fixed by the environment", "GOMAXPROCS", v)
		close(done)
		return done
	}
	s := &procs.Sizer{Changed: func(from, to int, busy float64) {
		log.Debug("Go processors resized to the load", "from", from, "to", to, "busy_cores", busy)
	}}
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			log.Warn("Go processors left at the runtime's default", "err", err)
		}
	}()
	return done
}

// NewLogger returns the logger the log options ask for, writing to w.
// Its level follows log.level when the configuration is reloaded.
func NewLogger(c config.Log, w io.Writer) *slog.Logger {
	level := new(slog.LevelVar)
	level.Set(parseLevel(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if c.Format == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(leveled{h, level})
}

// Server is a wired `ratebatch serve`.
type Server struct {
	cfg      *config.Config
	log      *slog.Logger
	reg      *prometheus.Registry
	disp     *dispatcher.Dispatcher
	models   *registry.Models
	data     *proxy.Server
	front    *door.Metrics
	grpc     *grpcproxy.Server // nil when grpc_listen is empty
	grpcUp   io.Closer
	grpcLn   net.Listener
	admin    *http.Server
	dataLn   net.Listener
	adminLn  net.Listener
	started  time.Time
	upstream *url.URL
	meter    *power.Meter
	ui       *ui.Recorder
	// decisions is the decision log DecisionLogEnv asks for, written to
	// decisionsFile; nil without it.
	decisions     *dispatcher.DecisionLog
	decisionsFile *os.File
	// tracer exports OpenTelemetry spans; nil: tracing off.
	tracer *tracing.Tracer
	// energyFit learns zeta(b) per model from the meter.
	energyFit *energyfit.Fitter
	// arrivals keeps each model's arrivals for the what-if; nil when
	// whatif.arrivals is 0.
	arrivals *whatif.Recorder
	// memory is the budget of requests and answers (limits.memory).
	memory *membudget.Budget
	// access is which of Triton's routes the doors open to clients
	// (restricted_api); a reload replaces its rules.
	access door.Access
	// load is the ORCA report; agentLn answers HAProxy's agent checks
	// from it (nil without orca.haproxy_agent_listen).
	load    *orca.Reporter
	agentLn net.Listener
	// doorTLS is the doors' TLS (tls.*); nil: plain text.
	doorTLS *doorTLS
	// reload holds the configuration in force and re-reads it on SIGHUP;
	// cfg stays the one the process was built from.
	reload reloader
}

// closeDecisions writes out and closes the decision log, if any.
func (p *Server) closeDecisions() {
	if p.decisions == nil {
		return
	}
	if err := errors.Join(p.decisions.Flush(), p.decisionsFile.Close()); err != nil {
		p.log.Warn("writing the decision log", "err", err)
	}
}

// LimitRuntime sets the Go runtime's soft memory limit from the memory
// budget (membudget.LimitRuntime); the limit is the process's, so the
// command calls it, as it sizes GOMAXPROCS, not New.
func (p *Server) LimitRuntime() { membudget.LimitRuntime(p.memory) }

// status is the admin /status document.
func (p *Server) status() any {
	live := p.current()
	cfg := live.cfg.Redacted()
	return map[string]any{
		"upstream":       cfg.Upstream,
		"uptime_seconds": time.Since(p.started).Seconds(),
		"models":         p.models.Statuses(),
		"queues":         p.disp.Snapshots(),
		"upstream_state": p.disp.Upstream(),
		"doors":          p.front.Doors(),
		"energy":         p.meter.Snapshot(),
		"energy_fit":     p.energyFit.Status(),
		"config":         p.models.Config().Document(), // with the policy set at run time
		"config_version": live.version,
		"config_loaded":  live.loaded.UTC().Format(time.RFC3339Nano),
	}
}

// Listen binds the data, admin and (when configured) gRPC listeners, so
// that a port in use fails at start. Run calls it if it was not called.
func (p *Server) Listen() error {
	var err error
	if p.dataLn, err = net.Listen("tcp", p.cfg.Listen); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if p.adminLn, err = net.Listen("tcp", p.cfg.AdminListen); err != nil {
		p.dataLn.Close()
		return fmt.Errorf("admin_listen: %w", err)
	}
	p.dataLn = p.doorTLS.listener(p.dataLn, "http/1.1")
	if p.cfg.TLS.Admin {
		p.adminLn = p.doorTLS.listener(p.adminLn, "http/1.1")
	}
	if p.grpc != nil {
		if p.grpcLn, err = net.Listen("tcp", p.cfg.GRPCListen); err != nil {
			p.dataLn.Close()
			p.adminLn.Close()
			return fmt.Errorf("grpc_listen: %w", err)
		}
	}
	if a := p.cfg.ORCA.HAProxyAgentListen; a != "" {
		if p.agentLn, err = net.Listen("tcp", a); err != nil {
			for _, ln := range []net.Listener{p.dataLn, p.adminLn, p.grpcLn} {
				if ln != nil {
					ln.Close()
				}
			}
			return fmt.Errorf("orca.haproxy_agent_listen: %w", err)
		}
	}
	return nil
}

// Run serves until ctx ends, then shuts down gracefully: it stops accepting,
// drains queues and in-flight batches within the grace period, then exits.
func (p *Server) Run(ctx context.Context) error {
	if p.dataLn == nil {
		if err := p.Listen(); err != nil {
			return err
		}
	}
	hup := hangups()
	bg, stopBg := context.WithCancel(context.Background())
	defer stopBg()
	go p.models.Discover(bg)
	go p.meter.Run(bg)
	go p.ui.Run(bg)
	go p.energyFit.Run(bg, p.cfg.Policy.Window)
	if p.arrivals != nil {
		go p.arrivals.Run(bg)
	}
	go p.reloadOnHangup(bg, hup)
	defer p.meter.Source().Close()

	if attrs := tlsInForce(p.cfg); attrs != nil {
		p.log.Info("TLS in force", attrs...)
	}
	errc := make(chan error, 4)
	if p.agentLn != nil {
		go func() { errc <- p.load.ServeAgent(bg, p.agentLn, p.cfg.ORCA.HAProxyAgentFullRPS) }()
	}
	go func() { errc <- p.data.Serve(p.dataLn) }()
	go func() { errc <- serveOn(p.admin, p.adminLn) }()
	if p.grpc != nil {
		go func() { errc <- p.grpc.Serve(p.grpcLn) }()
		defer p.grpcUp.Close()
		p.log.Info("ratebatch serving gRPC", "grpc_listen", p.grpcLn.Addr().String(), "upstream_grpc", p.cfg.UpstreamGRPCAddr())
	}
	p.log.Info("ratebatch serving", "listen", p.dataLn.Addr().String(), "admin", p.adminLn.Addr().String(), "upstream", redact.URL(p.cfg.Upstream), "policy", p.cfg.Policy.Name)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	p.shutdown(stopBg)
	return runErr
}

// shutdown stops accepting, drains the queues and in-flight batches and
// closes both doors within the grace period, writes out the decision
// log and the last spans, stops the background loops (stopBg) and
// closes the admin port.
func (p *Server) shutdown(stopBg context.CancelFunc) {
	p.log.Info("shutting down", "grace", p.cfg.Grace)
	grace, cancel := context.WithTimeout(context.Background(), p.cfg.Grace)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- p.disp.Drain(grace) }()
	grpcDone := make(chan struct{})
	go func() { // at once with the HTTP door's: both wait for their batches
		defer close(grpcDone)
		if p.grpc == nil {
			return
		}
		if err := p.grpc.Shutdown(grace); err != nil {
			p.log.Warn("gRPC listener did not close in time", "err", err)
		}
	}()
	if err := p.data.Shutdown(grace); err != nil {
		p.log.Warn("data listener did not close in time", "err", err)
	}
	<-grpcDone
	if err := <-drained; err != nil {
		p.log.Warn("queues not drained in time; the rest were answered 503", "err", err)
	}
	p.closeDecisions()
	if err := p.tracer.Shutdown(grace); err != nil {
		p.log.Warn("exporting the last spans", "err", err)
	}
	stopBg()
	p.admin.Shutdown(grace)
}

func serveOn(s *http.Server, ln net.Listener) error {
	if err := s.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Addr is the data port's bound address; nil before Listen.
func (p *Server) Addr() net.Addr { return addrOf(p.dataLn) }

// AdminAddr is the admin port's bound address; nil before Listen.
func (p *Server) AdminAddr() net.Addr { return addrOf(p.adminLn) }

// GRPCAddr is the gRPC door's bound address; nil before Listen or without
// grpc_listen.
func (p *Server) GRPCAddr() net.Addr { return addrOf(p.grpcLn) }

// AgentAddr is the HAProxy agent-check port's bound address; nil before
// Listen or without orca.haproxy_agent_listen.
func (p *Server) AgentAddr() net.Addr { return addrOf(p.agentLn) }

func addrOf(ln net.Listener) net.Addr {
	if ln == nil {
		return nil
	}
	return ln.Addr()
}

// Config is the configuration in force: the one the server was built
// from, or the last one Reload applied.
func (p *Server) Config() *config.Config { return p.current().cfg }

// Dispatcher is the server's queues.
func (p *Server) Dispatcher() *dispatcher.Dispatcher { return p.disp }

// Models is the server's model registry.
func (p *Server) Models() *registry.Models { return p.models }

// Gatherer is the server's Prometheus registry, what /metrics serves.
func (p *Server) Gatherer() prometheus.Gatherer { return p.reg }

// MemoryBudget is the budget both doors admit requests against
// (limits.memory).
func (p *Server) MemoryBudget() *membudget.Budget { return p.memory }
