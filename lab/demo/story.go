package demo

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/sim"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
)

// The demo's story: after each regime, what the default did against the
// budgets it states, and why when it is over one or has nothing to gain;
// at the end, the verdict of every policy. A run of a minute on a shared
// machine is noisy, and a ratio a little over a budget says nothing
// without its spread, so the spread is measured and said.

// Default is the policy the story is about: serve's default.
const Default = "budget"

// budgets are the default's stated bounds, as factors of the baseline's
// mean latency and p99.
var budgets = struct{ mean, p99 float64 }{policy.DefaultLatencyBudget.Factor, policy.DefaultTailBudget}

// blocks is how many time blocks a run is cut into to measure the spread
// of its mean-latency ratio: ten of 6 s in the default 60-s run.
const blocks = 10

// t95 is Student's t for a two-sided 95% interval with blocks-1 degrees
// of freedom.
const t95 = 2.262

// busyFactor is how many times the simulated GPU's mean adhoc's live mean
// may be before the demo says the machine was busy: a quiet host adds
// about a third (the client's own exchange).
const busyFactor = 3

// demoSLO is the p99 objective whose price the light regime shows in
// simulation: several times the baseline's p99 at that load.
const demoSLO = 10 * time.Millisecond

// regimeResult is one regime's comparison and the records behind it.
type regimeResult struct {
	regime  string
	peakRho float64
	span    time.Duration // the trace's duration
	rate    float64       // the trace's mean arrival rate, req/s
	rows    []loadreport.Row
	runs    []loadreport.Run
	slo     *sloResult // the light regime's SLO in simulation, when run
}

// sloResult is what the simulator gives the baseline and the default
// with demoSLO on the light regime's trace, and the command that prints it.
type sloResult struct {
	base, slo sim.Result
	command   string
}

// row returns the row of the named policy.
func (r regimeResult) row(name string) (loadreport.Row, bool) {
	i := slices.IndexFunc(r.rows, func(x loadreport.Row) bool { return x.Name == name })
	if i < 0 {
		return loadreport.Row{}, false
	}
	return r.rows[i], true
}

// records returns the records of the named policy's run.
func (r regimeResult) records(name string) []loadgen.Record {
	i := slices.IndexFunc(r.runs, func(x loadreport.Run) bool { return x.Name == name })
	if i < 0 {
		return nil
	}
	return r.runs[i].Records
}

// spread is the mean-latency ratio of the default over the baseline with
// its 95% interval over the run's time blocks, and the range of the
// blocks' p99 ratios.
type spread struct {
	ok             bool
	lo, hi         float64 // the mean ratio's interval
	p99lo, p99hi   float64 // the blocks' p99 ratios
	blocks         int
	block, runSpan time.Duration
}

// measureSpread cuts both runs into blocks by send time (every lane plays
// the same arrivals at the same moments) and takes the jackknife interval
// of the ratio of mean latencies: the ratio with each block left out in
// turn, as the delta method would, without assuming the blocks weigh
// alike (the trace's peak carries most of the latency).
func measureSpread(base, other []loadgen.Record, span time.Duration) spread {
	s := spread{blocks: blocks, block: span / blocks, runSpan: span}
	if span <= 0 {
		return s
	}
	b, o := cut(base, span), cut(other, span)
	sum := func(bs []loadgen.Summary, skip int) (float64, int64) {
		var t float64
		var n int64
		for i, x := range bs {
			if i != skip {
				t += x.MeanLatencyMs * float64(x.OK)
				n += x.OK
			}
		}
		return t, n
	}
	ratio := func(skip int) float64 {
		tb, nb := sum(b, skip)
		to, no := sum(o, skip)
		if nb == 0 || no == 0 || tb == 0 {
			return math.NaN()
		}
		return (to / float64(no)) / (tb / float64(nb))
	}
	full := ratio(-1)
	var loo []float64
	s.p99lo, s.p99hi = math.Inf(1), math.Inf(-1)
	for i := range blocks {
		r := ratio(i)
		if math.IsNaN(r) {
			return s
		}
		loo = append(loo, r)
		if b[i].OK > 0 && o[i].OK > 0 && b[i].P99LatencyMs > 0 {
			p := o[i].P99LatencyMs / b[i].P99LatencyMs
			s.p99lo, s.p99hi = min(s.p99lo, p), max(s.p99hi, p)
		}
	}
	if math.IsNaN(full) || math.IsInf(s.p99lo, 0) {
		return s
	}
	var mean, ss float64
	for _, r := range loo {
		mean += r / blocks
	}
	for _, r := range loo {
		ss += (r - mean) * (r - mean)
	}
	se := math.Sqrt(float64(blocks-1) / blocks * ss)
	s.ok, s.lo, s.hi = true, full-t95*se, full+t95*se
	return s
}

