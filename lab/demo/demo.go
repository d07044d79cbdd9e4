// Package demo is `ratebatch demo`, the embedded default: for each policy an
// emulated GPU and a ratebatch proxy in front of it, the same trace played
// through every proxy at once with live progress, then the comparison table,
// plots and a verdict per policy against ad-hoc. The command only parses
// its flags; everything the demo does is here, beside the lab it drives.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/server"
)

// DefaultPolicies are run when --policies is not given: ad-hoc first, the
// baseline every ratio is taken against (what a client without the proxy
// spends), then the paper's policy, the stronger ones, budget (the one that
// trades a bounded latency for requests per joule: its default budget is
// 1.10x ad-hoc's mean latency) and maxbatch, the other extreme.
var DefaultPolicies = []string{"adhoc", "batchmonitor", "batchmonitor+", "smdp", "budget", "maxbatch"}

// Baseline is the policy the verdicts compare every other one with.
const Baseline = "adhoc"

type Options struct {
	Preset     string
	TraceName  string
	Speedup    float64
	TraceScale float64
	Policies   []string
	Out        string
	Seed       uint64
	IdleWatts  float64
	Binary     bool
	Model      string
	Realism    emulator.Realism
	// regimes are run one after the other: light (the trace as it is) and
	// loaded (the GPU slowed so the trace's peak reaches loadedRho).
	Regimes []string
	// timeScale slows the emulated GPU (set per regime).
	TimeScale float64
}

// loadedRho is the load at the trace's peak in the loaded regime, as in
// the loaded copy of paper300 in `ratebatch compare` (docs/results/energy.md).
const loadedRho = 0.8

