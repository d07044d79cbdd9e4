package main

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

func init() {
	register("demo", "the embedded default: emulated GPU + proxy + paper300 load per policy, then a comparison", runDemo)
}

// demoPolicies are run when --policies is not given: ad-hoc first, the
// baseline every ratio is taken against (what a client without the proxy
// spends), then the paper's policy, the stronger ones, budget (the one that
// trades a bounded latency for requests per joule: its default budget is
// 1.10x ad-hoc's mean latency) and maxbatch, the other extreme.
var demoPolicies = []string{"adhoc", "batchmonitor", "batchmonitor+", "smdp", "budget", "maxbatch"}

// demoBaseline is the policy the verdicts compare every other one with.
const demoBaseline = "adhoc"

type demoOpts struct {
	preset     string
	traceName  string
	speedup    float64
	traceScale float64
	policies   []string
	out        string
	seed       uint64
	idleWatts  float64
	binary     bool
	model      string
	realism    emulator.Realism
	// regimes are run one after the other: light (the trace as it is) and
	// loaded (the GPU slowed so the trace's peak reaches loadedRho).
	regimes []string
	// timeScale slows the emulated GPU (set per regime).
	timeScale float64
}

// loadedRho is the load at the trace's peak in the loaded regime, as in
// docs/RESULTS.md's loaded copy of paper300.
const loadedRho = 0.8

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	var o demoOpts
	fs.StringVar(&o.preset, "preset", preset.DefaultPreset, "GPU profile the emulator plays (one with energy figures: "+strings.Join(energyPresets(), ", ")+")")
	fs.StringVar(&o.traceName, "trace", trace.Paper300, "load trace (built-in name or CSV time_s,rate_rps)")
	fs.Float64Var(&o.speedup, "speedup", 5, "play the trace this many times faster (rates kept): paper300 / 5 = 60 s")
	fs.Float64Var(&o.traceScale, "trace-scale", 1, "multiply the trace's rates (heavier load)")
	pols := fs.String("policies", "", "comma-separated policies to compare (default: "+strings.Join(demoPolicies, ",")+", those built in)")
	fs.StringVar(&o.out, "out", "out/demo", "directory for the table, CSVs and SVG plots")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals (every policy sees the same ones)")
	fs.Float64Var(&o.idleWatts, "idle-watts", 0, "emulated idle power in W (0: none, as in the published profiles)")
	fs.BoolVar(&o.binary, "binary", true, "send tensors in Triton's binary form")
	fs.StringVar(&o.model, "model", emulator.SimpleModel, "emulated model to load: "+emulator.SimpleModel+" (INT32 [16] add/sub, answers verified) or "+emulator.ImageModel+" (FP32 [3,224,224], 600 KB a request)")
	regimes := fs.String("regimes", "light,loaded", "comma list: light (the trace as it is; paper300 barely loads the GPU) and loaded (the GPU slowed so the trace's peak reaches rho 0.8)")
	realism := fs.String("realism", "exact", "roughness of the emulated server: "+strings.Join(emulator.RealismNames(), ", ")+" (see docs/LEARNING.md)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ratebatch demo [flags]   (also: ratebatch with no command)")
		fmt.Fprintln(fs.Output(), "\nFor each policy, starts an emulated GPU (the preset's tau(b) and zeta(b)) and")
		fmt.Fprintln(fs.Output(), "a ratebatch proxy in front of it, then plays the same trace through every")
		fmt.Fprintln(fs.Output(), "proxy at once, showing rate, batch size, latency and requests per joule as it")
		fmt.Fprintln(fs.Output(), "goes. Ends with a comparison table and SVG plots. No GPU needed.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.realism, err = emulator.LookupRealism(*realism); err != nil {
		fmt.Fprintf(stderr, "ratebatch demo: --realism: %v\n", err)
		return errUsage
	}
	if o.regimes, err = parseRegimes(*regimes); err != nil {
		fmt.Fprintf(stderr, "ratebatch demo: --regimes: %v\n", err)
		return errUsage
	}
	o.policies = demoPolicyList(*pols)
	return demo(ctx, o, stdout)
}

