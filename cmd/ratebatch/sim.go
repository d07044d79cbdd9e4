package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/sim"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
)

func init() {
	register("sim", "simulate batching policies on a model profile (discrete-event, virtual clock)", runSim)
}

// simBuiltins is what --policy all runs first, in this order; policies
// registered later follow in name order.
var simBuiltins = []string{policy.NameAdhoc, policy.NameBatchMonitor, policy.NameMaxBatch, policy.NameStatic}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("sim", stderr)
	policies := fs.String("policy", "", "policy to simulate: one of "+strings.Join(policy.Names(), ", ")+
		"; a comma list; or all (one row per policy)")
	model := addProfileFlags(fs)
	rate := fs.Float64("rate", 0, "constant Poisson arrival rate in requests/s")
	rho := fs.Float64("rho", 0, "arrival rate as a load: rho * mu(B_max), where mu(b) = b/tau(b)")
	traceName := fs.String("trace", "", "arrival rate series: a built-in name ("+strings.Join(trace.Names(), ", ")+
		") or a CSV file (columns time_s,rate_rps). "+trace.Paper300+": "+trace.Shape(trace.Paper300))
	traceScale := fs.Float64("trace-scale", 1, "multiply the trace's rates by this factor (keeps its shape)")
	speedup := fs.Float64("speedup", 1, "play the trace this many times faster, keeping its rates, as demo and load do (paper300 with 5 lasts 60 s)")
	requests := fs.Int("requests", 0, fmt.Sprintf("arrivals to simulate (default %d with --rate/--rho; with --trace a cap, 0 = whole trace)", sim.DefaultRequests))
	seed := fs.Uint64("seed", 1, "seed of arrivals and jitter; a seed gives the same arrivals to every policy")
	window := fs.Duration("window", sim.DefaultWindow, "monitor window: how often the arrival rate is measured and the policy plans")
	instances := fs.Int("instances", 1, "batches the server runs at once")
	maxQueueDelay := fs.Float64("max-queue-delay-ms", float64(policy.DefaultMaxQueueDelay)/float64(time.Millisecond),
		"maxbatch: longest the oldest request waits for a full batch of B_max, in ms")
	maxWait := fs.Float64("max-wait-ms", 0, fmt.Sprintf("batchmonitor and static: longest the oldest request of a partial batch waits while the server is free, in ms "+
		"(0 = default: tau(pbs) for batchmonitor, %v for static)", policy.DefaultStaticMaxWait))
	jitter := fs.Float64("jitter", 0, "each batch takes tau(b) times a uniform factor in [1-j, 1+j), 0 <= j < 1")
	idleWatts := fs.Float64("idle-watts", 0, "power drawn while no batch runs, in W (counted only with an energy model)")
	slaMs := fs.Float64("sla-ms", 0, "give every request a deadline this long after arrival (for policies that read it)")
	seriesCSV := fs.String("series-csv", "", "write the per-window time series (rate, batch size, latency) of every policy to this CSV file")
	var opts policy.Options
	fs.IntVar(&opts.Batch, "batch", 8, "static: the exact batch size b")
	fs.StringVar(&opts.LatencyBudget, "latency-budget", "", "budget: mean-latency budget, a factor of ad-hoc's mean latency (1.10x, the default) or a duration (4ms)")
	asJSON := fs.Bool("json", false, "print JSON: one object, or an array with --policy all or a list")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "ratebatch sim: "+format+"\n", a...)
		return errUsage
	}

	prof, err := model.profile(fs)
	if err != nil {
		return usageErr("%v", err)
	}
	set := flagsSet(fs)
	c := sim.Config{
		Profile:   prof,
		Requests:  *requests,
		Seed:      *seed,
		Window:    *window,
		Instances: *instances,
		Jitter:    *jitter,
		IdleWatts: *idleWatts,
		SLA:       msDuration(*slaMs),
		Series:    *seriesCSV != "",
	}
	switch n := countSet(set, "rate", "rho", "trace"); {
	case n == 0:
		return usageErr("give the arrivals: one of --rate, --rho or --trace")
	case n > 1:
		return usageErr("give only one of --rate, --rho and --trace")
	case set["rate"]:
		c.RatePerSec = *rate
	case set["rho"]:
		if !(*rho > 0) {
			return usageErr("--rho must be > 0, got %v", *rho)
		}
		c.RatePerSec = *rho * 1000 * prof.MuPerMs(prof.MaxBatch)
	default:
		tr, err := loadTrace(*traceName)
		if err != nil {
			return usageErr("--trace: %v", err)
		}
		c.Trace = tr
		if set["speedup"] {
			if c.Trace, err = c.Trace.Compress(*speedup); err != nil {
				return usageErr("--speedup: %v", err)
			}
		}
		if set["trace-scale"] {
			if c.Trace, err = c.Trace.Scale(*traceScale); err != nil {
				return usageErr("--trace-scale: %v", err)
			}
		}
	}
	if countSet(set, "trace-scale", "speedup") > 0 && !set["trace"] {
		return usageErr("--trace-scale and --speedup need --trace")
	}
	// The policy's own options are checked by policy.New, the run's by
	// sim.Config.Validate; the flags only add what is theirs: a delay of 0
	// would select maxbatch's default, not "no delay", and a wait is a
	// duration.
	switch {
	case !(*maxQueueDelay > 0):
		return usageErr("--max-queue-delay-ms must be > 0, got %v", *maxQueueDelay)
	case !(*maxWait >= 0):
		return usageErr("--max-wait-ms must be >= 0, got %v", *maxWait)
	}

	opts.MaxQueueDelay, opts.MaxWait = msDuration(*maxQueueDelay), msDuration(*maxWait)
	pols, err := simPolicies(*policies, opts, stderr)
	if err != nil {
		return usageErr("--policy: %v", err)
	}
	if len(pols) == 0 {
		return usageErr("--policy: no policy could be built")
	}
	c.Policy = pols[0]
	if err := c.Validate(); err != nil {
		return usageErr("%v", simFlagErr(err, set))
	}

	results := make([]sim.Result, 0, len(pols))
	for _, p := range pols {
		c.Policy = p
		res, err := sim.Run(ctx, c)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	if *seriesCSV != "" {
		if err := writeSeriesCSV(*seriesCSV, results); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		if len(results) == 1 {
			return enc.Encode(results[0])
		}
		return enc.Encode(results)
	}
	printSimTable(stdout, c, results)
	return nil
}

