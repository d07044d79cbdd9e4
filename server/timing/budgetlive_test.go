package timing_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
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

// The budget's promise (docs/ALGORITHMS.md, "Latency budget"): every
// request answered, a mean latency within the budget of ad-hoc's, a p99
// within the tail budget of ad-hoc's, and at least ad-hoc's requests per
// joule. The two tests below check it live in
// every CI run, as concurrent pairs: ad-hoc and budget 1.10x, each through
// its own fresh proxy in front of its own emulator, offered the same seeded
// arrivals at the same moment, so that both share every stall of the
// machine and the ratio of their means measures the policies, not the
// machine (the method of TestColdStartStep). The tolerances:
//   - latency: budget's mean within 1.10x ad-hoc's, +5%: what remains
//     between two arms of a pair is the sampling error of a mean latency
//     over a few thousand correlated requests, a few per cent, and the
//     budget's own live trim, which aims at 1.10x on its measured ad-hoc
//     within a window's noise;
//   - p99: the budget's within the default tail budget (1.20x) of
//     ad-hoc's, +10% +0.5 ms (p99Margin): each arm's p99 is the mean of
//     its segments' (a p99 over a few thousand calls);
//   - energy: at least ad-hoc's requests per joule less 1% (the emulator's
//     energy is its model's, exact up to the batches' mix).
// Each pools its pairs (sums of latencies, requests and joules) before the
// ratio, so that one pair's bad second weighs by its requests, not as a
// third of the verdict.

// budgetArm is one side of a pair: a fresh emulator and a proxy in front of
// it running one policy.
type budgetArm struct {
	em *emulator.Server
	lt *servertest.Proxy
}

func startBudgetArm(t *testing.T, o emulator.Options, pol, budget string) budgetArm {
	t.Helper()
	em, err := emulator.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := em.Start("127.0.0.1:0", ""); err != nil {
		t.Fatal(err)
	}
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Policy.Window, c.Policy.Name = time.Second, pol
		c.Policy.Options = c.Policy.Options.With(policy.BudgetOptions{LatencyBudget: budget})
	})
	return budgetArm{em: em, lt: lt}
}

func (a budgetArm) stop() { a.lt.Stop(); a.em.Close() }

// armFigures pools an arm's measured segments.
type armFigures struct {
	latMsSum, joules, p99Sum float64
	ok, sent, sched, dropped int64
	segments                 int
}

func (f *armFigures) add(s loadgen.Summary, joules float64) {
	f.latMsSum += s.MeanLatencyMs * float64(s.OK)
	f.p99Sum += s.P99LatencyMs
	f.ok, f.sent, f.sched, f.dropped = f.ok+s.OK, f.sent+s.Sent, f.sched+s.Scheduled, f.dropped+s.Dropped
	f.joules += joules
	f.segments++
}

func (f armFigures) meanMs() float64 { return f.latMsSum / float64(f.ok) }
func (f armFigures) rpj() float64    { return float64(f.ok) / f.joules }
func (f armFigures) p99Ms() float64  { return f.p99Sum / float64(f.segments) }

