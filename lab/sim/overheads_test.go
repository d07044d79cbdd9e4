package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

func TestParseOverheads(t *testing.T) {
	o, over, err := ParseOverheads("overhead_ms=1.2, overhead_per_row_ms=-0.05,hold_lone_ms=0.04,hold_merged_ms=0.1,after_lone_ms=0.01,after_merged_ms=0.08,client_ms=0.3")
	want := Overheads{PerRow: -50 * time.Microsecond, Client: 300 * time.Microsecond,
		Extra: smdp.Extra{HoldLoneMs: 0.04, HoldMergedMs: 0.1, AfterLoneMs: 0.01, AfterMergedMs: 0.08}}
	if err != nil || o != want || over != 1200*time.Microsecond {
		t.Fatalf("got %+v, %v, %v; want %+v, 1.2ms", o, over, err, want)
	}
	for _, bad := range []string{"client_ms", "client_ms=-1", "hold_lone_ms=x", "speed=3", "after_merged_ms=NaN"} {
		if _, _, err := ParseOverheads(bad); err == nil {
			t.Errorf("ParseOverheads(%q) accepted", bad)
		}
	}
}

// On the same arrivals, an ad-hoc run with the live overheads' latency-only
// parts (no hold, so the batches are the same) is slower by exactly the
// client time and each row's wait after its batch, and its monitor learns
// the wait as the live one does.
func TestLiveOverheadsAddToLatency(t *testing.T) {
	p, err := preset.Lookup("googlenet-p4")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Profile: p, Policy: policy.Adhoc{}, RatePerSec: 0.5 * 1000 * p.MuPerMs(p.MaxBatch), Requests: 20000, Seed: 3}
	base, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Live = Overheads{Client: 500 * time.Microsecond, Extra: smdp.Extra{AfterLoneMs: 0.1, AfterMergedMs: 0.2}}
	live, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if live.Batches != base.Batches {
		t.Fatalf("batches %d, want the same %d", live.Batches, base.Batches)
	}
	d := live.MeanLatencyMs - base.MeanLatencyMs
	if !(d > 0.6-1e-6 && d < 0.7+1e-6) {
		t.Errorf("latency moved by %.4g ms, want 0.5 + between 0.1 and 0.2", d)
	}
	cfg.Live = Overheads{Extra: smdp.Extra{HoldLoneMs: 0.3, HoldMergedMs: 0.3}}
	held, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !(held.MeanLatencyMs > base.MeanLatencyMs) || math.IsNaN(held.MeanLatencyMs) {
		t.Errorf("a hold of 0.3 ms per batch: latency %.4g, want above %.4g", held.MeanLatencyMs, base.MeanLatencyMs)
	}
}

// Closed-loop clients: N synchronous clients keep N requests in the
// system (X = N/(R+Z), the interactive response-time law); a lone one
// behind the budget policy never waits for a partner, so its latency is
// ad-hoc's, the batch time alone.
func TestClosedLoopClients(t *testing.T) {
	p, err := preset.Lookup("googlenet-p4")
	if err != nil {
		t.Fatal(err)
	}
	think := 2 * time.Millisecond
	for _, n := range []int{1, 4} {
		res := map[string]Result{}
		for _, name := range []string{policy.NameAdhoc, policy.NameBudget} {
			pol := newPolicy(t, name, policy.Options{})
			r, err := Run(context.Background(), Config{Profile: p, Policy: pol, Clients: n, Think: think, Requests: 20000, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			// X = N / (R + Z), within the end effects of a finite run.
			want := float64(n) / ((r.MeanLatencyMs + 2) / 1000)
			if math.Abs(r.ThroughputRPS/want-1) > 0.01 {
				t.Errorf("%d clients, %s: throughput %.1f/s, want N/(R+Z) = %.1f", n, name, r.ThroughputRPS, want)
			}
			res[name] = r
		}
		if n == 1 {
			ad, bu := res[policy.NameAdhoc], res[policy.NameBudget]
			if tau := p.TauMs(1); math.Abs(ad.MeanLatencyMs-tau) > 1e-3 || math.Abs(bu.MeanLatencyMs-tau) > 1e-3 || bu.MeanBatchSize != 1 {
				t.Errorf("one client: ad-hoc %.4g ms, budget %.4g ms (batch %.3g); want tau(1) = %.4g ms both, batches of 1",
					ad.MeanLatencyMs, bu.MeanLatencyMs, bu.MeanBatchSize, tau)
			}
		}
		t.Logf("%d clients, think %v: ad-hoc %.3f ms batch %.2f, budget %.3f ms batch %.2f", n, think,
			res[policy.NameAdhoc].MeanLatencyMs, res[policy.NameAdhoc].MeanBatchSize, res[policy.NameBudget].MeanLatencyMs, res[policy.NameBudget].MeanBatchSize)
	}
}

// A closed loop of 2-8 clients thinking 0.3 ms (the think time the proxy
// measured for perf_analyzer's clients): the budget policy plans the loop
// exactly (policy.FiniteRule), waits for the whole group, and is faster
// and cheaper than ad-hoc at once, as the exact optimum says (ALGORITHMS
// "The closed loop, planned live"); at 16 clients B_max 8 is full either
// way and it is ad-hoc.
func TestBudgetWaitsForTheClosedLoop(t *testing.T) {
	p := lookupPreset(t, "googlenet-p4")
	p.MaxBatch = 8
	for _, tt := range []struct {
		clients          int
		minGain, maxGain float64 // requests per joule over ad-hoc's
	}{
		{2, 0.25, 0.5},
		{4, 0.15, 0.35},
		{8, 0.08, 0.2},
		{16, -0.005, 0.005},
	} {
		res := map[string]Result{}
		for _, name := range []string{policy.NameAdhoc, policy.NameBudget} {
			pol := newPolicy(t, name, policy.Options{})
			r, err := Run(context.Background(), Config{Profile: p, Policy: pol, Clients: tt.clients, Think: 300 * time.Microsecond,
				IdleWatts: 20, Requests: 160000, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			res[name] = r
		}
		ad, bu := res[policy.NameAdhoc], res[policy.NameBudget]
		gain := *bu.RequestsPerJoule / *ad.RequestsPerJoule - 1
		t.Logf("%d clients: ad-hoc %.3f ms batch %.2f %.4g req/J, budget %.3f ms batch %.2f %.4g req/J (%+.1f%%)", tt.clients,
			ad.MeanLatencyMs, ad.MeanBatchSize, *ad.RequestsPerJoule, bu.MeanLatencyMs, bu.MeanBatchSize, *bu.RequestsPerJoule, 100*gain)
		if gain < tt.minGain || gain > tt.maxGain {
			t.Errorf("%d clients: budget %+.1f%% requests per joule over ad-hoc, want %+.1f%% to %+.1f%%", tt.clients, 100*gain, 100*tt.minGain, 100*tt.maxGain)
		}
		if bu.MeanLatencyMs > ad.MeanLatencyMs*1.001 {
			t.Errorf("%d clients: budget %.4g ms against ad-hoc's %.4g: waiting for the group should cost no latency", tt.clients, bu.MeanLatencyMs, ad.MeanLatencyMs)
		}
		// The live trim runs ad-hoc for one slice in ten (its reference)
		// and the first seconds are ad-hoc too (the learning phase, then
		// holds from half the slack): most batches, not all, hold the
		// group.
		if tt.clients <= p.MaxBatch && bu.MeanBatchSize < 0.85*float64(tt.clients) {
			t.Errorf("%d clients: mean batch %.3g, want the whole group", tt.clients, bu.MeanBatchSize)
		}
	}
}