// ParseRegimes reads --regimes: a comma list of light and loaded.
func ParseRegimes(list string) ([]string, error) {
	var out []string
	for _, r := range strings.Split(list, ",") {
		switch r = strings.TrimSpace(r); r {
		case "light", "loaded":
			out = append(out, r)
		case "":
		default:
			return nil, fmt.Errorf("unknown regime %q (light, loaded)", r)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("name light, loaded or both")
	}
	return out, nil
}

// PolicyList is --policies split, or the default policies built in.
func PolicyList(flag string) []string {
	if flag != "" {
		return strings.Split(flag, ",")
	}
	var out []string
	known := policy.Names()
	for _, p := range DefaultPolicies {
		if slices.Contains(known, p) {
			out = append(out, p)
		}
	}
	return out
}

func EnergyPresets() []string {
	var out []string
	for _, p := range preset.All() {
		if p.HasEnergy {
			out = append(out, p.Name)
		}
	}
	return out
}

// demoLane is one policy's emulator, proxy, load and samples.
type demoLane struct {
	policy  string
	em      *emulator.Server
	proxy   *server.Server
	sampler *loadreport.Sampler
	mu      sync.Mutex
	snap    loadgen.Snapshot
	result  loadgen.Result
	err     error
	stopFn  func()
}

// Run plays the demo described by o, writing its progress, tables and
// verdicts to stdout and its files under o.Out.
func Run(ctx context.Context, o Options, stdout io.Writer) error {
	prof, err := preset.Lookup(o.Preset)
	if err != nil {
		return err
	}
	series, err := trace.Load(o.TraceName)
	if err != nil {
		return err
	}
	if o.Speedup != 1 {
		if series, err = series.Compress(o.Speedup); err != nil {
			return err
		}
	}
	if o.TraceScale != 1 {
		if series, err = series.Scale(o.TraceScale); err != nil {
			return err
		}
	}
	if len(o.Policies) == 0 {
		return errors.New("no policy to run")
	}
	energy := "no energy figures: requests per joule stays empty"
	if prof.HasEnergy {
		energy = fmt.Sprintf("zeta(b) = %g*b + %g mJ", prof.BetaMJ, prof.Zeta0MJ)
	}
	fmt.Fprintf(stdout, "ratebatch demo: emulated GPU %s, tau(b) = %g*b + %g ms, %s\n", prof.Name, prof.AlphaMs, prof.Tau0Ms, energy)
	fmt.Fprintf(stdout, "load: %s over %v (mean %.0f req/s, peak %.0f req/s), model %q\n",
		series.Name(), series.Duration(), series.MeanRate(), series.MaxRate(), o.Model)
	say(stdout, "policies: "+strings.Join(o.Policies, ", "))
	if slices.Contains(o.Policies, Default) {
		say(stdout, fmt.Sprintf("%s, the baseline, sends whatever waits whenever the GPU is free (as "+
			"Triton's dynamic batcher does at its default delay, 0). %s, serve's default, sends the batches "+
			"that give the most requests per joule while its mean latency stays within %.2fx %s's "+
			"(policy.latency_budget) and its p99 within %.2fx (policy.tail_budget).",
			Baseline, Default, budgets.mean, Baseline, budgets.p99))
	}
	peak := peakRho(series, prof, o.Model)
	var results []regimeResult
	for i, regime := range o.Regimes {
		ro := o
		ro.TimeScale = 1
		if regime == "loaded" {
			// Slowing the GPU k-fold loads it as rates k times higher would
			// (rho = lambda*tau), at the same CPU cost for the load.
			ro.TimeScale = loadedRho / peak
		}
		if i > 0 {
			ro.Out = filepath.Join(o.Out, regime)
		}
		r := regimeResult{regime: regime, peakRho: peak * ro.TimeScale, span: series.Duration(), rate: series.MeanRate()}
		fmt.Fprintf(stdout, "\n== %s regime: peak rho %.2f (rho: arrivals over the GPU's capacity in full batches)\n",
			regime, r.peakRho)
		say(stdout, describeRegime(regime, ro.TimeScale)+" Results in "+ro.Out+".")
		fmt.Fprintln(stdout)
		var err error
		if r.rows, r.runs, err = demoRegime(ctx, ro, prof, series, stdout); err != nil {
			return fmt.Errorf("%s regime: %w", regime, err)
		}
		if regime == "light" && slices.Contains(o.Policies, Baseline) && slices.Contains(o.Policies, Default) {
			if r.slo, err = simulateSLO(ctx, prof, series, ro); err != nil {
				return fmt.Errorf("%s regime, the SLO in simulation: %w", regime, err)
			}
		}
		tellRegime(stdout, r)
		results = append(results, r)
	}
	return writeVerdict(stdout, o.Out, results)
}

// describeRegime says what a regime's load means.
func describeRegime(regime string, timeScale float64) string {
	if regime == "loaded" {
		return fmt.Sprintf("The GPU %.1fx slower, as if the trace's rates were %.1fx higher (as "+
			"compare's loaded copy): batches fill, and waiting for partners pays.", timeScale, timeScale)
	}
	return "The trace as it is: the GPU is nearly idle, so most requests find no partner " +
		"to batch with, and the policies that do not wait barely differ."
}

// peakRho is the trace's peak rate over the throughput of full batches of
// the emulated model: mu(B_max) = B_max / tau(B_max).
func peakRho(series *trace.Series, prof preset.Profile, model string) float64 {
	b := float64(prof.MaxBatch)
	if model == emulator.SimpleModel {
		b = emulator.SimpleMaxBatch
	}
	mu := 1000 * b / (prof.AlphaMs*b + prof.Tau0Ms)
	return series.MaxRate() / mu
}

// demoRegime runs every policy's lane through the trace once, at
// o.TimeScale, and returns the comparison's rows and the runs.
func demoRegime(ctx context.Context, o Options, prof preset.Profile, series *trace.Series, stdout io.Writer) ([]loadreport.Row, []loadreport.Run, error) {
	model := o.Model
	_, verify := loadgen.VerifierFor(model)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lanes := make([]*demoLane, len(o.Policies))
	for i, p := range o.Policies {
		l, err := startLane(ctx, p, prof, o)
		if err != nil {
			return nil, nil, fmt.Errorf("policy %s: %w", p, err)
		}
		lanes[i] = l
		defer l.stop()
	}
	fmt.Fprintln(stdout, "live pages (open in a browser while the demo runs):")
	for _, l := range lanes {
		fmt.Fprintf(stdout, "  %-14s http://%s/ui/\n", l.policy, l.proxy.AdminAddr())
	}
	fmt.Fprintln(stdout)

	var wg sync.WaitGroup
	for _, l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			go l.sampler.Run(ctx, 500*time.Millisecond)
			res, err := loadgen.Run(ctx, loadgen.Config{
				Target: "http://" + l.proxy.Addr().String(), Model: model,
				Rate: series, Duration: series.Duration(), Seed: o.Seed, Binary: o.Binary, Verify: verify,
				Progress: func(s loadgen.Snapshot) { l.mu.Lock(); l.snap = s; l.mu.Unlock() },
			})
			l.mu.Lock()
			l.result, l.err = res, err
			l.mu.Unlock()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	showProgress(stdout, lanes, done)

	runs, problems, err := collectRuns(lanes)
	if err != nil {
		return nil, nil, err
	}
	rows, err := writeDemoReport(stdout, o.Out, runs, problems)
	return rows, runs, err
}

// collectRuns gathers each lane's records and the proxy's final samples,
// and lists what went wrong.
func collectRuns(lanes []*demoLane) ([]loadreport.Run, []string, error) {
	var runs []loadreport.Run
	var problems []string
	for _, l := range lanes {
		if l.err != nil {
			return nil, nil, fmt.Errorf("policy %s: %w", l.policy, l.err)
		}
		if _, err := l.sampler.Poll(context.Background()); err != nil { // the final figures
			return nil, nil, err
		}
		s := l.result.Summary
		if s.Errors > 0 || s.Dropped > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d errors %v, %d dropped by the client (first verify error: %q)",
				l.policy, s.Errors, s.ErrorsByKind, s.Dropped, l.result.FirstVerifyError))
		}
		runs = append(runs, loadreport.Run{Name: l.policy, Records: l.result.Records, Samples: l.sampler.Samples()})
	}
	return runs, problems, nil
}

