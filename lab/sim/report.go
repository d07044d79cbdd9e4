package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
)

// Builtins is what Policies("all") runs first, in this order; policies
// registered later follow in name order.
var Builtins = []string{policy.NameAdhoc, policy.NameBatchMonitor, policy.NameMaxBatch, policy.NameStatic}

// Policies builds the policies named by spec: one name, a comma list, or
// all. With all, a registered policy opts cannot configure is skipped and
// passed to skipped, so that adding a policy with required parameters does
// not break the comparison of the others. Their solves are not metered
// (policy.SolveOptions.SolveFree): a simulated run does not depend on the
// machine's speed.
func Policies(spec string, opts policy.Options, skipped func(error)) ([]policy.Policy, error) {
	policy.Each(&opts, func(s *policy.SolveOptions) { s.SolveFree = true })
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("name a policy (%s) or all", strings.Join(policy.Names(), ", "))
	}
	if spec == "all" {
		names := slices.Clone(Builtins)
		for _, n := range policy.Names() {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		var out []policy.Policy
		for _, n := range names {
			p, err := policy.New(n, opts)
			if err != nil {
				skipped(err)
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

// RunAll runs c once per policy, each on the same arrivals (c.Seed).
func RunAll(ctx context.Context, c Config, pols []policy.Policy) ([]Result, error) {
	results := make([]Result, 0, len(pols))
	for _, p := range pols {
		c.Policy = p
		res, err := Run(ctx, c)
		if err != nil {
			return nil, err
		}
		results = append(results, res)
	}
	return results, nil
}

// WriteTable prints the run's model and load, then one row per result:
// the sim command's table.
func WriteTable(w io.Writer, c Config, results []Result) {
	p := c.Profile
	energy := "no energy figures"
	if p.HasEnergy {
		energy = fmt.Sprintf("beta %g mJ, zeta0 %g mJ", p.BetaMJ, p.Zeta0MJ)
	}
	load := fmt.Sprintf("Poisson %.6g req/s (rho %.3f)", c.RatePerSec, c.RatePerSec/(1000*p.MuPerMs(p.MaxBatch)))
	if tr, ok := c.Trace.(*trace.Series); ok {
		load = fmt.Sprintf("trace %s (%v, mean %.1f req/s, peak %.6g req/s)", tr.Name(), tr.Duration(), tr.MeanRate(), tr.MaxRate())
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
	for _, r := range results {
		if r.PhaseS != nil {
			fmt.Fprintf(w, "%s: %s\n", r.Policy, phasesLine(r))
		}
	}
}

// phasesLine says how long a run spent in each phase of a policy that
// earns its holds, and when it first held.
func phasesLine(r Result) string {
	var parts []string
	for _, ph := range []string{policy.PhaseLearning, policy.PhaseHolding, policy.PhaseAdhoc} {
		if s := r.PhaseS[ph]; s > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f s", ph, s))
		}
	}
	held := "never held"
	if r.HoldFromS >= 0 {
		held = fmt.Sprintf("first held at %.1f s", r.HoldFromS)
	}
	return strings.Join(parts, ", ") + "; " + held
}

// WriteSeriesCSV writes every result's per-window series (c.Series) as
// one CSV, a row per policy and window.
func WriteSeriesCSV(w io.Writer, results []Result) error {
	fmt.Fprintln(w, "policy,start_s,arrivals,rate_rps,batch_size,batches,mean_batch_size,completed,mean_latency_ms,phase")
	for _, r := range results {
		for _, win := range r.Windows {
			if _, err := fmt.Fprintf(w, "%s,%g,%d,%g,%d,%d,%g,%d,%g,%s\n", r.Policy, win.StartS, win.Arrivals, win.RatePerSec,
				win.BatchSize, win.Batches, win.MeanBatchSize, win.Completed, win.MeanLatencyMs, win.Phase); err != nil {
				return err
			}
		}
	}
	return nil
}
