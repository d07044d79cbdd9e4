package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/internal/stats"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/orca"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/replay"
)

// Balancers RunFleet knows.
const (
	// BalancerRR sends the n-th request to replica n mod N.
	BalancerRR = "rr"
	// BalancerLeastRequest sends each request to the replica with the
	// fewest requests not yet answered (queued or in a batch).
	BalancerLeastRequest = "least-request"
	// BalancerP2C picks two replicas at random and sends to the one with
	// fewer requests not yet answered.
	BalancerP2C = "p2c"
	// BalancerORCAWRR is weighted round robin with each replica's weight
	// rps / utilization from its ORCA report (package orca), refreshed
	// every WeightPeriod: grpc-go's weighted_round_robin and Envoy's
	// client-side WRR. The weight is the capacity the replica's proxy
	// learnt, mu(B_max).
	BalancerORCAWRR = "orca-wrr"
	// BalancerPack fills the replicas in order: each takes requests while
	// its rate stays below PackTarget times the capacity its ORCA report
	// gives, the rest go on to the next. Replicas that are never needed
	// stay idle (or are scaled away).
	BalancerPack = "pack"
)

// Balancers lists RunFleet's balancers.
var Balancers = []string{BalancerRR, BalancerLeastRequest, BalancerP2C, BalancerORCAWRR, BalancerPack}

// Slowed is p on a GPU factor times slower: every batch takes factor
// times as long and, at the same power, factor times the energy.
func Slowed(p preset.Profile, factor float64) preset.Profile {
	p.AlphaMs *= factor
	p.Tau0Ms *= factor
	p.BetaMJ *= factor
	p.Zeta0MJ *= factor
	return p
}

// Replica is one GPU of a fleet with its proxy.
type Replica struct {
	Profile   preset.Profile
	Policy    policy.Policy // its own instance: replicas plan apart
	Instances int           // default 1
	IdleWatts float64
	Overhead  time.Duration // round trip beyond compute per batch
}

// FleetConfig describes a fleet run: Poisson arrivals at RatePerSec spread
// over Replicas by Balancer.
type FleetConfig struct {
	Replicas   []Replica
	Balancer   string
	RatePerSec float64
	Requests   int // default DefaultRequests
	Seed       uint64
	Window     time.Duration // monitor window, default 1 s
	// WeightPeriod is how often orca-wrr and pack read the ORCA reports
	// (default 1 s, grpc-go's weightUpdatePeriod).
	WeightPeriod time.Duration
	// PackTarget is the share of its capacity pack fills a replica to
	// (default 0.8).
	PackTarget float64
}

// ReplicaResult is one replica's share of a fleet run.
type ReplicaResult struct {
	Requests      int     `json:"requests"`
	Share         float64 `json:"share"`
	MeanLatencyMs float64 `json:"mean_latency_ms"`
	P99LatencyMs  float64 `json:"p99_latency_ms"`
	MeanBatchSize float64 `json:"mean_batch_size"`
	Utilization   float64 `json:"utilization"` // busy share of the fleet's run
	EnergyJ       float64 `json:"energy_j"`
}

// FleetResult is what a fleet run measured. Latency is from arrival to the
// completion of the request's batch.
type FleetResult struct {
	Balancer      string  `json:"balancer"`
	Requests      int     `json:"requests"`
	MeanLatencyMs float64 `json:"mean_latency_ms"`
	P99LatencyMs  float64 `json:"p99_latency_ms"`
	DurationS     float64 `json:"duration_s"`
	// RequestsPerJoule counts every replica's idle power over the whole
	// run; RequestsPerJouleScaledAway leaves out replicas that got no
	// request (an autoscaler would have removed them). Nil without
	// energy figures.
	RequestsPerJoule           *float64        `json:"requests_per_joule"`
	RequestsPerJouleScaledAway *float64        `json:"requests_per_joule_scaled_away"`
	Replicas                   []ReplicaResult `json:"replicas"`
}