func startLane(ctx context.Context, pol string, prof preset.Profile, o Options) (*demoLane, error) {
	if pol != "passthrough" && !slices.Contains(policy.Names(), pol) {
		return nil, fmt.Errorf("unknown policy %q (known: %s)", pol, strings.Join(policy.Names(), ", "))
	}
	em, err := emulator.New(emulator.Options{Profile: prof, TimeScale: o.TimeScale, Seed: o.Seed, IdleWatts: o.IdleWatts, Realism: o.Realism})
	if err != nil {
		return nil, err
	}
	if err := em.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	cfg := config.Default()
	cfg.Upstream = "http://" + em.Addr()
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Policy.Name = pol
	cfg.Grace = 5 * time.Second
	if prof.HasEnergy {
		cfg.Power.Source = "triton"
		cfg.Power.MetricsURL = "http://" + em.MetricsAddr() + "/metrics"
		cfg.Power.Interval = 100 * time.Millisecond
	}
	if err := cfg.Validate(); err != nil {
		em.Close()
		return nil, err
	}
	p, err := server.New(&cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		err = p.Listen()
	}
	if err != nil {
		em.Close()
		return nil, err
	}
	pctx, stop := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() { p.Run(pctx); close(served) }()
	l := &demoLane{policy: pol, em: em, proxy: p, sampler: loadreport.NewSampler("http://"+p.AdminAddr().String(), o.Model)}
	l.stopFn = func() { stop(); <-served; em.Close() }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := p.Dispatcher().Model(o.Model); ok {
			return l, nil
		}
		if time.Now().After(deadline) {
			l.stop()
			return nil, errors.New("the proxy did not discover the emulator's models")
		}
	}
}

func (l *demoLane) stop() {
	if l.stopFn != nil {
		l.stopFn()
		l.stopFn = nil
	}
}

// showProgress prints the figures of every second until done: the offered
// rate, then per policy what was sent, p50 latency and requests per joule.
func showProgress(w io.Writer, lanes []*demoLane, done <-chan struct{}) {
	names := make([]string, len(lanes))
	for i, l := range lanes {
		names[i] = l.policy
	}
	table := newProgressTable(names)
	table.header(w)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		var first loadgen.Snapshot
		cells := make([][3]string, len(lanes))
		for i, l := range lanes {
			l.mu.Lock()
			s := l.snap
			l.mu.Unlock()
			if i == 0 {
				first = s
			}
			b, p50, rpj := progressCells(s, l.sampler.Samples())
			cells[i] = [3]string{b, p50, rpj}
		}
		table.row(w, first.Elapsed, first.TargetRPS, cells)
	}
}

