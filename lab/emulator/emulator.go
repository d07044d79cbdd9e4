// Package emulator is a KServe v2 inference server that behaves like a GPU
// serving models under Triton: each model has instances, an instance
// executes one request (one batch) at a time for tau(b) = alpha*b + tau0 of
// a published profile, requests that find every instance busy wait in FIFO
// order, and the device draws zeta(b) = beta*b + zeta0 per batch on top of
// its idle power. It speaks Triton's HTTP API (health, metadata, config,
// repository index, statistics, inference in JSON and binary form) and
// Triton's Prometheus metrics, so the proxy, tritonclient and the tools can
// run against it on a machine without a GPU. Its fault hook lets tests make
// batches slow, failing, hanging or dropped.
package emulator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratebatch/ratebatch/lab/preset"
)

// Options configures an emulator. The zero value is valid: the default
// preset, one instance per model, no jitter, no idle power and, because
// TimeScale is 0, batches that take no time at all.
type Options struct {
	// Profile gives tau(b) and zeta(b) of every model and the image model's
	// max_batch_size; "simple" keeps max_batch_size 8 but takes its timing
	// from the profile too. The zero Profile means profile.DefaultPreset.
	Profile preset.Profile
	// TimeScale multiplies every batch execution time: 1 runs at the
	// profile's speed, 0.1 ten times faster, 0 executes instantly (for
	// measuring the proxy's own overhead). Energy per batch is zeta(b)
	// whatever the scale, so power while busy is zeta(b)/(tau(b)*scale);
	// instant batches add their energy at once and no busy power.
	TimeScale float64
	// Instances is the number of instances of each model (Triton's
	// instance_group count); 0 means 1.
	Instances int
	// SimpleMaxBatch replaces the simple model's max_batch_size (0:
	// SimpleMaxBatch, Triton's example's 8), so that a policy can be
	// measured at a large B_max without the image model's 602 KB rows
	// loading the host.
	SimpleMaxBatch int
	// Jitter spreads execution times: each batch takes tau(b) times a
	// factor drawn uniformly from [1-Jitter, 1+Jitter]. 0 <= Jitter < 1.
	Jitter float64
	// Realism adds a real server's roughness (see Realism); the zero value
	// is exact. It draws from the same seeded source as Jitter.
	Realism Realism
	// Seed seeds the jitter so that runs repeat.
	Seed uint64
	// IdleWatts is the power the device draws when idle; it needs a profile
	// with energy figures.
	IdleWatts float64
	// PowerLimitWatts is reported as nv_gpu_power_limit when > 0 (no
	// figure is invented when it is 0).
	PowerLimitWatts float64
	// GPUUUID labels the device metrics; "" means "GPU-emulator-0".
	GPUUUID string
	// MaxBodyBytes bounds an inference request body; 0 means 256 MiB.
	MaxBodyBytes int64
	// Clock is the source of time; nil means the wall clock.
	Clock Clock
	// Fault, when set, is consulted for every batch (see Fault).
	Fault FaultFunc
	// Logger receives serve errors; nil discards them.
	Logger *slog.Logger
}

const (
	defaultGPUUUID      = "GPU-emulator-0"
	defaultMaxBodyBytes = 256 << 20
)

// Server is an emulated inference server. Its API and metrics handlers can
// be mounted anywhere (httptest included), or Start can serve them on two
// addresses; Close stops serving and Start may then serve again on the same
// addresses, keeping statistics and energy, like a restarted process that
// kept its counters.
type Server struct {
	opts     Options
	clock    Clock
	gpu      *gpu
	models   []*model // in index order
	byName   map[string]*model
	registry *prometheus.Registry
	api      http.Handler
	metrics  http.Handler
	seq      atomic.Uint64
	ready    atomic.Bool

	rngMu sync.Mutex
	rng   *rand.Rand

	mu       sync.Mutex
	life     context.Context // ends when the server closes; running batches end with it
	stop     context.CancelFunc
	servers  []*http.Server
	addrs    [2]string
	serveErr chan error
}