// runPair offers cfg's arrivals to both arms at once and returns each
// arm's summary and the energy its emulator used.
func runPair(t *testing.T, arms [2]budgetArm, cfg loadgen.Config) (sums [2]loadgen.Summary, joules [2]float64) {
	t.Helper()
	var errs [2]error
	var wg sync.WaitGroup
	for i, a := range arms {
		wg.Go(func() {
			j0, _ := a.em.EnergyJoules()
			c := cfg
			c.Target = a.lt.Base
			res, err := loadgen.Run(context.Background(), c)
			j1, _ := a.em.EnergyJoules()
			sums[i], joules[i], errs[i] = res.Summary, j1-j0, err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return sums, joules
}

// checkBudgetPromise asserts the promise on pooled figures (promiseBroken).
func checkBudgetPromise(t *testing.T, what string, factor float64, ad, bu armFigures) {
	t.Helper()
	for _, v := range promiseBroken(factor, ad, bu) {
		t.Errorf("%s: %s", what, v)
	}
}

// p99Margin is what a live pair's p99 may read over the tail budget
// (1.20x ad-hoc's): a tenth of the bound and half a millisecond. A p99
// over a few thousand calls rests on their few dozen slowest, and the two
// arms of a pair share the machine but not its stalls; what the default
// breaks when it breaks the tail is several tenths (1.4x-1.8x ad-hoc's
// p99, docs/results/latency-cost.md).
const p99Margin, p99MarginMs = 0.10, 0.5

// promiseBroken says how the pooled figures break the promise (nil when
// they keep it): every request sent answered, the load offered (a client
// that had to drop more than 1% at its in-flight cap ran on a machine too
// busy to offer it), budget's mean within factor of ad-hoc's +5%, its p99
// within the default tail budget of ad-hoc's plus p99Margin, its requests
// per joule at least ad-hoc's less 1%.
func promiseBroken(factor float64, ad, bu armFigures) []string {
	var out []string
	for _, a := range []struct {
		name string
		f    armFigures
	}{{"ad-hoc", ad}, {"budget", bu}} {
		if a.f.ok != a.f.sent {
			out = append(out, fmt.Sprintf("%s answered %d of %d sent", a.name, a.f.ok, a.f.sent))
		}
		if float64(a.f.dropped) > 0.01*float64(a.f.sched) {
			out = append(out, fmt.Sprintf("%s's client dropped %d of %d arrivals at its in-flight cap: the machine could not offer the load", a.name, a.f.dropped, a.f.sched))
		}
	}
	if bu.meanMs() > 1.05*factor*ad.meanMs() {
		out = append(out, fmt.Sprintf("budget %.2fx's mean %.3f ms is %.3fx ad-hoc's %.3f ms, over %.2fx (+5%%)", factor, bu.meanMs(), bu.meanMs()/ad.meanMs(), ad.meanMs(), factor))
	}
	if bound := policy.DefaultTailBudget * ad.p99Ms(); bu.p99Ms() > bound*(1+p99Margin)+p99MarginMs {
		out = append(out, fmt.Sprintf("budget's p99 %.2f ms is %.3fx ad-hoc's %.2f ms, over the tail budget %.2fx (+%.0f%% +%.1f ms)",
			bu.p99Ms(), bu.p99Ms()/ad.p99Ms(), ad.p99Ms(), policy.DefaultTailBudget, 100*p99Margin, p99MarginMs))
	}
	if bu.rpj() < 0.99*ad.rpj() {
		out = append(out, fmt.Sprintf("budget %.4g requests per joule, below ad-hoc's %.4g (-1%%)", bu.rpj(), ad.rpj()))
	}
	return out
}

// The live check of the promise fails on a broken one: a p99 past the
// tail budget and its margin (the default's at light load before the tail
// budget, 1.7x ad-hoc's), a mean past the budget, a request unanswered;
// and passes a kept one.
func TestPromiseBrokenSaysHow(t *testing.T) {
	fig := func(meanMs, p99Ms, rpj float64) armFigures {
		return armFigures{latMsSum: meanMs * 1000, ok: 1000, sent: 1000, sched: 1000, joules: 1000 / rpj, p99Sum: p99Ms, segments: 1}
	}
	ad := fig(4, 10, 30)
	for _, tc := range []struct {
		name string
		bu   armFigures
		says string // "" when kept
	}{
		{"kept", fig(4.3, 12, 32), ""},
		{"p99 at the bound and its margin", fig(4.3, 1.2*10*1.1+0.5, 32), ""},
		{"p99 1.7x ad-hoc's", fig(4.3, 17, 32), "p99"},
		{"mean 1.2x", fig(4.8, 11, 32), "mean"},
		{"fewer requests per joule", fig(4.1, 11, 29), "requests per joule"},
		{"a request unanswered", func() armFigures { f := fig(4.1, 11, 32); f.sent++; return f }(), "answered"},
	} {
		got := promiseBroken(1.10, ad, tc.bu)
		if tc.says == "" && len(got) > 0 || tc.says != "" && (len(got) != 1 || !strings.Contains(got[0], tc.says)) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.says)
		}
	}
}

// TestBudgetLiveOnPaper300 is the budget's promise on a day's shape of
// load: paper300 played 10x faster (30 s) on the realistic (rough)
// emulator, googlenet-p4 slowed simLiveScale times on simple, B_max 8;
// two concurrent pairs of fresh proxies (seeds 1 and 2), pooled. With
// RATEBATCH_LONG it also prints every policy's live table on paper300
// (paper300Table).
func TestBudgetLiveOnPaper300(t *testing.T) {
	timing(t)
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
	var ad, bu armFigures
	for seed := uint64(1); seed <= 2; seed++ {
		o := emulator.Options{Profile: base, TimeScale: simLiveScale, Realism: rough, Seed: seed}
		arms := [2]budgetArm{startBudgetArm(t, o, policy.NameAdhoc, ""), startBudgetArm(t, o, policy.NameBudget, "1.10x")}
		sums, joules := runPair(t, arms, loadgen.Config{Model: emulator.SimpleModel, Rate: tr, Duration: tr.Duration(), Seed: seed, Binary: true})
		batch := [2]float64{arms[0].lt.MeanBatch(t), arms[1].lt.MeanBatch(t)}
		arms[0].stop()
		arms[1].stop()
		ad.add(sums[0], joules[0])
		bu.add(sums[1], joules[1])
		t.Logf("pair %d: ad-hoc %.2f ms (p99 %.1f, batch %.2f, %.3f req/J), budget 1.10x %.2f ms (p99 %.1f, batch %.2f, %.3f req/J): %.3fx, %+.1f%% req/J",
			seed, sums[0].MeanLatencyMs, sums[0].P99LatencyMs, batch[0], float64(sums[0].OK)/joules[0],
			sums[1].MeanLatencyMs, sums[1].P99LatencyMs, batch[1], float64(sums[1].OK)/joules[1],
			sums[1].MeanLatencyMs/sums[0].MeanLatencyMs, 100*(float64(sums[1].OK)/joules[1]/(float64(sums[0].OK)/joules[0])-1))
	}
	t.Logf("paper300/10, rough emulator, 2 concurrent pairs pooled: budget 1.10x mean %.3fx ad-hoc's (%.2f vs %.2f ms), req/J %+.1f%%",
		bu.meanMs()/ad.meanMs(), bu.meanMs(), ad.meanMs(), 100*(bu.rpj()/ad.rpj()-1))
	checkBudgetPromise(t, "paper300", 1.10, ad, bu)
	if servertest.Long() {
		paper300Table(t, base, rough, tr)
	}
}

// paper300Table is the latency budget's live figure (the policy:
// docs/ALGORITHMS.md, "Latency budget"):
// paper300 played 10x faster, the same seeded arrivals through a fresh
// proxy and a fresh emulator in realistic mode (`rough`) per policy, one
// after the other: ad-hoc, the paper's batchmonitor, the default
// batchmonitor+, and the budget policy at 1.10x and at the latency
// batchmonitor reached relative to ad-hoc (so the two are compared at the
// same latency). Requests per joule are the emulator's: rows answered over
// the energy its device used. It asserts every request answered and, for
// the budget rows, the promise as TestBudgetLiveOnPaper300 states it.
func paper300Table(t *testing.T, base preset.Profile, rough emulator.Realism, tr *trace.Series) {
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
			c.Policy.Options = c.Policy.Options.With(policy.BudgetOptions{LatencyBudget: budget})
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
// plan assumes: Poisson load at rho 0.2, 0.5 and 0.8 of the line the proxy
// lives, on the exact emulator (googlenet-p4 slowed simLiveScale times on
// simple, B_max 8). At each load one concurrent pair of fresh proxies
// warms up for 10 s (the fit, the overheads, the budget's live trim
// settling on its measured ad-hoc), then is measured over three 8 s
// segments of fresh seeded arrivals (six with RATEBATCH_LONG), pooled.
// scripts/budget-grid.sh runs the wider grid.
func TestBudgetLivePoissonBound(t *testing.T) {
	timing(t)
	segments := 3
	if servertest.Long() {
		segments = 6
	}
	base, _ := preset.Lookup("googlenet-p4")
	// The line as the proxy lives it: compute, and about 1.2 ms of round
	// trip and proxy around it (/status rule.outside).
	tau8 := simLiveScale*base.TauMs(8) + 1.2
	for _, rho := range []float64{0.2, 0.5, 0.8} {
		rate := rho * 1000 * 8 / tau8
		o := emulator.Options{Profile: base, TimeScale: simLiveScale, Seed: 1}
		arms := [2]budgetArm{startBudgetArm(t, o, policy.NameAdhoc, ""), startBudgetArm(t, o, policy.NameBudget, "1.10x")}
		load := func(d time.Duration, seed uint64) loadgen.Config {
			return loadgen.Config{Model: emulator.SimpleModel, Rate: loadgen.ConstantRate(rate), Duration: d, Seed: seed, Binary: true}
		}
		runPair(t, arms, load(10*time.Second, 99))
		var ad, bu armFigures
		for seg := range segments {
			sums, joules := runPair(t, arms, load(8*time.Second, uint64(seg+1)))
			ad.add(sums[0], joules[0])
			bu.add(sums[1], joules[1])
		}
		arms[0].stop()
		arms[1].stop()
		t.Logf("rho %.1f (%.0f req/s), %d segments: ad-hoc %.3f ms (p99 %.1f), budget 1.10x %.3f ms (p99 %.1f) = %.3fx; req/J %.4g vs %.4g (%+.1f%%)",
			rho, rate, segments, ad.meanMs(), ad.p99Ms(), bu.meanMs(), bu.p99Ms(), bu.meanMs()/ad.meanMs(), bu.rpj(), ad.rpj(), 100*(bu.rpj()/ad.rpj()-1))
		checkBudgetPromise(t, fmt.Sprintf("rho %.1f", rho), 1.10, ad, bu)
	}
}
