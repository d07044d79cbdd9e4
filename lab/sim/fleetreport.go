package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy"
)

// FleetSpec is a fleet as the sim command's flags give it. The lists have
// one value per replica, or one value for all.
type FleetSpec struct {
	Replicas  int
	Balancers string // a name, a comma list, or all
	// Speeds are relative speeds (1 the profile's, 0.5 half: every batch
	// twice as long and, at the same power, twice the energy).
	Speeds    string
	Presets   string // presets per replica; empty: the run's profile
	IdleWatts string // W per replica; empty: the run's IdleWatts
	// Rho, when > 0, is the load as a share of the fleet's capacity, the
	// sum of the replicas' mu(B_max); else the run's RatePerSec is the
	// fleet's total.
	Rho        float64
	PackTarget float64
}

// list splits a per-replica list: n values, or one for all, or none.
func list(s string, n int, what string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	v := strings.Split(s, ",")
	for i := range v {
		v[i] = strings.TrimSpace(v[i])
	}
	switch len(v) {
	case 1:
		return slices.Repeat(v, n), nil
	case n:
		return v, nil
	}
	return nil, fmt.Errorf("%s: %d values for %d replicas (give one, or one per replica)", what, len(v), n)
}

// Fleet builds the replicas spec describes from the run's profile, idle
// power and instances, each with its own policy from newPolicy.
func (spec FleetSpec) Fleet(base Config, newPolicy func() (policy.Policy, error)) ([]Replica, error) {
	n := spec.Replicas
	if n < 1 || n > 1024 {
		return nil, fmt.Errorf("replicas: want 1 to 1024, got %d", n)
	}
	presets, err := list(spec.Presets, n, "replica presets")
	if err != nil {
		return nil, err
	}
	speeds, err := list(spec.Speeds, n, "replica speeds")
	if err != nil {
		return nil, err
	}
	idles, err := list(spec.IdleWatts, n, "replica idle watts")
	if err != nil {
		return nil, err
	}
	reps := make([]Replica, n)
	for i := range reps {
		p := base.Profile
		if presets != nil {
			if p, err = preset.Lookup(presets[i]); err != nil {
				return nil, fmt.Errorf("replica %d: %w", i+1, err)
			}
		}
		if speeds != nil {
			s, err := strconv.ParseFloat(speeds[i], 64)
			if err != nil || !(s > 0) || s > 1e6 {
				return nil, fmt.Errorf("replica %d: speed %q: want a number > 0", i+1, speeds[i])
			}
			p = Slowed(p, 1/s)
		}
		idle := base.IdleWatts
		if idles != nil {
			if idle, err = strconv.ParseFloat(idles[i], 64); err != nil {
				return nil, fmt.Errorf("replica %d: idle watts %q: %w", i+1, idles[i], err)
			}
		}
		pol, err := newPolicy()
		if err != nil {
			return nil, err
		}
		reps[i] = Replica{Profile: p, Policy: pol, Instances: base.Instances, IdleWatts: idle, Overhead: base.Overhead}
	}
	return reps, nil
}

// RunFleets runs the fleet spec describes once per balancer, each on the
// same arrivals (base.Seed): Poisson at base.RatePerSec, or at spec.Rho of
// the fleet's capacity.
func RunFleets(ctx context.Context, base Config, spec FleetSpec, newPolicy func() (policy.Policy, error)) ([]FleetResult, error) {
	if base.Trace != nil || base.Arrivals != nil {
		return nil, fmt.Errorf("a fleet runs at a constant rate: give --rate or --rho, not a trace")
	}
	names := Balancers
	if s := strings.TrimSpace(spec.Balancers); s != "" && s != "all" {
		names = nil
		for b := range strings.SplitSeq(s, ",") {
			names = append(names, strings.TrimSpace(b))
		}
	}
	var out []FleetResult
	for _, b := range names {
		reps, err := spec.Fleet(base, newPolicy)
		if err != nil {
			return nil, err
		}
		rate := base.RatePerSec
		if spec.Rho > 0 {
			rate = spec.Rho * FleetCapacity(reps)
		}
		res, err := RunFleet(ctx, FleetConfig{Replicas: reps, Balancer: b, RatePerSec: rate, Requests: base.Requests,
			Seed: base.Seed, Window: base.Window, PackTarget: spec.PackTarget})
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// FleetCapacity is the sum of the replicas' mu(B_max), requests/s.
func FleetCapacity(reps []Replica) float64 {
	sum := 0.0
	for _, r := range reps {
		sum += 1000 * r.Profile.MuPerMs(r.Profile.MaxBatch) * float64(max(r.Instances, 1))
	}
	return sum
}

// WriteFleetTable prints the fleet, then one row per balancer: the sim
// command's table with --replicas.
func WriteFleetTable(w io.Writer, reps []Replica, policyName string, rate float64, seed uint64, results []FleetResult) {
	capacity := FleetCapacity(reps)
	fmt.Fprintf(w, "fleet of %d, policy %s on each; capacity %.6g req/s; Poisson %.6g req/s (rho %.3f of the fleet), seed %d\n",
		len(reps), policyName, capacity, rate, rate/capacity, seed)
	for i, r := range reps {
		p := r.Profile
		fmt.Fprintf(w, "  replica %d: %s tau(b) = %.4g*b + %.4g ms, B_max %d, mu %.6g req/s, idle %g W\n",
			i+1, p.Name, p.AlphaMs, p.Tau0Ms, p.MaxBatch, 1000*p.MuPerMs(p.MaxBatch), r.IdleWatts)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-14s\trequests\tmean ms\tp99 ms\treq/J\treq/J idle scaled away\tshares\t\n", "balancer")
	for _, r := range results {
		rpj, away := "-", "-"
		if r.RequestsPerJoule != nil {
			rpj = strconv.FormatFloat(*r.RequestsPerJoule, 'f', 3, 64)
			away = strconv.FormatFloat(*r.RequestsPerJouleScaledAway, 'f', 3, 64)
		}
		var shares []string
		for _, s := range r.Replicas {
			shares = append(shares, strconv.FormatFloat(s.Share, 'f', 3, 64))
		}
		fmt.Fprintf(tw, "%-14s\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t\n", r.Balancer, r.Requests, r.MeanLatencyMs, r.P99LatencyMs, rpj, away, strings.Join(shares, " "))
	}
	tw.Flush()
}