// New validates the options and builds a server; it does not listen.
func New(opts Options) (*Server, error) {
	if opts.Profile == (preset.Profile{}) {
		p, err := preset.Lookup(preset.DefaultPreset)
		if err != nil {
			return nil, fmt.Errorf("emulator: default preset: %w", err)
		}
		opts.Profile = p
	}
	if err := opts.Profile.Validate(); err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	switch {
	case !(opts.TimeScale >= 0) || math.IsInf(opts.TimeScale, 0):
		return nil, fmt.Errorf("emulator: time scale must be a finite number >= 0, got %v", opts.TimeScale)
	case opts.Realism.validate() != nil:
		return nil, fmt.Errorf("emulator: %w", opts.Realism.validate())
	case opts.Instances < 0:
		return nil, fmt.Errorf("emulator: instances must be >= 1 (0 means 1), got %d", opts.Instances)
	case opts.SimpleMaxBatch < 0 || opts.SimpleMaxBatch > maxSimpleMaxBatch:
		return nil, fmt.Errorf("emulator: simple's max batch size must be 1 to %d (0 means %d), got %d", maxSimpleMaxBatch, SimpleMaxBatch, opts.SimpleMaxBatch)
	case !(opts.Jitter >= 0 && opts.Jitter < 1):
		return nil, fmt.Errorf("emulator: jitter must be in [0, 1), got %v", opts.Jitter)
	case !(opts.IdleWatts >= 0) || math.IsInf(opts.IdleWatts, 0):
		return nil, fmt.Errorf("emulator: idle power must be a finite number of watts >= 0, got %v", opts.IdleWatts)
	case opts.IdleWatts > 0 && !opts.Profile.HasEnergy:
		return nil, fmt.Errorf("emulator: idle power given but profile %q has no published energy figures, so the emulator reports no energy", opts.Profile.Name)
	case !(opts.PowerLimitWatts >= 0) || math.IsInf(opts.PowerLimitWatts, 0):
		return nil, fmt.Errorf("emulator: power limit must be a finite number of watts >= 0, got %v", opts.PowerLimitWatts)
	case opts.MaxBodyBytes < 0:
		return nil, fmt.Errorf("emulator: max body bytes must be >= 0 (0 means the default), got %d", opts.MaxBodyBytes)
	}
	if opts.Instances == 0 {
		opts.Instances = 1
	}
	if opts.SimpleMaxBatch == 0 {
		opts.SimpleMaxBatch = SimpleMaxBatch
	}
	if opts.GPUUUID == "" {
		opts.GPUUUID = defaultGPUUUID
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = defaultMaxBodyBytes
	}
	if opts.Clock == nil {
		opts.Clock = wallClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}

	s := &Server{
		opts:   opts,
		clock:  opts.Clock,
		gpu:    newGPU(opts.Clock, opts.IdleWatts),
		models: newModels(opts.Profile, opts.Instances, opts.SimpleMaxBatch),
		byName: map[string]*model{},
		rng:    rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
	}
	for _, m := range s.models {
		s.byName[m.name] = m
	}
	s.ready.Store(true)
	s.life, s.stop = context.WithCancel(context.Background())

	s.registry = prometheus.NewRegistry()
	if err := s.registry.Register(&collector{s: s}); err != nil {
		return nil, fmt.Errorf("emulator: registering metrics: %w", err)
	}
	s.api = s.routes()
	s.metrics = s.metricsRoutes()
	return s, nil
}

// Handler serves Triton's HTTP inference API (the port Triton calls 8000).
func (s *Server) Handler() http.Handler { return s.api }

// MetricsHandler serves GET /metrics (the port Triton calls 8002).
func (s *Server) MetricsHandler() http.Handler { return s.metrics }

// Registry is the Prometheus registry behind MetricsHandler.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// Profile is the batch service profile the server emulates.
func (s *Server) Profile() preset.Profile { return s.opts.Profile }

// Models lists the names of the served models.
func (s *Server) Models() []string {
	names := make([]string, len(s.models))
	for i, m := range s.models {
		names[i] = m.name
	}
	return names
}

// Stats returns the statistics of a model as GET /v2/models/{m}/stats
// reports them.
func (s *Server) Stats(model string) (ModelStats, bool) {
	m, ok := s.byName[model]
	if !ok {
		return ModelStats{}, false
	}
	return m.stats.snapshot(), true
}

// EnergyJoules is the device's energy since New, as nv_energy_consumption
// reports it; ok is false when the profile has no energy figures.
func (s *Server) EnergyJoules() (j float64, ok bool) {
	return s.gpu.sample().EnergyJ, s.opts.Profile.HasEnergy
}

// SetReady makes GET /v2/health/ready answer 200 (true) or 400 (false).
func (s *Server) SetReady(ready bool) { s.ready.Store(ready) }

