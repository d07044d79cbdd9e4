package timing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// TestBudgetLiveOnPaper300 is the latency budget's live figure (docs/
// RESULTS.md): paper300 played 10x faster, the same seeded arrivals through
// a fresh proxy and a fresh emulator in realistic mode (`rough`) per policy:
// ad-hoc, the paper's batchmonitor, the default batchmonitor+, and the
// budget policy at 1.10x and at the latency batchmonitor reached relative
// to ad-hoc (so the two are compared at the same latency). Requests per
// joule are the emulator's: rows answered over the energy its device used.
//
// It asserts what the budget promises, with room for a live run's noise:
// every request answered, the budget policy's mean latency within its
// budget of ad-hoc's (+5%), and at least ad-hoc's requests per joule.
func TestBudgetLiveOnPaper300(t *testing.T) {
	timing(t)
	if !servertest.Long() {
		t.Skip("a 2.5-minute live comparison: RATEBATCH_LONG=1")
	}
	rough, err := emulator.LookupRealism("rough")
	if err != nil {
		t.Fatal(err)
	}
	base, _ := preset.Lookup("googlenet-p4")
	tr, err := trace.Lookup(trace.Paper300)
	if err != nil {
		t.Fatal(err)
	}
	if tr, err = tr.Compress(10); err != nil {
		t.Fatal(err)
	}
	type result struct {
		name           string
		ok, sched      int64
		meanMs, p99Ms  float64
		batch, rpj, jj float64
	}
	run := func(name, pol, budget string) result {
		em, err := emulator.New(emulator.Options{Profile: base, TimeScale: simLiveScale, Realism: rough, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := em.Start("127.0.0.1:0", ""); err != nil {
			t.Fatal(err)
		}
		defer em.Close()
		lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
			c.Policy.Window, c.Policy.Name = time.Second, pol
			c.Policy.LatencyBudget = budget
		})
		defer lt.Stop()
		j0, _ := em.EnergyJoules()
		res, err := loadgen.Run(context.Background(), loadgen.Config{
			Target: lt.Base, Model: emulator.SimpleModel, Rate: tr, Duration: tr.Duration(), Seed: 1, Binary: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		j1, _ := em.EnergyJoules()
		r := result{name: name, ok: res.Summary.OK, sched: res.Summary.Scheduled, meanMs: res.Summary.MeanLatencyMs,
			p99Ms: res.Summary.P99LatencyMs, batch: lt.MeanBatch(t), jj: j1 - j0}
		r.rpj = float64(r.ok) / r.jj
		return r
	}
	adhoc := run(policy.NameAdhoc, policy.NameAdhoc, "")
	bm := run(policy.NameBatchMonitor, policy.NameBatchMonitor, "")
	results := []result{adhoc, bm, run(policy.NameBatchMonitorPlus, policy.NameBatchMonitorPlus, "")}
	budgets := []float64{1.10}
	if f := bm.meanMs / adhoc.meanMs; f > 1.10 {
		budgets = append(budgets, f)
	}
	for _, f := range budgets {
		spec := fmt.Sprintf("%.2fx", f)
		results = append(results, run("budget "+spec, policy.NameBudget, spec))
	}
	t.Logf("paper300/10 on the rough emulator (googlenet-p4 x%d on simple, B_max 8), seed 1:", simLiveScale)
	t.Logf("| policy | answered | mean batch | mean latency | vs adhoc | p99 | requests per joule | vs adhoc |")
	t.Logf("|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		t.Logf("| %s | %d of %d | %.2f | %.2f ms | %.2fx | %.1f ms | %.3f | %+.1f%% |", r.name, r.ok, r.sched, r.batch,
			r.meanMs, r.meanMs/adhoc.meanMs, r.p99Ms, r.rpj, 100*(r.rpj/adhoc.rpj-1))
		if r.ok != r.sched {
			t.Errorf("%s: %d of %d answered", r.name, r.ok, r.sched)
		}
	}
	for i, f := range budgets {
		r := results[3+i]
		if r.meanMs > 1.05*f*adhoc.meanMs {
			t.Errorf("%s: mean latency %.2f ms, over its budget %.2fx of ad-hoc's %.2f ms (+5%% for a live run)", r.name, r.meanMs, f, adhoc.meanMs)
		}
		if r.rpj < 0.99*adhoc.rpj {
			t.Errorf("%s: %.3f requests per joule, below ad-hoc's %.3f", r.name, r.rpj, adhoc.rpj)
		}
	}
}

// TestBudgetLivePoissonBound is the budget's promise on the arrivals its
// plan assumes (issue 31): Poisson load at rho 0.2, 0.5 and 0.8 of the
// line the proxy lives, through one proxy in front of the exact emulator
// (googlenet-p4 slowed simLiveScale times on simple, B_max 8), ad-hoc and
// budget 1.10x alternated three times in 8 s segments, so both share the
// machine's moments. It asserts, pooled over the segments: every request
// answered, budget's mean latency within its budget of ad-hoc's (+5% for a
// live run on a shared machine), and at least ad-hoc's requests per joule
// less 1%. scripts/budget-grid.sh runs the wider grid.
func TestBudgetLivePoissonBound(t *testing.T) {
	timing(t)
	if !servertest.Long() {
		t.Skip("a 5-minute live comparison: RATEBATCH_LONG=1")
	}
	base, _ := preset.Lookup("googlenet-p4")
	for _, rho := range []float64{0.2, 0.5, 0.8} {
		em, err := emulator.New(emulator.Options{Profile: base, TimeScale: simLiveScale, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := em.Start("127.0.0.1:0", ""); err != nil {
			t.Fatal(err)
		}
		lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
			c.Policy.Window, c.Policy.Name = time.Second, policy.NameAdhoc
		})
		// The line as the proxy lives it: compute, and about 1.2 ms of
		// round trip and proxy around it (measured; /status rule.outside).
		tau8 := simLiveScale*base.TauMs(8) + 1.2
		rate := rho * 1000 * 8 / tau8
		run := func(d time.Duration, seed uint64) (loadgen.Summary, float64) {
			j0, _ := em.EnergyJoules()
			res, err := loadgen.Run(context.Background(), loadgen.Config{Target: lt.Base, Model: emulator.SimpleModel,
				Rate: loadgen.ConstantRate(rate), Duration: d, Seed: seed, Binary: true})
			if err != nil {
				t.Fatal(err)
			}
			j1, _ := em.EnergyJoules()
			return res.Summary, j1 - j0
		}
		run(4*time.Second, 99) // warm-up: the fit, the overheads
		type pooled struct {
			lat, p99, joules float64
			ok, sched        int64
		}
		var ad, bu pooled
		for rep := range 3 {
			for _, budget := range []bool{false, true} {
				var err error
				if budget {
					_, err = lt.Models().SetPolicy(context.Background(), emulator.SimpleModel, policy.NameBudget,
						map[string]string{"latency_budget": "1.10x"})
				} else {
					_, err = lt.Models().SetPolicy(context.Background(), emulator.SimpleModel, policy.NameAdhoc, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				// The new rule under the same load first: the budget's
				// live trim measures ad-hoc and settles (resumed from
				// the last budget segment after the first).
				run(6*time.Second, uint64(rep+50))
				s, j := run(8*time.Second, uint64(rep+1))
				p := &ad
				if budget {
					p = &bu
				}
				p.lat += s.MeanLatencyMs * float64(s.OK)
				p.p99 += s.P99LatencyMs / 3
				p.ok += s.OK
				p.sched += s.Scheduled
				p.joules += j
			}
		}
		lt.Stop()
		em.Close()
		adMean, buMean := ad.lat/float64(ad.ok), bu.lat/float64(bu.ok)
		adRPJ, buRPJ := float64(ad.ok)/ad.joules, float64(bu.ok)/bu.joules
		t.Logf("rho %.1f (%.0f req/s): ad-hoc %.3f ms (p99 %.1f), budget 1.10x %.3f ms (p99 %.1f) = %.3fx; req/J %.4g vs %.4g (%+.1f%%)",
			rho, rate, adMean, ad.p99, buMean, bu.p99, buMean/adMean, buRPJ, adRPJ, 100*(buRPJ/adRPJ-1))
		if ad.ok != ad.sched || bu.ok != bu.sched {
			t.Errorf("rho %.1f: answered %d of %d (ad-hoc), %d of %d (budget)", rho, ad.ok, ad.sched, bu.ok, bu.sched)
		}
		if buMean > 1.10*1.05*adMean {
			t.Errorf("rho %.1f: budget's mean %.3f ms is %.3fx ad-hoc's %.3f, over 1.10x (+5%%)", rho, buMean, buMean/adMean, adMean)
		}
		if buRPJ < 0.99*adRPJ {
			t.Errorf("rho %.1f: budget %.4g requests per joule, below ad-hoc's %.4g", rho, buRPJ, adRPJ)
		}
	}
}
