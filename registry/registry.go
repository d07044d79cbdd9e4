// Package registry keeps the set of models the proxy batches in step with the
// upstream: it discovers them (repository index, model config), gives each a
// monitor seeded from a profile or the upstream's statistics and a policy
// from the configuration, registers it with the dispatcher, and re-reads the
// upstream periodically so loads, unloads and config changes take effect.
package registry

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/monitor"
)

// Upstream is the part of the upstream's management API discovery reads.
type Upstream interface {
	RepositoryIndex(ctx context.Context) ([]triton.IndexEntry, error)
	ModelConfig(ctx context.Context, model string) (*triton.ModelConfig, error)
	ModelStats(ctx context.Context, model string) ([]triton.BatchStat, error)
}

// Queues is the dispatcher as the registry drives it.
type Queues interface {
	SetModel(s dispatcher.ModelSpec) error
	// RetireModel stops batching a model, answering what its queue holds
	// (a later SetModel batches it again).
	RetireModel(name string)
	// Unready is the queues' verdict on the upstream (door.Health): why
	// it should not be sent traffic, "" when it should.
	Unready() string
}

// ErrUnreachable wraps a failure to read the upstream's model list at all,
// as opposed to trouble with one model.
var ErrUnreachable = errors.New("reading the upstream's repository index")

// Models owns the per-model monitors.
type Models struct {
	up     Upstream
	queues Queues
	cfg    *config.Config
	log    *slog.Logger

	mu     sync.Mutex
	models map[string]*entry
	ctx    context.Context      // monitors' lifetime, set by Run
	tried  map[string]time.Time // on-demand lookups, by model
	// looking holds the on-demand lookups in progress, each closed when
	// it ends: the model's other first requests wait for it.
	looking map[string]chan struct{}
	lastErr error
	lastRun time.Time
	// setNames and setOptions are what PUT /policy set at run time, by
	// model ("" for all): the policy's name, and its options by their key
	// in the configuration's policy section, spelt as in the file. They
	// stay until a later change covers the model, or a restart.
	setNames   map[string]string
	setOptions map[string]map[string]string
	// unserved holds the models the configuration names that the upstream
	// does not serve, each with why, as of the last repository index read.
	unserved map[string]string

	// changing holds the models whose configuration Changed is reading
	// again, each true when told again meanwhile (follow.go).
	changing map[string]bool

	// discovered is set once the upstream's model list has been read.
	discovered atomic.Bool

	// statsTicker paces pollStats (nil: a time.Ticker); tests inject their
	// own ticks to see when the poller reads and when it gives up.
	statsTicker func(time.Duration) (<-chan time.Time, func())
}

type entry struct {
	name      string
	mon       *monitor.Monitor
	cancel    context.CancelFunc
	maxBatch  int
	instances int
	batched   bool
	reason    string // why not batched
	seed      string // where the tau(b) seed came from
	warning   string
	policy    InForce // the policy the monitor runs, as set
	probe     string  // where the probe inference came from, or why there is none
	probeReq  dispatcher.Wire
	// queue and half are the model's queue policy and half-precision
	// outputs as last given to its queue: a change gives it them anew.
	queue dispatcher.QueuePolicy
	half  []string
}

// New returns an empty registry; call Discover (or Refresh, then Run).
func New(up Upstream, queues Queues, cfg *config.Config, log *slog.Logger) *Models {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Models{up: up, queues: queues, cfg: cfg, log: log, models: map[string]*entry{}, ctx: context.Background(),
		setNames: map[string]string{}, setOptions: map[string]map[string]string{}}
}

// Ready is the readiness of the proxy (/readyz, grpc.health.v1): the
// upstream's models are read, and, when the queues judge the upstream
// (*dispatcher.Dispatcher's Unready), it neither refuses connections nor
// fails every batched model (see Unready).
func (r *Models) Ready() bool { return r.Unready() == "" }

// Config is the configuration in force: the one the registry was given,
// with the policy PUT /policy set for every model in its policy section
// (a change for one model shows in its Status instead).
func (r *Models) Config() config.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.config()
}

func (r *Models) config() config.Config {
	c := *r.cfg
	if n, ok := r.setNames[""]; ok {
		c.Policy.Name = n
	}
	for k, v := range r.setOptions[""] {
		// Checked when set (SetPolicy).
		_ = config.SetPolicyOption(&c.Policy.Options, k, v)
	}
	return c
}

// Status is one model's state for the status endpoint.
type Status struct {
	Model string `json:"model"`
	// Mode is what the proxy does with the model's inference calls
	// (ModeBatched, ModePassthrough, ModeNotServed); Reason says why
	// when they are not batched.
	Mode    string `json:"mode"`
	Batched bool   `json:"batched"`
	// Policy and Options are the batched model's policy as set (InForce).
	Policy  string         `json:"policy,omitempty"`
	Options map[string]any `json:"options,omitempty"`
	Reason  string         `json:"reason,omitempty"`
	Seed    string         `json:"seed,omitempty"`
	Warning string         `json:"warning,omitempty"`
	// Probe says where the inference that tests the model while it fails
	// comes from (configured, synthesised), or why there is none.
	Probe string            `json:"probe,omitempty"`
	Rule  *monitor.Snapshot `json:"rule,omitempty"`
}

// Statuses returns every known model's state, and every configured model
// the upstream does not serve with a warning saying so, sorted by name.
func (r *Models) Statuses() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.models)+len(r.unserved))
	for name, why := range r.unserved {
		if _, known := r.models[name]; !known {
			out = append(out, Status{Model: name, Mode: ModeNotServed, Reason: "not served by the upstream", Warning: why})
		}
	}
	for _, e := range r.models {
		s := Status{Model: e.name, Mode: modeOf(e.batched), Batched: e.batched, Reason: e.reason, Seed: e.seed, Warning: e.warning, Probe: e.probe,
			Policy: e.policy.Policy, Options: e.policy.Options}
		if why, ok := r.unserved[e.name]; ok {
			s.Warning = strings.TrimPrefix(s.Warning+"; "+why, "; ")
		}
		if e.mon != nil {
			snap := e.mon.Snapshot()
			s.Rule = &snap
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Model < out[j].Model })
	return out
}

// Monitors returns the batched models' monitors, for metrics.
func (r *Models) Monitors() []*monitor.Monitor {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*monitor.Monitor
	for _, e := range r.models {
		if e.mon != nil {
			out = append(out, e.mon)
		}
	}
	return out
}

// Monitor returns a batched model's monitor; false for a model not
// batched or not known.
func (r *Models) Monitor(model string) (*monitor.Monitor, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.models[model]
	if e == nil || !e.batched || e.mon == nil {
		return nil, false
	}
	return e.mon, true
}
