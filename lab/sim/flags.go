package sim

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
)

// Flags are `ratebatch sim`'s flags; those that map one to one onto Config
// and a policy's options are bound to them directly.
type Flags struct {
	c Config
	// The policies' options the flags set, and all of them as the
	// policies are built from them (opts).
	static                            policy.StaticOptions
	budget                            policy.BudgetOptions
	smdp                              policy.SMDPOptions
	opts                              policy.Options
	model                             *preset.Flags
	policies, traceName, seriesCSV    string
	overheads, realism                string
	trim                              bool
	rate, rho, traceScale, speedup    float64
	maxQueueDelayMs, maxWaitMs, slaMs float64
	// JSON prints JSON: one object, or an array with several policies.
	JSON  bool
	fleet FleetSpec
}

// BindFlags binds sim's flags to fs.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	fs.StringVar(&f.policies, "policy", config.Default().Policy.Name, "policy to simulate: one of "+strings.Join(policy.Names(), ", ")+
		"; a comma list; or all (one row per policy); the default is serve's")
	f.model = preset.BindFlags(fs)
	fs.Float64Var(&f.rate, "rate", 0, "constant Poisson arrival rate in requests/s")
	fs.Float64Var(&f.rho, "rho", 0, "arrival rate as a load: rho * mu(B_max), where mu(b) = b/tau(b)")
	fs.StringVar(&f.traceName, "trace", "", "arrival rate series: a built-in name ("+strings.Join(trace.Names(), ", ")+
		") or a CSV file (columns time_s,rate_rps). "+trace.Paper300+": "+trace.Shape(trace.Paper300))
	fs.Float64Var(&f.traceScale, "trace-scale", 1, "multiply the trace's rates by this factor (keeps its shape)")
	fs.Float64Var(&f.speedup, "speedup", 1, "play the trace this many times faster, keeping its rates, as demo and load do (paper300 with 5 lasts 60 s)")
	fs.IntVar(&f.c.Requests, "requests", 0, fmt.Sprintf("arrivals to simulate (default %d with --rate/--rho; with --trace a cap, 0 = whole trace)", DefaultRequests))
	fs.Uint64Var(&f.c.Seed, "seed", 1, "seed of arrivals and jitter; a seed gives the same arrivals to every policy")
	fs.DurationVar(&f.c.Window, "window", DefaultWindow, "monitor window: how often the arrival rate is measured and the policy plans")
	fs.IntVar(&f.c.Instances, "instances", 1, "batches the server runs at once")
	fs.Float64Var(&f.maxQueueDelayMs, "max-queue-delay-ms", float64(policy.DefaultMaxQueueDelay)/float64(time.Millisecond),
		"maxbatch: longest the oldest request waits for a full batch of B_max, in ms")
	fs.Float64Var(&f.maxWaitMs, "max-wait-ms", 0, fmt.Sprintf("batchmonitor and static: longest the oldest request of a partial batch waits while the server is free, in ms "+
		"(0 = default: tau(pbs) for batchmonitor, %v for static)", policy.DefaultStaticMaxWait))
	fs.Float64Var(&f.c.Jitter, "jitter", 0, "each batch takes tau(b) times a uniform factor in [1-j, 1+j), 0 <= j < 1")
	fs.StringVar(&f.realism, "realism", "exact", "each batch's time drawn around tau(b), its mean, as the emulator's --realism draws it: one of "+
		strings.Join(emulator.RealismNames(), ", ")+" (the spread, tail and stalls; the per-request overhead is --overheads')")
	fs.Float64Var(&f.c.IdleWatts, "idle-watts", 0, "power drawn while no batch runs, in W (counted only with an energy model)")
	fs.Float64Var(&f.slaMs, "sla-ms", 0, "give every request a deadline this long after arrival (for policies that read it)")
	fs.IntVar(&f.c.Clients, "clients", 0, "closed-loop clients: each sends a request, waits for its answer, thinks --think and sends the next (perf_analyzer's concurrency mode); alone or with --rate/--trace")
	fs.DurationVar(&f.c.Think, "think", 0, "closed-loop clients: time between an answer and the client's next request")
	fs.StringVar(&f.overheads, "overheads", "", "the live proxy's time outside the server's compute, key=value ms as its /status shows them under rule.outside (overhead_ms=1,overhead_per_row_ms=0.05,hold_lone_ms=..,hold_merged_ms=..,after_lone_ms=..,after_merged_ms=..) and client_ms: absolute latencies then match the live proxy's")
	fs.StringVar(&f.seriesCSV, "series-csv", "", "write the per-window time series (rate, batch size, latency) of every policy to this CSV file")
	fs.IntVar(&f.static.Batch, "batch", 8, "static: the exact batch size b")
	fs.StringVar(&f.budget.LatencyBudget, "latency-budget", "", "budget: mean-latency budget, a factor of ad-hoc's mean latency (1.10x, the default) or a duration (4ms)")
	fs.StringVar(&f.budget.TailBudget, "tail-budget", "", "budget: p99 budget, a factor of ad-hoc's p99 (1.20x, the default) or off")
	fs.StringVar(&f.budget.CapacityFloor, "capacity-floor", "", "budget: the share of ad-hoc's capacity under any absolute p99 bound the tail budget keeps (0.97, the default) or off")
	fs.DurationVar(&f.budget.SLOP99, "slo-p99", 0, "budget: the p99 to keep under (15ms): the most requests per joule within it, no mean budget unless --latency-budget is set")
	fs.Float64Var(&f.smdp.W1, "w1", 0, "smdp: weight of mean latency (per ms) in the cost (w1 and w2 both 0: latency only)")
	fs.BoolVar(&f.trim, "trim", false, "budget: run the live trim as serve does (ad-hoc a tenth of the time, the budget re-aimed by what the calls lived); off, the plan alone, which the simulator's exact model makes right")
	fs.Float64Var(&f.smdp.W2, "w2", 0, "smdp: weight of mean power (per W) in the cost; raise it to trade latency for energy (needs energy figures)")
	fs.BoolVar(&f.JSON, "json", false, "print JSON: one object, or an array with --policy all or a list")
	fs.IntVar(&f.fleet.Replicas, "replicas", 0, "simulate a fleet of this many GPUs, each with its own proxy running --policy (--rho is then of the fleet's capacity)")
	fs.StringVar(&f.fleet.Balancers, "balancer", "all", "--replicas: how requests are spread: "+strings.Join(Balancers, ", ")+"; a comma list; or all")
	fs.StringVar(&f.fleet.Speeds, "replica-speeds", "", "--replicas: relative speed of each replica, e.g. 1,1,0.5 (one value: all)")
	fs.StringVar(&f.fleet.Presets, "replica-presets", "", "--replicas: preset of each replica (one value: all; empty: the model flags')")
	fs.StringVar(&f.fleet.IdleWatts, "replica-idle-watts", "", "--replicas: idle power of each replica in W (empty: --idle-watts)")
	fs.Float64Var(&f.fleet.PackTarget, "pack-target", 0.8, "--replicas, balancer pack: share of its capacity a GPU is filled to before the next one gets load")
	return f
}