// progressWidth is the widest line the demo writes, the per-second table's
// included: a terminal's 100 columns.
const progressWidth = 100

const (
	progressCell   = "%5s %6s %6s" // b, p50 ms, req/J
	progressPrefix = "%4s %7s"     // time, offered requests/s
	progressSep    = " |"
)

// progressTable lays the per-second table out in lines of at most
// progressWidth columns: lanes that do not fit on the line continue on the
// next, under the same columns, so that each second is one block of lines.
type progressTable struct {
	names   []string
	perLine int
}

func newProgressTable(names []string) progressTable {
	cell := len(progressSep) + 1 + len(fmt.Sprintf(progressCell, "", "", ""))
	prefix := len(fmt.Sprintf(progressPrefix, "", ""))
	most := max(1, (progressWidth-prefix)/cell)
	lines := max(1, (len(names)+most-1)/most)
	// The lanes shared evenly among the lines: 3 and 3, not 4 and 2.
	return progressTable{names: names, perLine: (len(names) + lines - 1) / lines}
}

func (t progressTable) header(w io.Writer) {
	fmt.Fprintln(w, "Each second: offered = requests/s of the load, b = mean rows per batch the proxy sent in it,")
	fmt.Fprintln(w, "p50 = median latency (ms) of the answers completed in it, req/J = requests per joule")
	fmt.Fprintln(w, "over the meter's shortest window; - = none.")
	width := len(fmt.Sprintf(progressCell, "", "", ""))
	names, heads := make([][3]string, len(t.names)), make([][3]string, len(t.names))
	for i, n := range t.names {
		names[i] = [3]string{fmt.Sprintf("%-*s", width, n)}
		heads[i] = [3]string{"b", "p50", "req/J"}
	}
	for start := 0; start < len(t.names); start += t.perLine {
		end := min(start+t.perLine, len(t.names))
		fmt.Fprintln(w, t.line(fmt.Sprintf(progressPrefix, "", ""), names[start:end], true))
		fmt.Fprintln(w, t.line(fmt.Sprintf(progressPrefix, "time", "offered"), heads[start:end], false))
	}
}

// row prints one second: the first line leads with the time and the offered
// rate, a continuation line with blanks under them.
func (t progressTable) row(w io.Writer, elapsed time.Duration, offered float64, cells [][3]string) {
	lead := fmt.Sprintf(progressPrefix, fmt.Sprintf("%.0fs", elapsed.Seconds()), fmt.Sprintf("%.0f", offered))
	for start := 0; start < len(cells); start += t.perLine {
		fmt.Fprintln(w, t.line(lead, cells[start:min(start+t.perLine, len(cells))], false))
		lead = fmt.Sprintf(progressPrefix, "", "")
	}
}