// cut summarises records in blocks of span/blocks by send time.
func cut(recs []loadgen.Record, span time.Duration) []loadgen.Summary {
	parts := make([][]loadgen.Record, blocks)
	for _, r := range recs {
		i := min(max(int(int64(r.Start)*blocks/int64(span)), 0), blocks-1)
		parts[i] = append(parts[i], r)
	}
	out := make([]loadgen.Summary, blocks)
	for i, p := range parts {
		out[i] = loadgen.Summarize(p, 0, 0)
	}
	return out
}

// tellRegime writes what the default did in a regime against its budgets,
// and in the light regime why it sends at once, what maxbatch's gain
// costs, and what an objective in latency would buy.
func tellRegime(w io.Writer, r regimeResult) {
	d, ok := r.row(Default)
	base, okBase := r.row(Baseline)
	if !ok || !okBase {
		return
	}
	v := against(d, r.rows)
	if !v.hasBase {
		return
	}
	fmt.Fprintln(w)
	say(w, defaultLine(r, v, measureSpread(r.records(Baseline), r.records(Default), r.span)))
	if r.regime != "light" {
		return
	}
	if s := r.slo; s != nil && base.MeanLatencyMs > busyFactor*s.base.MeanLatencyMs {
		fmt.Fprintln(w)
		say(w, fmt.Sprintf("This machine was busy: adhoc's mean as the client saw it, %.2f ms, is %.0fx "+
			"what the simulator gives the emulated GPU at this load (%.2f ms). Every figure above "+
			"measures the machine's contention as much as the policies; run the demo on a quieter one.",
			base.MeanLatencyMs, base.MeanLatencyMs/s.base.MeanLatencyMs, s.base.MeanLatencyMs))
	}
	if v.hasEnergy && math.Abs(v.gain-1) <= 0.02 && r.slo != nil {
		a := r.slo.base
		fmt.Fprintln(w)
		say(w, fmt.Sprintf("Why it sends at once here: at %.0f req/s a partner comes every %.1f ms on "+
			"average, while its budgets leave about %.2f ms of adhoc's %.2f-ms mean and %.2f ms of its "+
			"%.2f-ms p99 (as its plan models this GPU) to wait in. A wait that short seldom finds a "+
			"partner, so the default does not wait: it sends as adhoc does, and saves nothing.",
			r.rate, 1000/r.rate, (budgets.mean-1)*a.MeanLatencyMs, a.MeanLatencyMs,
			(budgets.p99-1)*a.P99LatencyMs, a.P99LatencyMs))
	}
	if m, ok := r.row(policy.NameMaxBatch); ok {
		if mv := against(m, r.rows); mv.hasEnergy && mv.gain > 1.02 {
			fmt.Fprintln(w)
			say(w, fmt.Sprintf("maxbatch, the rule of Triton's dynamic batcher with a queue delay, "+
				"holds every request up to %v for a full batch whatever the latency: %s requests per "+
				"joule, for a p50 of %.1f ms against adhoc's %.1f ms: a wait neither of the default's budgets allows.",
				policy.DefaultMaxQueueDelay, pct(mv.gain), m.P50LatencyMs, base.P50LatencyMs))
		}
	}
	if s := r.slo; s != nil && s.base.RequestsPerJoule != nil && s.slo.RequestsPerJoule != nil {
		fmt.Fprintln(w)
		say(w, fmt.Sprintf("An objective in latency buys it on purpose: with --policy-slo-p99 %v "+
			"the default holds requests for partners as long as that p99 allows (inside the proxy: "+
			"set it to the client's objective less its own exchange). In simulation on this trace, "+
			"%s requests per joule at a p99 of %.1f ms (adhoc's %.1f ms):",
			demoSLO, pct(*s.slo.RequestsPerJoule / *s.base.RequestsPerJoule), s.slo.P99LatencyMs, s.base.P99LatencyMs))
		sayCommand(w, s.command)
	}
}