// Run simulates the run the flags describe: c and pols from Config. A
// fleet's errors of configuration are *FlagError, the caller's input.
func (f *Flags) Run(ctx context.Context, c Config, pols []policy.Policy, set map[string]bool, stdout io.Writer) error {
	if f.fleet.Replicas != 0 {
		return f.runFleet(ctx, c, pols, set, stdout)
	}
	results, err := RunAll(ctx, c, pols)
	if err != nil {
		return err
	}
	if f.seriesCSV != "" {
		if err := loadreport.WriteFile(f.seriesCSV, func(w io.Writer) error { return WriteSeriesCSV(w, results) }); err != nil {
			return fmt.Errorf("writing the series: %w", err)
		}
	}
	if f.JSON {
		if len(results) == 1 {
			return json.NewEncoder(stdout).Encode(results[0])
		}
		return json.NewEncoder(stdout).Encode(results)
	}
	WriteTable(stdout, c, results)
	return nil
}

// FlagError is an error of the flags' values, found only when the run is
// built: the caller's input, not a failure of the run.
type FlagError struct{ Err error }

func (e *FlagError) Error() string { return e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// Config is the run the flags describe and its policies; set names the
// flags given, skipped hears of the policies of "all" that could not be
// built. An error is a usage error.
func (f *Flags) Config(set map[string]bool, skipped func(error)) (Config, []policy.Policy, error) {
	c := f.c
	prof, err := f.model.Profile()
	if err != nil {
		return c, nil, err
	}
	c.Profile, c.SLA, c.Series = prof, msDuration(f.slaMs), f.seriesCSV != ""
	if c.Live, c.Overhead, err = ParseOverheads(f.overheads); err != nil {
		return c, nil, fmt.Errorf("--overheads: %w", err)
	}
	if r, err := emulator.LookupRealism(f.realism); err != nil {
		return c, nil, fmt.Errorf("--realism: %w", err)
	} else if !r.Exact() {
		c.Spread = r
	}
	arr := Arrivals{Rate: given(set, "rate", &f.rate), Rho: given(set, "rho", &f.rho),
		Speedup: given(set, "speedup", &f.speedup), Scale: given(set, "trace-scale", &f.traceScale)}
	if set["trace"] {
		arr.Trace = f.traceName
	}
	if err := arr.Apply(&c); err != nil {
		return c, nil, err
	}
	// The policy's own options are checked by policy.New, the run's by
	// sim.Config.Validate; the flags only add what is theirs: a delay of 0
	// would select maxbatch's default, not "no delay", and a wait is a
	// duration.
	switch {
	case !(f.maxQueueDelayMs > 0):
		return c, nil, fmt.Errorf("--max-queue-delay-ms must be > 0, got %v", f.maxQueueDelayMs)
	case !(f.maxWaitMs >= 0):
		return c, nil, fmt.Errorf("--max-wait-ms must be >= 0, got %v", f.maxWaitMs)
	}
	budget := f.budget
	budget.NoTrim = !f.trim
	opts := policy.NewOptions(f.static, budget, f.smdp, policy.MaxBatchOptions{MaxQueueDelay: msDuration(f.maxQueueDelayMs)})
	policy.Each(&opts, func(h *policy.HoldOptions) { h.MaxWait = msDuration(f.maxWaitMs) })
	// A simulated run must not depend on the machine's speed.
	policy.Each(&opts, func(s *policy.SolveOptions) { s.SolveFree = true })
	f.opts = opts // a fleet builds one policy per replica from them
	pols, err := Policies(f.policies, opts, skipped)
	if err != nil {
		return c, nil, fmt.Errorf("--policy: %w", err)
	}
	if len(pols) == 0 {
		return c, nil, errors.New("--policy: no policy could be built")
	}
	c.Policy = pols[0]
	if err := c.Validate(); err != nil {
		return c, nil, flagErr(err, set)
	}
	return c, pols, nil
}

// flagErr names the flag behind the Config field an error is about.
func flagErr(err error, set map[string]bool) error {
	var ie *InvalidError
	if !errors.As(err, &ie) {
		return err
	}
	flag := map[string]string{"Requests": "requests", "Window": "window", "Instances": "instances",
		"Jitter": "jitter", "IdleWatts": "idle-watts", "SLA": "sla-ms", "RatePerSec": "rate"}[ie.Field]
	if ie.Field == "RatePerSec" && set["rho"] {
		flag = "rho"
	}
	if flag == "" {
		return err
	}
	return fmt.Errorf("--%s: %w", flag, err)
}

// runFleet runs --replicas: the fleet once per balancer.
func (f *Flags) runFleet(ctx context.Context, c Config, pols []policy.Policy, set map[string]bool, stdout io.Writer) error {
	if len(pols) != 1 {
		return &FlagError{fmt.Errorf("--replicas runs one --policy on every replica, got %d", len(pols))}
	}
	if set["rho"] {
		f.fleet.Rho = f.rho
	}
	name := pols[0].Name()
	newPolicy := func() (policy.Policy, error) { return policy.New(name, f.opts) }
	reps, err := f.fleet.Fleet(c, newPolicy)
	if err != nil {
		return &FlagError{err}
	}
	results, err := RunFleets(ctx, c, f.fleet, newPolicy)
	if err != nil {
		return &FlagError{err}
	}
	if f.JSON {
		return json.NewEncoder(stdout).Encode(results)
	}
	rate := c.RatePerSec
	if f.fleet.Rho > 0 {
		rate = f.fleet.Rho * FleetCapacity(reps)
	}
	WriteFleetTable(stdout, reps, name, rate, c.Seed, results)
	return nil
}

// given is v when the flag name was set, else nil: an optional value.
func given[T any](set map[string]bool, name string, v *T) *T {
	if set[name] {
		return v
	}
	return nil
}

// msDuration converts milliseconds to a duration.
func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