func (t progressTable) line(lead string, cells [][3]string, name bool) string {
	var b strings.Builder
	b.WriteString(lead)
	for _, c := range cells {
		b.WriteString(progressSep + " ")
		if name {
			b.WriteString(c[0])
		} else {
			fmt.Fprintf(&b, progressCell, c[0], c[1], c[2])
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// progressCells are one lane's figures for the last second: the mean rows
// per batch actually sent (not the rule's cap), the p50 of the answers
// completed, requests per joule; "-" where the second had none.
func progressCells(s loadgen.Snapshot, samples []loadreport.Sample) (b, p50, rpj string) {
	b, p50, rpj = "-", "-", "-"
	if s.OKRPS > 0 {
		p50 = fmt.Sprintf("%.2f", s.P50LatencyMs)
	}
	if n := len(samples); n > 0 {
		last := samples[n-1]
		if last.RequestsPerJoule != nil {
			rpj = fmt.Sprintf("%.1f", *last.RequestsPerJoule)
		}
		// The newest sample at least a second older than the last.
		for i := n - 2; i >= 0; i-- {
			if last.T-samples[i].T >= 0.999 {
				if db := last.BatchesSent - samples[i].BatchesSent; db > 0 {
					b = fmt.Sprintf("%.2f", float64(last.RowsSent-samples[i].RowsSent)/float64(db))
				}
				break
			}
		}
	}
	return b, p50, rpj
}

func writeDemoReport(stdout io.Writer, dir string, runs []loadreport.Run, problems []string) ([]loadreport.Row, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	rows := loadreport.Summarize(runs)
	fmt.Fprintln(stdout, "\nOver the whole run (latency as the client saw it; req/J from the emulated meter):")
	writeRunTable(stdout, rows)
	fmt.Fprintln(stdout, "\nVerdict against "+Baseline+":")
	writeVerdictLines(stdout, rows)
	if err := loadreport.WriteFile(filepath.Join(dir, "summary.md"), func(w io.Writer) error { return loadreport.WriteTable(w, rows) }); err != nil {
		return nil, err
	}
	for _, r := range runs {
		if err := writeRunFiles(dir, r); err != nil {
			return nil, err
		}
	}
	paths, err := loadreport.WritePlots(dir, runs)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "\nwrote %s, per-policy CSVs, and plots:\n", filepath.Join(dir, "summary.md"))
	for _, p := range paths {
		fmt.Fprintln(stdout, "  "+p)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("requests failed: %s", strings.Join(problems, "; "))
	}
	return rows, nil
}

// writeRunTable writes each run's figures in aligned columns (summary.md
// keeps the full table, ratios included).
func writeRunTable(w io.Writer, rows []loadreport.Row) {
	fmt.Fprintf(w, "  %-14s %6s %9s %9s %9s %6s %7s\n", "policy", "ok", "mean ms", "p50 ms", "p99 ms", "batch", "req/J")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-14s %6d %9.2f %9.2f %9.2f %6s %7s\n", r.Name, r.OK, r.MeanLatencyMs, r.P50LatencyMs,
			r.P99LatencyMs, opt(r.MeanBatchSize), opt(r.RequestsPerJoule))
	}
}

// verdict is one policy against the baseline: its requests per joule over
// the baseline's (gain), and its mean and p99 latency over the baseline's.
type verdict struct {
	rpj, baseRPJ       float64
	gain, lat, p99     float64
	hasEnergy, hasBase bool
}

// against compares r with the baseline's row among rows.
func against(r loadreport.Row, rows []loadreport.Row) verdict {
	var v verdict
	i := slices.IndexFunc(rows, func(b loadreport.Row) bool { return b.Name == Baseline })
	if i < 0 || rows[i].MeanLatencyMs <= 0 || rows[i].P99LatencyMs <= 0 {
		return v
	}
	b := rows[i]
	v.hasBase = true
	v.lat, v.p99 = r.MeanLatencyMs/b.MeanLatencyMs, r.P99LatencyMs/b.P99LatencyMs
	if r.RequestsPerJoule != nil && b.RequestsPerJoule != nil && *b.RequestsPerJoule > 0 {
		v.hasEnergy = true
		v.rpj, v.baseRPJ = *r.RequestsPerJoule, *b.RequestsPerJoule
		v.gain = v.rpj / v.baseRPJ
	}
	return v
}

// writeVerdictLines prints one line per policy other than the baseline.
func writeVerdictLines(w io.Writer, rows []loadreport.Row) {
	for _, r := range rows {
		if r.Name == Baseline {
			continue
		}
		v := against(r, rows)
		switch {
		case !v.hasBase:
			fmt.Fprintf(w, "  %-14s no %s run to compare with (add it to --policies)\n", r.Name, Baseline)
		case !v.hasEnergy:
			fmt.Fprintf(w, "  %-14s no energy figures; mean %.2fx, p99 %.2fx\n", r.Name, v.lat, v.p99)
		default:
			fmt.Fprintf(w, "  %-14s %s req/J (%.2f vs %.2f), mean %.2fx, p99 %.2fx: %s\n",
				r.Name, pct(v.gain), v.rpj, v.baseRPJ, v.lat, v.p99, v.word())
		}
	}
}