// SetModelReady loads (true) or unloads (false) a model, as POST
// /v2/repository/models/{m}/load and /unload do. An unloaded model is listed
// UNAVAILABLE in the repository index and refuses inference.
func (s *Server) SetModelReady(model string, ready bool) error {
	m, ok := s.byName[model]
	if !ok {
		return fmt.Errorf("emulator: unknown model %q", model)
	}
	m.ready.Store(ready)
	return nil
}

// Start listens on addr (the inference API) and, unless metricsAddr is "",
// on metricsAddr (GET /metrics), and serves both until Close or Shutdown.
// Use "127.0.0.1:0" to pick free ports and Addr/MetricsAddr to learn them.
// After Close, Start may be called again.
func (s *Server) Start(addr, metricsAddr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.servers != nil {
		return errors.New("emulator: already serving; Close it before starting again")
	}
	type endpoint struct {
		addr string
		h    http.Handler
		slot int // index into s.addrs
		ln   net.Listener
	}
	eps := []endpoint{{addr: addr, h: s.api, slot: 0}}
	if metricsAddr != "" {
		eps = append(eps, endpoint{addr: metricsAddr, h: s.metrics, slot: 1})
	}
	for i := range eps {
		ln, err := net.Listen("tcp", eps[i].addr)
		if err != nil {
			for _, e := range eps[:i] {
				e.ln.Close()
			}
			return fmt.Errorf("emulator: listen on %q: %w", eps[i].addr, err)
		}
		eps[i].ln = ln
	}
	if s.life.Err() != nil {
		s.life, s.stop = context.WithCancel(context.Background())
	}
	s.addrs = [2]string{}
	s.serveErr = make(chan error, len(eps))
	for _, e := range eps {
		srv := &http.Server{
			Handler:           e.h,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          slog.NewLogLogger(s.opts.Logger.Handler(), slog.LevelWarn),
		}
		s.servers = append(s.servers, srv)
		s.addrs[e.slot] = e.ln.Addr().String()
		go func() {
			err := srv.Serve(e.ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			s.serveErr <- err
		}()
	}
	return nil
}

// Addr is the address the inference API listens on, "" when not serving.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[0]
}

// MetricsAddr is the address GET /metrics listens on, "" when not serving.
func (s *Server) MetricsAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs[1]
}

// Close stops serving at once: listeners and connections close, hanging
// and running batches end. Handlers mounted elsewhere see their batches end
// too. Close is idempotent; the server may Start again afterwards.
func (s *Server) Close() error { return s.stopServing(context.Background(), false) }

// Shutdown stops accepting requests and waits for those in flight to be
// answered or for ctx to end, then closes like Close.
func (s *Server) Shutdown(ctx context.Context) error { return s.stopServing(ctx, true) }

// stopServing shuts the servers down gracefully within ctx when graceful,
// or at once when not.
func (s *Server) stopServing(ctx context.Context, graceful bool) error {
	s.mu.Lock()
	servers, serveErr, cancel := s.servers, s.serveErr, s.stop
	s.servers, s.addrs = nil, [2]string{}
	s.mu.Unlock()

	var errs []error
	for _, srv := range servers {
		if graceful {
			if err := srv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("emulator: graceful shutdown: %w", err))
			}
		}
		if err := srv.Close(); err != nil {
			errs = append(errs, fmt.Errorf("emulator: closing: %w", err))
		}
	}
	cancel()
	for range servers {
		if err := <-serveErr; err != nil {
			errs = append(errs, fmt.Errorf("emulator: serving: %w", err))
		}
	}
	return errors.Join(errs...)
}

// lifeContext is the context running batches end with.
func (s *Server) lifeContext() context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.life
}

// execTime is how long a batch of rows runs on the emulated device: tau(b)
// scaled, spread by Jitter and Realism, after any stall Realism draws.
func (s *Server) execTime(m *model, rows int) time.Duration {
	ms := m.timing.TauMs(rows) * s.opts.TimeScale
	if ms <= 0 {
		return 0
	}
	s.rngMu.Lock()
	if j := s.opts.Jitter; j > 0 {
		ms *= 1 - j + 2*j*s.rng.Float64()
	}
	f, stall := s.batchFactor()
	s.rngMu.Unlock()
	return time.Duration(ms*f*float64(time.Millisecond)) + stall
}

// batchEnergyMJ is zeta(rows), or 0 when the profile has no energy figures.
func (s *Server) batchEnergyMJ(m *model, rows int) float64 {
	if !m.timing.HasEnergy {
		return 0
	}
	return m.timing.ZetaMJ(rows)
}