// simFlagErr names the flag behind the sim.Config field an error is about.
func simFlagErr(err error, set map[string]bool) error {
	var ie *sim.InvalidError
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

// simPolicies builds the policies named by spec: one name, a comma list, or
// all. With all, a registered policy the flags cannot configure is skipped
// with a note, so that adding a policy with required parameters does not
// break the comparison of the others.
func simPolicies(spec string, opts policy.Options, stderr io.Writer) ([]policy.Policy, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("name a policy (%s) or all", strings.Join(policy.Names(), ", "))
	}
	if spec == "all" {
		names := append([]string(nil), simBuiltins...)
		for _, n := range policy.Names() {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		var out []policy.Policy
		for _, n := range names {
			p, err := policy.New(n, opts)
			if err != nil {
				fmt.Fprintf(stderr, "ratebatch sim: skipping %v\n", err)
				continue
			}
			out = append(out, p)
		}
		return out, nil
	}
	var out []policy.Policy
	seen := map[string]bool{}
	for n := range strings.SplitSeq(spec, ",") {
		n = strings.TrimSpace(n)
		if n == "" || seen[n] {
			continue
		}
		seen[n] = true
		p, err := policy.New(n, opts)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no policy in %q", spec)
	}
	return out, nil
}

// loadTrace resolves a built-in trace name, or reads a CSV file when the
// name is not built in and ends in .csv.
func loadTrace(name string) (*trace.Series, error) {
	if !strings.HasSuffix(strings.ToLower(name), ".csv") {
		return trace.Lookup(name)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("reading the trace: %w", err)
	}
	defer f.Close()
	return trace.ReadCSV(f, name)
}

func printSimTable(w io.Writer, c sim.Config, results []sim.Result) {
	p := c.Profile
	energy := "no energy figures"
	if p.HasEnergy {
		energy = fmt.Sprintf("beta %g mJ, zeta0 %g mJ", p.BetaMJ, p.Zeta0MJ)
	}
	load := fmt.Sprintf("Poisson %.6g req/s (rho %.3f)", c.RatePerSec, c.RatePerSec/(1000*p.MuPerMs(p.MaxBatch)))
	if c.Trace != nil {
		load = fmt.Sprintf("trace %s (%v, mean %.1f req/s, peak %.6g req/s)", c.Trace.Name(), c.Trace.Duration(), c.Trace.MeanRate(), c.Trace.MaxRate())
	}
	fmt.Fprintf(w, "model %s: tau(b) = %g*b + %g ms, B_max %d, %s\n", p.Name, p.AlphaMs, p.Tau0Ms, p.MaxBatch, energy)
	fmt.Fprintf(w, "load: %s, seed %d, window %v, instances %d\n\n", load, c.Seed, c.Window, c.Instances)
	// Numbers align right; names are padded so that they read left-aligned.
	width := len("policy")
	for _, r := range results {
		width = max(width, len(r.Policy))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\trequests\tmean ms\tp50 ms\tp99 ms\tmean batch\tthroughput/s\treq/J\t\n", width, "policy")
	for _, r := range results {
		rpj := "-"
		if r.RequestsPerJoule != nil {
			rpj = strconv.FormatFloat(*r.RequestsPerJoule, 'f', 2, 64)
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%.3f\t%.3f\t%.3f\t%.2f\t%.1f\t%s\t\n",
			width, r.Policy, r.Requests, r.MeanLatencyMs, r.P50LatencyMs, r.P99LatencyMs, r.MeanBatchSize, r.ThroughputRPS, rpj)
	}
	tw.Flush()
}

func writeSeriesCSV(path string, results []sim.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing the series: %w", err)
	}
	fmt.Fprintln(f, "policy,start_s,arrivals,rate_rps,batch_size,batches,mean_batch_size,completed,mean_latency_ms")
	for _, r := range results {
		for _, w := range r.Windows {
			fmt.Fprintf(f, "%s,%g,%d,%g,%d,%d,%g,%d,%g\n", r.Policy, w.StartS, w.Arrivals, w.RatePerSec,
				w.BatchSize, w.Batches, w.MeanBatchSize, w.Completed, w.MeanLatencyMs)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the series: %w", err)
	}
	return nil
}

// profileFlags are the model flags shared by commands that need tau(b) and
// zeta(b): a preset, or its fields given one by one.
type profileFlags struct {
	preset                   *string
	alpha, tau0, beta, zeta0 *float64
	bmax                     *int
}

// addProfileFlags registers --preset, --alpha, --tau0, --beta, --zeta0 and
// --bmax on fs.
func addProfileFlags(fs *flag.FlagSet) *profileFlags {
	return &profileFlags{
		preset: fs.String("preset", preset.DefaultPreset, "model profile; one of "+strings.Join(preset.Names(), ", ")+
			". --alpha etc. override its fields; without --preset, --alpha and --tau0 give a custom model"),
		alpha: fs.Float64("alpha", 0, "batch latency slope alpha in ms per request: tau(b) = alpha*b + tau0"),
		tau0:  fs.Float64("tau0", 0, "batch latency intercept tau0 in ms"),
		beta:  fs.Float64("beta", 0, "batch energy slope beta in mJ per request: zeta(b) = beta*b + zeta0"),
		zeta0: fs.Float64("zeta0", 0, "batch energy intercept zeta0 in mJ"),
		bmax:  fs.Int("bmax", 0, "max batch size B_max (custom model default 32)"),
	}
}

// profile returns the preset with the set fields overridden, or the custom
// model when model fields are set without --preset.
func (m *profileFlags) profile(fs *flag.FlagSet) (preset.Profile, error) {
	set := flagsSet(fs)
	custom := !set["preset"] && (set["alpha"] || set["tau0"])
	var p preset.Profile
	if custom {
		if !set["alpha"] || !set["tau0"] {
			return p, errors.New("a custom model needs both --alpha and --tau0 (or name a --preset)")
		}
		p = preset.Profile{Name: "custom", MaxBatch: 32, Source: "flags"}
	} else {
		var err error
		if p, err = preset.Lookup(*m.preset); err != nil {
			return p, fmt.Errorf("--preset: %w", err)
		}
		if set["alpha"] || set["tau0"] || set["beta"] || set["zeta0"] || set["bmax"] {
			p.Name += " (modified)"
		}
	}
	if set["alpha"] {
		p.AlphaMs = *m.alpha
	}
	if set["tau0"] {
		p.Tau0Ms = *m.tau0
	}
	if set["bmax"] {
		p.MaxBatch = *m.bmax
	}
	if set["beta"] || set["zeta0"] {
		if custom && !(set["beta"] && set["zeta0"]) {
			return p, errors.New("an energy model needs both --beta and --zeta0")
		}
		if set["beta"] {
			p.BetaMJ = *m.beta
		}
		if set["zeta0"] {
			p.Zeta0MJ = *m.zeta0
		}
		if !p.HasEnergy && !(set["beta"] && set["zeta0"]) {
			return p, fmt.Errorf("preset %s has no energy figures: give both --beta and --zeta0", p.Name)
		}
		p.HasEnergy = true
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func countSet(set map[string]bool, names ...string) int {
	n := 0
	for _, name := range names {
		if set[name] {
			n++
		}
	}
	return n
}

// msDuration converts milliseconds to a duration.
func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