// parseRegimes reads --regimes: a comma list of light and loaded.
func parseRegimes(list string) ([]string, error) {
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

// demoPolicyList is --policies split, or the default policies built in.
func demoPolicyList(flag string) []string {
	if flag != "" {
		return strings.Split(flag, ",")
	}
	var out []string
	known := policy.Names()
	for _, p := range demoPolicies {
		if slices.Contains(known, p) {
			out = append(out, p)
		}
	}
	return out
}

func energyPresets() []string {
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

func demo(ctx context.Context, o demoOpts, stdout io.Writer) error {
	prof, err := preset.Lookup(o.preset)
	if err != nil {
		return err
	}
	series, err := loadTrace(o.traceName)
	if err != nil {
		return err
	}
	if o.speedup != 1 {
		if series, err = series.Compress(o.speedup); err != nil {
			return err
		}
	}
	if o.traceScale != 1 {
		if series, err = series.Scale(o.traceScale); err != nil {
			return err
		}
	}
	if len(o.policies) == 0 {
		return errors.New("no policy to run")
	}
	energy := "no energy figures: requests per joule stays empty"
	if prof.HasEnergy {
		energy = fmt.Sprintf("zeta(b) = %g*b + %g mJ", prof.BetaMJ, prof.Zeta0MJ)
	}
	fmt.Fprintf(stdout, "ratebatch demo: emulated GPU %s, tau(b) = %g*b + %g ms, %s\n", prof.Name, prof.AlphaMs, prof.Tau0Ms, energy)
	fmt.Fprintf(stdout, "load: %s over %v (mean %.0f req/s, peak %.0f req/s), model %q, policies %s\n",
		series.Name(), series.Duration(), series.MeanRate(), series.MaxRate(), o.model, strings.Join(o.policies, ", "))
	if slices.Contains(o.policies, "budget") {
		fmt.Fprintf(stdout, "budget: the fewest joules per request whose mean latency stays within %s %s's (policy.latency_budget)\n",
			policy.DefaultLatencyBudget, demoBaseline)
	}
	peak := peakRho(series, prof, o.model)
	var results []regimeResult
	for i, regime := range o.regimes {
		ro := o
		ro.timeScale = 1
		if regime == "loaded" {
			// Slowing the GPU k-fold loads it as rates k times higher would
			// (rho = lambda*tau), at the same CPU cost for the load.
			ro.timeScale = loadedRho / peak
		}
		if i > 0 {
			ro.out = filepath.Join(o.out, regime)
		}
		fmt.Fprintf(stdout, "\n== %s regime: peak rho %.2f", regime, peak*ro.timeScale)
		printRegime(stdout, regime, ro.timeScale)
		fmt.Fprintf(stdout, "; results in %s\n\n", ro.out)
		rows, err := demoRegime(ctx, ro, prof, series, stdout)
		if err != nil {
			return fmt.Errorf("%s regime: %w", regime, err)
		}
		results = append(results, regimeResult{regime, rows})
	}
	return writeVerdict(stdout, o.out, results)
}

// printRegime says what a regime's load means.
func printRegime(w io.Writer, regime string, timeScale float64) {
	if regime == "loaded" {
		fmt.Fprintf(w, " (the GPU %.1fx slower, as if the trace's rates were %.1fx higher, as docs/RESULTS.md's loaded copy)", timeScale, timeScale)
		return
	}
	fmt.Fprint(w, " (the trace as it is: the GPU is nearly idle, so every policy sends most requests alone and they barely differ)")
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
// o.timeScale, and returns the comparison's rows.
func demoRegime(ctx context.Context, o demoOpts, prof preset.Profile, series *trace.Series, stdout io.Writer) ([]loadreport.Row, error) {
	model := o.model
	_, verify := loadgen.VerifierFor(model)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lanes := make([]*demoLane, len(o.policies))
	for i, p := range o.policies {
		l, err := startLane(ctx, p, prof, o)
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", p, err)
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
				Rate: series, Duration: series.Duration(), Seed: o.seed, Binary: o.binary, Verify: verify,
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
		return nil, err
	}
	return writeDemoReport(stdout, o.out, runs, problems)
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

func startLane(ctx context.Context, pol string, prof preset.Profile, o demoOpts) (*demoLane, error) {
	if pol != "passthrough" && !slices.Contains(policy.Names(), pol) {
		return nil, fmt.Errorf("unknown policy %q (known: %s)", pol, strings.Join(policy.Names(), ", "))
	}
	em, err := emulator.New(emulator.Options{Profile: prof, TimeScale: o.timeScale, Seed: o.seed, IdleWatts: o.idleWatts, Realism: o.realism})
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
	l := &demoLane{policy: pol, em: em, proxy: p, sampler: loadreport.NewSampler("http://"+p.AdminAddr().String(), o.model)}
	l.stopFn = func() { stop(); <-served; em.Close() }
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, ok := p.Dispatcher().Model(o.model); ok {
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

// showProgress prints one line a second until done: the offered rate, then
// per policy what was sent, p50 latency and requests per joule.
func showProgress(w io.Writer, lanes []*demoLane, done <-chan struct{}) {
	const cell = "%5s %7s %6s" // b, p50 ms, req/J
	head1, head2 := fmt.Sprintf("%5s %9s", "", ""), fmt.Sprintf("%5s %9s", "time", "offered/s")
	for _, l := range lanes {
		width := len(fmt.Sprintf(cell, "", "", ""))
		head1 += " | " + fmt.Sprintf("%-*s", width, l.policy)
		head2 += " | " + fmt.Sprintf(cell, "b", "p50 ms", "req/J")
	}
	fmt.Fprintln(w, "Each second: b = mean rows per batch the proxy sent in the last second, p50 = median latency of")
	fmt.Fprintln(w, "the answers completed in it, req/J = requests per joule over the meter's shortest window; - = none.")
	fmt.Fprintln(w, head1)
	fmt.Fprintln(w, head2)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		var line string
		for i, l := range lanes {
			l.mu.Lock()
			s := l.snap
			l.mu.Unlock()
			if i == 0 {
				line = fmt.Sprintf("%4.0fs %9.0f", s.Elapsed.Seconds(), s.TargetRPS)
			}
			b, p50, rpj := progressCells(s, l.sampler.Samples())
			line += " | " + fmt.Sprintf(cell, b, p50, rpj)
		}
		fmt.Fprintln(w, line)
	}
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
	fmt.Fprintf(stdout, "\nComparison (ratios against the first policy, %s):\n", rows[0].Name)
	loadreport.WriteTable(stdout, rows)
	fmt.Fprintln(stdout, "\nVerdict against "+demoBaseline+" (requests per joule over the whole run, from the emulated meter; latency as the client saw it):")
	writeVerdictLines(stdout, rows)
	if err := writeFile(filepath.Join(dir, "summary.md"), func(w io.Writer) error { return loadreport.WriteTable(w, rows) }); err != nil {
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

// regimeResult is one regime's comparison.
type regimeResult struct {
	regime string
	rows   []loadreport.Row
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
	i := slices.IndexFunc(rows, func(b loadreport.Row) bool { return b.Name == demoBaseline })
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
		if r.Name == demoBaseline {
			continue
		}
		v := against(r, rows)
		switch {
		case !v.hasBase:
			fmt.Fprintf(w, "  %-14s no %s run to compare with (add it to --policies)\n", r.Name, demoBaseline)
		case !v.hasEnergy:
			fmt.Fprintf(w, "  %-14s no energy figures; mean latency %.2fx %s's, p99 %.2fx\n", r.Name, v.lat, demoBaseline, v.p99)
		default:
			fmt.Fprintf(w, "  %-14s %s requests per joule (%.2f vs %.2f req/J), mean latency %.2fx %s's, p99 %.2fx: %s\n",
				r.Name, pct(v.gain), v.rpj, v.baseRPJ, v.lat, demoBaseline, v.p99, v.word())
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
		energy = "fewer joules per request"
	case v.gain < 0.98:
		energy = "more joules per request"
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
// stdout and in dir/verdict.md, then budget's gain in one sentence.
func writeVerdict(stdout io.Writer, dir string, results []regimeResult) error {
	var b strings.Builder
	b.WriteString("| policy |")
	sep := "|---|"
	for _, r := range results {
		fmt.Fprintf(&b, " %s: req/J vs %s | %s: mean (p99) latency vs %s |", r.regime, demoBaseline, r.regime, demoBaseline)
		sep += "---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for i, row := range results[0].rows {
		fmt.Fprintf(&b, "| %s |", row.Name)
		for _, r := range results {
			v := against(r.rows[i], r.rows)
			switch {
			case row.Name == demoBaseline:
				fmt.Fprintf(&b, " baseline: %s req/J | baseline: %.2f (%.2f) ms |", opt(r.rows[i].RequestsPerJoule), r.rows[i].MeanLatencyMs, r.rows[i].P99LatencyMs)
			case !v.hasBase:
				b.WriteString(" - | - |")
			case !v.hasEnergy:
				fmt.Fprintf(&b, " - | %.2fx (%.2fx) |", v.lat, v.p99)
			default:
				fmt.Fprintf(&b, " %s (%.2fx) | %.2fx (%.2fx) |", pct(v.gain), v.gain, v.lat, v.p99)
			}
		}
		b.WriteString("\n")
	}
	if s := budgetSentence(results); s != "" {
		b.WriteString("\n" + s + "\n")
	}
	fmt.Fprintln(stdout, "\n== Verdict: every policy against "+demoBaseline+", the client without a proxy")
	fmt.Fprint(stdout, b.String())
	return writeFile(filepath.Join(dir, "verdict.md"), func(w io.Writer) error { _, err := io.WriteString(w, b.String()); return err })
}

// budgetSentence names budget's gain in requests per joule, per regime.
func budgetSentence(results []regimeResult) string {
	var parts []string
	for _, r := range results {
		i := slices.IndexFunc(r.rows, func(x loadreport.Row) bool { return x.Name == "budget" })
		if i < 0 {
			return ""
		}
		if v := against(r.rows[i], r.rows); v.hasEnergy {
			parts = append(parts, fmt.Sprintf("%s requests per joule (%.2fx) at %.2fx the mean latency in the %s regime", pct(v.gain), v.gain, v.lat, r.regime))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "budget (mean latency at most " + policy.DefaultLatencyBudget.String() + " " + demoBaseline + "'s) against " + demoBaseline + ": " + strings.Join(parts, "; ") + "."
}

// writeRunFiles keeps a run as the two CSVs `ratebatch report` reads.
func writeRunFiles(dir string, r loadreport.Run) error {
	if err := writeFile(filepath.Join(dir, r.Name+".load.csv"), func(w io.Writer) error { return loadgen.WriteCSV(w, r.Records) }); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, r.Name+".samples.csv"), func(w io.Writer) error { return loadreport.WriteSamplesCSV(w, r.Samples) })
}

// writeFile creates path and fills it with fn.
func writeFile(path string, fn func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}
