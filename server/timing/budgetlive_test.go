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