func (c *FleetConfig) normalize() error {
	switch {
	case len(c.Replicas) == 0:
		return invalid("Replicas", "a fleet needs at least one replica")
	case !slices.Contains(Balancers, c.Balancer):
		return invalid("Balancer", "unknown balancer %q; one of %v", c.Balancer, Balancers)
	case !(c.RatePerSec > 0) || math.IsInf(c.RatePerSec, 0):
		return invalid("RatePerSec", "arrival rate must be a finite number > 0 per second, got %v", c.RatePerSec)
	case c.Requests < 0:
		return invalid("Requests", "requests must be >= 0, got %d", c.Requests)
	case c.WeightPeriod < 0:
		return invalid("WeightPeriod", "weight period must be >= 0, got %v", c.WeightPeriod)
	case !(c.PackTarget >= 0 && c.PackTarget <= 1):
		return invalid("PackTarget", "pack target must be in (0, 1], got %v", c.PackTarget)
	}
	if c.Requests == 0 {
		c.Requests = DefaultRequests
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.WeightPeriod == 0 {
		c.WeightPeriod = time.Second
	}
	if c.PackTarget == 0 {
		c.PackTarget = 0.8
	}
	return nil
}

// RunFleet simulates a fleet: each replica is a full single-GPU run (its
// own monitor and policy), advanced in step with the others, and each
// arrival goes to the replica the balancer picks from the replicas' state
// at that instant.
func RunFleet(ctx context.Context, c FleetConfig) (FleetResult, error) {
	if err := c.normalize(); err != nil {
		return FleetResult{}, fmt.Errorf("sim fleet: %w", err)
	}
	runs := make([]*replay.Stepper, len(c.Replicas))
	for i, rep := range c.Replicas {
		r, err := replay.NewStepper(Config{Profile: rep.Profile, Policy: rep.Policy,
			Seed: c.Seed + uint64(i)*7919, Window: c.Window, Instances: rep.Instances, IdleWatts: rep.IdleWatts,
			Overhead: rep.Overhead})
		if err != nil {
			return FleetResult{}, fmt.Errorf("sim fleet: replica %d: %w", i+1, err)
		}
		runs[i] = r
	}
	b := newBalancer(c, runs)
	rng := rand.New(rand.NewPCG(c.Seed, 0x666c656574))
	var t time.Duration
	for range c.Requests {
		t += max(time.Duration(rng.ExpFloat64()/c.RatePerSec*float64(time.Second)), 1)
		for _, r := range runs {
			if err := r.Until(ctx, t, false); err != nil {
				return FleetResult{}, err
			}
		}
		if err := runs[b.pick(t)].Arrive(ctx, t); err != nil {
			return FleetResult{}, err
		}
	}
	for _, r := range runs {
		if err := r.Close(ctx); err != nil {
			return FleetResult{}, err
		}
	}
	return fleetResult(c, runs), nil
}

// report is a replica's ORCA report: its rate and the capacity its
// monitor's line gives (0 while unknown).
func report(r *replay.Stepper) (rate, capacity float64) {
	s := r.Monitor().Snapshot()
	// The simulated monitor is seeded with the profile's line: known.
	m := orca.Model{RatePerSec: s.RatePerSec, MaxBatch: s.MaxBatch, Instances: s.Instances, Latency: s.Latency, LineKnown: true}
	return s.RatePerSec, m.CapacityRPS()
}

type balancer struct {
	c    FleetConfig
	runs []*replay.Stepper
	rng  *rand.Rand
	next int
	// orca-wrr: earliest-deadline-first over the weights, as grpc-go's
	// scheduler; pack: the capacities and a per-replica rate estimate.
	weights    []float64
	deadline   []float64
	refreshed  time.Duration
	ewma       []float64 // pack: requests per second sent, time constant WeightPeriod
	ewmaAt     time.Duration
	capacities []float64
}

func newBalancer(c FleetConfig, runs []*replay.Stepper) *balancer {
	n := len(runs)
	return &balancer{c: c, runs: runs, rng: rand.New(rand.NewPCG(c.Seed, 0x62616c616e6365)),
		weights: make([]float64, n), deadline: make([]float64, n), ewma: make([]float64, n), capacities: make([]float64, n),
		refreshed: -1}
}

// refresh reads the ORCA reports every WeightPeriod.
func (b *balancer) refresh(t time.Duration) {
	if b.refreshed >= 0 && t-b.refreshed < b.c.WeightPeriod {
		return
	}
	b.refreshed = t
	known, sum := 0, 0.0
	for i, r := range b.runs {
		rate, mu := report(r)
		b.capacities[i] = mu
		// grpc-go's weight: qps / utilization, with utilization = rate/mu:
		// mu itself, when the replica has both.
		w := 0.0
		if rate > 0 && mu > 0 {
			w = rate / (rate / mu)
		}
		b.weights[i] = w
		if w > 0 {
			known++
			sum += w
		}
	}
	// Replicas without a weight yet get the mean of the others', as grpc-go
	// gives them.
	for i, w := range b.weights {
		if w == 0 {
			if known > 0 {
				b.weights[i] = sum / float64(known)
			} else {
				b.weights[i] = 1
			}
		}
	}
}

func (b *balancer) pick(t time.Duration) int {
	n := len(b.runs)
	switch b.c.Balancer {
	case BalancerRR:
		i := b.next % n
		b.next++
		return i
	case BalancerLeastRequest:
		best := 0
		for i, r := range b.runs {
			if r.Unanswered() < b.runs[best].Unanswered() {
				best = i
			}
		}
		return best
	case BalancerP2C:
		if n == 1 {
			return 0
		}
		i := b.rng.IntN(n)
		j := b.rng.IntN(n - 1)
		if j >= i {
			j++
		}
		if b.runs[j].Unanswered() < b.runs[i].Unanswered() {
			return j
		}
		return i
	case BalancerORCAWRR:
		b.refresh(t)
		best := 0
		for i := range b.deadline {
			if b.deadline[i] < b.deadline[best] {
				best = i
			}
		}
		b.deadline[best] += 1 / b.weights[best]
		return best
	}
	// pack
	b.refresh(t)
	decay := math.Exp(-float64(t-b.ewmaAt) / float64(b.c.WeightPeriod))
	for i := range b.ewma {
		b.ewma[i] *= decay
	}
	b.ewmaAt = t
	pick := -1
	for i := range b.runs {
		if b.capacities[i] > 0 && b.ewma[i] < b.c.PackTarget*b.capacities[i] {
			pick = i
			break
		}
	}
	if pick < 0 { // every replica full: the least loaded
		pick = 0
		for i := range b.runs {
			if b.load(i) < b.load(pick) {
				pick = i
			}
		}
	}
	b.ewma[pick] += 1 / b.c.WeightPeriod.Seconds()
	return pick
}

func (b *balancer) load(i int) float64 {
	if b.capacities[i] <= 0 {
		return math.Inf(1)
	}
	return b.ewma[i] / b.capacities[i]
}

func fleetResult(c FleetConfig, runs []*replay.Stepper) FleetResult {
	res := FleetResult{Balancer: c.Balancer, Replicas: make([]ReplicaResult, len(runs))}
	var all []float64
	var end time.Duration
	totals := make([]replay.Totals, len(runs))
	for i, r := range runs {
		totals[i] = r.Totals()
		all = append(all, totals[i].Latencies...)
		end = max(end, totals[i].LastDone)
	}
	res.Requests = len(all)
	res.DurationS = end.Seconds()
	if res.Requests == 0 {
		return res
	}
	var sum float64
	for _, l := range all {
		sum += l
	}
	res.MeanLatencyMs = sum / float64(len(all))
	slices.Sort(all)
	res.P99LatencyMs = stats.Percentile(all, 99)
	energy := true
	var joules, joulesUsed float64
	for i, t := range totals {
		rr := ReplicaResult{Requests: len(t.Latencies), Share: float64(len(t.Latencies)) / float64(res.Requests)}
		if rr.Requests > 0 {
			s := 0.0
			for _, l := range t.Latencies {
				s += l
			}
			rr.MeanLatencyMs = s / float64(rr.Requests)
			slices.Sort(t.Latencies)
			rr.P99LatencyMs = stats.Percentile(t.Latencies, 99)
			rr.MeanBatchSize = float64(t.Rows) / float64(t.Batches)
		}
		if end > 0 {
			rr.Utilization = t.Busy.Seconds() / end.Seconds()
		}
		if rep := c.Replicas[i]; rep.Profile.HasEnergy {
			// Idle power over the whole fleet run, not only up to this
			// replica's last answer.
			rr.EnergyJ = t.BatchEnergyMJ/1000 + rep.IdleWatts*end.Seconds()
			joules += rr.EnergyJ
			if rr.Requests > 0 {
				joulesUsed += rr.EnergyJ
			}
		} else {
			energy = false
		}
		res.Replicas[i] = rr
	}
	if energy && joules > 0 {
		a, b := float64(res.Requests)/joules, float64(res.Requests)/joulesUsed
		res.RequestsPerJoule, res.RequestsPerJouleScaledAway = &a, &b
	}
	return res
}