// defaultLine is the default's verdict in a regime: within its budgets,
// or over one, by how much against the run's own spread, and why.
func defaultLine(r regimeResult, v verdict, s spread) string {
	energy := "no energy figures"
	if v.hasEnergy {
		energy = pct(v.gain) + " requests per joule"
	}
	overMean, overP99 := v.lat > budgets.mean, v.p99 > budgets.p99
	status := map[[2]bool]string{{false, false}: "within both budgets", {true, false}: "over its mean budget",
		{false, true}: "over its p99 budget", {true, true}: "over both budgets"}[[2]bool{overMean, overP99}]
	line := fmt.Sprintf("The default (%s) in the %s regime: mean %.2fx adhoc's (budget %.2fx), p99 %.2fx "+
		"(budget %.2fx), %s: %s.", Default, r.regime, v.lat, budgets.mean, v.p99, budgets.p99, energy, status)
	if !overMean && !overP99 {
		return line
	}
	if overMean && s.ok {
		line += fmt.Sprintf(" Over %d blocks of %s the mean ratio reads %.2fx to %.2fx (95%%)", s.blocks, secs(s.block), s.lo, s.hi)
		if s.lo <= budgets.mean {
			line += fmt.Sprintf(": one %s run cannot tell it from %.2fx.", secs(s.runSpan), budgets.mean)
		} else {
			line += ": over the budget beyond this run's noise."
		}
	}
	if overP99 && s.ok {
		line += fmt.Sprintf(" A %s run's p99 is its slowest seconds': block by block it reads %.2fx to %.2fx "+
			"adhoc's.", secs(s.runSpan), s.p99lo, s.p99hi)
	}
	return line + " Each regime starts a fresh proxy, and the live trim that re-aims the plan at what " +
		"its calls lived takes its first step after about 45 s of calibration (docs/ALGORITHMS.md); " +
		"the default measured over minutes: docs/results/latency-cost.md."
}

// secs writes a duration in whole seconds, or tenths under ten: "6 s".
func secs(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

// judge sums the default's result up against its budgets, in a few words.
func judge(v verdict, s spread) string {
	var over []string
	if v.lat > budgets.mean {
		o := fmt.Sprintf("mean over %.2fx", budgets.mean)
		switch {
		case s.ok && s.lo <= budgets.mean:
			o += fmt.Sprintf(" within this run's noise (%.2fx to %.2fx)", s.lo, s.hi)
		case s.ok:
			o += fmt.Sprintf(" beyond this run's noise (%.2fx to %.2fx)", s.lo, s.hi)
		}
		over = append(over, o)
	}
	if v.p99 > budgets.p99 {
		over = append(over, fmt.Sprintf("p99 over %.2fx", budgets.p99))
	}
	if len(over) == 0 {
		return "within both budgets"
	}
	return strings.Join(over, ", ")
}

// simulateSLO runs the simulator on the light regime's trace: adhoc, and
// the default held to demoSLO, on the same arrivals.
func simulateSLO(ctx context.Context, prof preset.Profile, series *trace.Series, o Options) (*sloResult, error) {
	if o.Model == emulator.SimpleModel {
		prof.MaxBatch = emulator.SimpleMaxBatch
	}
	opts := policy.NewOptions(policy.BudgetOptions{SLOP99: demoSLO, NoTrim: true}) // NoTrim: as sim without --trim
	pols, err := sim.Policies(Baseline+","+Default, opts, nil)
	if err != nil {
		return nil, err
	}
	res, err := sim.RunAll(ctx, sim.Config{Profile: prof, Trace: series, Seed: o.Seed}, pols)
	if err != nil {
		return nil, err
	}
	cmd := fmt.Sprintf("bin/ratebatch sim --preset %s --bmax %d --trace %s --speedup %g", prof.Name, prof.MaxBatch, o.TraceName, o.Speedup)
	if o.TraceScale != 1 {
		cmd += fmt.Sprintf(" --trace-scale %g", o.TraceScale)
	}
	if o.Seed != 1 {
		cmd += fmt.Sprintf(" --seed %d", o.Seed)
	}
	cmd += fmt.Sprintf(" --policy %s,%s --slo-p99 %v", Baseline, Default, demoSLO)
	return &sloResult{base: res[0], slo: res[1], command: cmd}, nil
}

// say writes prose wrapped within progressWidth columns.
func say(w io.Writer, text string) { wrap(w, "", "", "", strings.Fields(text)) }

// sayCommand writes a shell command wrapped as it pastes: " \" at each
// break, the continuation lines indented, a flag kept with its value.
func sayCommand(w io.Writer, command string) {
	var units []string
	for _, f := range strings.Fields(command) {
		if n := len(units); n > 0 && strings.HasPrefix(units[n-1], "--") && !strings.Contains(units[n-1], " ") && !strings.HasPrefix(f, "-") {
			units[n-1] += " " + f
			continue
		}
		units = append(units, f)
	}
	wrap(w, "  ", "    ", " \\", units)
}

// wrap writes words in lines of at most progressWidth columns: the first
// line after first, the others after next, each broken line ending in brk.
func wrap(w io.Writer, first, next, brk string, words []string) {
	line, empty := first, true
	for _, word := range words {
		if !empty && len(line)+1+len(word)+len(brk) > progressWidth {
			fmt.Fprintln(w, line+brk)
			line, empty = next, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	fmt.Fprintln(w, line)
}