// opt writes a figure that may be unknown.
func opt(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *v)
}

// pct writes a ratio as a signed percentage change: 1.183 is +18.3%.
func pct(ratio float64) string { return fmt.Sprintf("%+.1f%%", 100*(ratio-1)) }

// word sums a verdict up: within 2% counts as the same.
func (v verdict) word() string {
	energy := "same energy"
	switch {
	case v.gain > 1.02:
		energy = "less energy"
	case v.gain < 0.98:
		energy = "more energy"
	}
	latency := "same latency"
	switch {
	case v.lat > 1.02:
		latency = "slower"
	case v.lat < 0.98:
		latency = "faster"
	}
	return energy + ", " + latency
}

// writeVerdict closes the demo: per policy and regime, the gain in
// requests per joule and the latency against the baseline, as a table on
// stdout and in dir/verdict.md, then the default's result per regime
// against its budgets.
func writeVerdict(stdout io.Writer, dir string, results []regimeResult) error {
	var b strings.Builder
	b.WriteString("| policy |")
	sep := "|---|"
	for _, r := range results {
		fmt.Fprintf(&b, " %s: req/J | %s: mean (p99) |", r.regime, r.regime)
		sep += "---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for i, row := range results[0].rows {
		fmt.Fprintf(&b, "| %s |", row.Name)
		for _, r := range results {
			v := against(r.rows[i], r.rows)
			switch {
			case row.Name == Baseline:
				fmt.Fprintf(&b, " %s req/J | %.2f (%.2f) ms |", opt(r.rows[i].RequestsPerJoule), r.rows[i].MeanLatencyMs, r.rows[i].P99LatencyMs)
			case !v.hasBase:
				b.WriteString(" - | - |")
			case !v.hasEnergy:
				fmt.Fprintf(&b, " - | %.2fx (%.2fx) |", v.lat, v.p99)
			default:
				fmt.Fprintf(&b, " %s | %.2fx (%.2fx) |", pct(v.gain), v.lat, v.p99)
			}
		}
		b.WriteString("\n")
	}
	if s := defaultSummary(results); s != "" {
		b.WriteString("\n" + s)
	}
	fmt.Fprintln(stdout, "\n== Verdict: every policy against "+Baseline)
	say(stdout, fmt.Sprintf("%s's row: its requests per joule, and its mean (p99) latency; the others: "+
		"requests per joule against %s's, and the mean (p99) latency as a factor of %s's.", Baseline, Baseline, Baseline))
	fmt.Fprint(stdout, b.String())
	return loadreport.WriteFile(filepath.Join(dir, "verdict.md"), func(w io.Writer) error { _, err := io.WriteString(w, b.String()); return err })
}

// defaultSummary is the default's result per regime against its budgets,
// one line (wrapped) a regime.
func defaultSummary(results []regimeResult) string {
	var b strings.Builder
	for _, r := range results {
		d, ok := r.row(Default)
		if !ok {
			return ""
		}
		v := against(d, r.rows)
		if !v.hasBase || !v.hasEnergy {
			return ""
		}
		s := measureSpread(r.records(Baseline), r.records(Default), r.span)
		wrap(&b, fmt.Sprintf("  %-7s ", r.regime), strings.Repeat(" ", 10), "",
			strings.Fields(fmt.Sprintf("%s req/J, mean %.2fx, p99 %.2fx: %s", pct(v.gain), v.lat, v.p99, judge(v, s))))
	}
	return fmt.Sprintf("The default, %s, against %s (its budgets: mean %.2fx, p99 %.2fx):\n", Default, Baseline,
		budgets.mean, budgets.p99) + b.String()
}

// writeRunFiles keeps a run as the two CSVs `ratebatch report` reads.
func writeRunFiles(dir string, r loadreport.Run) error {
	if err := loadreport.WriteFile(filepath.Join(dir, r.Name+".load.csv"), func(w io.Writer) error { return loadgen.WriteCSV(w, r.Records) }); err != nil {
		return err
	}
	return loadreport.WriteFile(filepath.Join(dir, r.Name+".samples.csv"), func(w io.Writer) error { return loadreport.WriteSamplesCSV(w, r.Samples) })
}
