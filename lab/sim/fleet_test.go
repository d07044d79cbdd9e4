package sim

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy"
)

// unequalFleet is the live proof's fleet (lab/fleetrun): googlenet-p4's
// model "simple" (B_max 8) slowed 20 times, twice, and 40 times; mu is the
// full-speed replica's capacity.
func unequalFleet(t testing.TB) (reps []Replica, mu float64) {
	p := Slowed(lookupPreset(t, "googlenet-p4"), 20)
	p.MaxBatch = 8
	for _, pr := range []preset.Profile{p, p, Slowed(p, 2)} {
		reps = append(reps, Replica{Profile: pr, Policy: newPolicy(t, "batchmonitor+", policy.Options{}), IdleWatts: 20})
	}
	return reps, 1000 * 8 / p.TauMs(8)
}

// A fleet of one replica is the single-GPU run of the same arrivals: the
// stepped event loop changes nothing.
func TestFleetOfOneIsARun(t *testing.T) {
	p := lookupPreset(t, "googlenet-p4")
	const n, rate, seed = 5000, 1500.0, 3
	fr, err := RunFleet(context.Background(), FleetConfig{Balancer: BalancerRR, RatePerSec: rate, Requests: n, Seed: seed,
		Replicas: []Replica{{Profile: p, Policy: newPolicy(t, "batchmonitor", policy.Options{}), IdleWatts: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x666c656574))
	var arr []time.Duration
	var at time.Duration
	for range n {
		at += max(time.Duration(rng.ExpFloat64()/rate*float64(time.Second)), 1)
		arr = append(arr, at)
	}
	r, err := Run(context.Background(), Config{Profile: p, Policy: newPolicy(t, "batchmonitor", policy.Options{}), Arrivals: arr, Seed: seed, IdleWatts: 10})
	if err != nil {
		t.Fatal(err)
	}
	if fr.Requests != n || r.Requests != n || fr.MeanLatencyMs != r.MeanLatencyMs || fr.P99LatencyMs != r.P99LatencyMs ||
		*fr.RequestsPerJoule != *r.RequestsPerJoule || fr.Replicas[0].MeanBatchSize != r.MeanBatchSize {
		t.Errorf("fleet of one %+v (%v J/req), run %+v (%v)", fr, *fr.RequestsPerJoule, r, *r.RequestsPerJoule)
	}
}

// At 70% of an unequal fleet's capacity, ORCA weights send the half-speed
// replica half the traffic of the others, and its p99 is a fraction of
// round robin's, which overloads the slow replica (rho 1.17).
func TestFleetBalancers(t *testing.T) {
	reps, mu := unequalFleet(t)
	results := map[string]FleetResult{}
	for _, b := range Balancers {
		for i := range reps {
			reps[i].Policy = newPolicy(t, "batchmonitor+", policy.Options{})
		}
		res, err := RunFleet(context.Background(), FleetConfig{Replicas: reps, Balancer: b, RatePerSec: 0.7 * 2.5 * mu, Requests: 20000, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range res.Replicas {
			n += r.Requests
		}
		if res.Requests != 20000 || n != 20000 {
			t.Fatalf("%s: %d requests answered (%d by replicas), want 20000", b, res.Requests, n)
		}
		results[b] = res
	}
	w := results[BalancerORCAWRR]
	if ratio := w.Replicas[2].Share / ((w.Replicas[0].Share + w.Replicas[1].Share) / 2); math.Abs(ratio-0.5) > 0.15*0.5 {
		t.Errorf("orca-wrr: half-speed replica gets %.3f of a full one's traffic, want 0.5 within 15%%", ratio)
	}
	if rr := results[BalancerRR]; !(w.P99LatencyMs*2 <= rr.P99LatencyMs) {
		t.Errorf("orca-wrr p99 %.1f ms not at most half of rr's %.1f ms", w.P99LatencyMs, rr.P99LatencyMs)
	}
	for _, b := range []string{BalancerLeastRequest, BalancerP2C} {
		if s := results[b].Replicas[2].Share; !(s < results[BalancerRR].Replicas[2].Share) {
			t.Errorf("%s gives the slow replica %.3f, no less than rr", b, s)
		}
	}
}

// At low load, packing onto as few GPUs as the target allows leaves the
// rest without a request: with those scaled away the fleet serves more
// requests per joule than any spreading balancer, within a latency budget
// of twice a full batch's time.
func TestPackingAtLowLoad(t *testing.T) {
	reps, mu := unequalFleet(t)
	run := func(b string) FleetResult {
		for i := range reps {
			reps[i].Policy = newPolicy(t, "batchmonitor+", policy.Options{})
		}
		res, err := RunFleet(context.Background(), FleetConfig{Replicas: reps, Balancer: b, RatePerSec: 0.2 * 2.5 * mu, Requests: 10000, Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	pack, wrr := run(BalancerPack), run(BalancerORCAWRR)
	if pack.Replicas[1].Requests != 0 || pack.Replicas[2].Requests != 0 {
		t.Errorf("pack spread a load of rho 0.5 on one GPU: %+v", pack.Replicas)
	}
	if !(*pack.RequestsPerJouleScaledAway > 1.5**wrr.RequestsPerJoule) {
		t.Errorf("pack %.3f requests/J (idle GPUs scaled away), orca-wrr %.3f", *pack.RequestsPerJouleScaledAway, *wrr.RequestsPerJoule)
	}
	if budget := 2 * reps[0].Profile.TauMs(8); !(pack.MeanLatencyMs < budget) {
		t.Errorf("pack mean latency %.1f ms over the budget %.1f ms", pack.MeanLatencyMs, budget)
	}
}

func TestFleetConfigErrors(t *testing.T) {
	reps, _ := unequalFleet(t)
	for _, c := range []struct {
		field string
		cfg   FleetConfig
	}{
		{"Replicas", FleetConfig{Balancer: BalancerRR, RatePerSec: 1}},
		{"Balancer", FleetConfig{Replicas: reps, Balancer: "random", RatePerSec: 1}},
		{"RatePerSec", FleetConfig{Replicas: reps, Balancer: BalancerRR, RatePerSec: math.Inf(1)}},
		{"PackTarget", FleetConfig{Replicas: reps, Balancer: BalancerPack, RatePerSec: 1, PackTarget: 1.5}},
	} {
		_, err := RunFleet(context.Background(), c.cfg)
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%s: got %v", c.field, err)
		}
	}
	bad := reps[:1:1]
	bad[0].Profile.AlphaMs = -1
	if _, err := RunFleet(context.Background(), FleetConfig{Replicas: bad, Balancer: BalancerRR, RatePerSec: 1}); err == nil {
		t.Error("a replica with a negative alpha accepted")
	}
}
