package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

func init() {
	register("smdp", "solve the SMDP-optimal batching policy and price other policies on the same model", runSMDP)
}

// smdpReport is the --json output. The first five keys are the CLI
// contract; the rest add context and never rename those.
type smdpReport struct {
	G            float64 `json:"g"`
	Delta        float64 `json:"delta"`
	Iterations   int     `json:"iterations"`
	ControlLimit int     `json:"control_limit"`
	Policy       []int   `json:"policy"`

	Converged        bool     `json:"converged"`
	GLower           float64  `json:"g_lower"`
	GUpper           float64  `json:"g_upper"`
	LatencyMs        float64  `json:"latency_ms"`
	PowerW           *float64 `json:"power_w"` // null without energy figures
	OverflowCost     float64  `json:"overflow_cost"`
	MeanBatch        float64  `json:"mean_batch"`
	RequestsPerJoule *float64 `json:"requests_per_joule"`

	Preset string `json:"preset"`
	batchcost.Latency
	BetaMJ            *float64 `json:"beta_mj"`
	Zeta0MJ           *float64 `json:"zeta0_mj"`
	MaxBatch          int      `json:"bmax"`
	Rho               float64  `json:"rho"`
	RateRPS           float64  `json:"rate_rps"`
	W1                float64  `json:"w1"`
	W2                float64  `json:"w2"`
	SMax              int      `json:"smax"`
	Co                float64  `json:"co"`
	Epsilon           float64  `json:"epsilon"`
	Eta               float64  `json:"eta"`
	BatchMonitorBatch int      `json:"batchmonitor_batch"`

	// Policies is the comparison table (--compare / --evaluate), the
	// optimum first.
	Policies []smdpPolicyRow `json:"policies,omitempty"`
}

// smdpPolicyRow is one policy's exact performance on the model.
type smdpPolicyRow struct {
	Name             string   `json:"name"`
	G                float64  `json:"g"`
	GapPct           float64  `json:"gap_pct"`
	Delta            float64  `json:"delta"`
	LatencyMs        float64  `json:"latency_ms"`
	PowerW           *float64 `json:"power_w"`
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	MeanBatch        float64  `json:"mean_batch"`
	ControlLimit     int      `json:"control_limit"`
}

func runSMDP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("smdp", stderr)
	model := addProfileFlags(fs)
	rho := fs.Float64("rho", 0, "load rho = lambda/mu(B_max), where mu(b) = b/tau(b); 0 < rho < 1")
	rate := fs.Float64("rate", 0, "arrival rate in requests/s (instead of --rho)")
	w1 := fs.Float64("w1", 1, "weight of mean latency (per ms) in the objective")
	w2 := fs.Float64("w2", 0, "weight of mean power (per W) in the objective; needs energy figures")
	sMax := fs.Int("smax", smdp.DefaultSMax, "largest exact state (requests); an overflow state stands for more")
	co := fs.String("co", "auto", "abstract cost per ms in the overflow state; auto = the ad-hoc policy's average cost")
	eps := fs.Float64("epsilon", smdp.DefaultEpsilon, "relative value iteration stops when span(J_new - J) < epsilon")
	iterMax := fs.Int("iter-max", smdp.DefaultIterMax, "relative value iteration sweep cap")
	compare := fs.Bool("compare", false, "also price adhoc, batchmonitor, static:B_max and the pure control-limit policy against the optimum")
	evaluate := fs.String("evaluate", "", "comma list of policies to price against the optimum: adhoc, batchmonitor, static:B, limit:L")
	asJSON := fs.Bool("json", false, "print one JSON object")
	latencyBudget := fs.String("latency-budget", "", "instead of weights: the least-power policy whose mean latency is within this budget, "+
		"a factor of ad-hoc's mean latency (1.10x) or a duration (4ms); needs energy figures")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "ratebatch smdp: "+format+"\n", a...)
		return errUsage
	}

	prof, err := model.profile(fs)
	if err != nil {
		return usageErr("%v", err)
	}
	set := flagsSet(fs)
	m := smdp.ModelFor(prof.Latency, prof.KnownEnergy(), prof.MaxBatch, 0)
	switch countSet(set, "rho", "rate") {
	case 0:
		return usageErr("give the load: --rho R or --rate RPS")
	case 2:
		return usageErr("give only one of --rho and --rate")
	}
	if set["rho"] {
		if !(*rho > 0 && *rho < 1) {
			return usageErr("--rho must be in (0, 1), got %v (rho >= 1 is unstable: arrivals reach the throughput of full batches)", *rho)
		}
		m.LambdaPerMs = *rho * m.MuPerMs(m.MaxBatch)
	} else {
		if !(*rate > 0) {
			return usageErr("--rate must be > 0 requests/s, got %v", *rate)
		}
		m.LambdaPerMs = *rate / 1000
	}
	if err := m.Validate(); err != nil {
		return usageErr("%v", err)
	}
	if set["latency-budget"] {
		for _, f := range []string{"w1", "w2", "co", "compare", "evaluate", "epsilon", "iter-max"} {
			if set[f] {
				return usageErr("--latency-budget chooses the weights itself; drop --%s", f)
			}
		}
		b, err := smdp.ParseBudget(*latencyBudget)
		if err != nil {
			return usageErr("--latency-budget: %v", err)
		}
		if !prof.HasEnergy {
			return usageErr("--latency-budget trades latency for power, but %s has no published energy figures: give --beta and --zeta0", prof.Name)
		}
		return runSMDPBudget(ctx, stdout, prof, m, b, *sMax, *asJSON)
	}
	if *w2 != 0 && !prof.HasEnergy {
		return usageErr("--w2 %v weighs power, but %s has no published energy figures: give --beta and --zeta0, or --w2 0", *w2, prof.Name)
	}
	o := smdp.Options{W1: *w1, W2: *w2, Epsilon: *eps, SMax: *sMax, IterMax: *iterMax}
	if *co == "auto" {
		if o.Co, err = smdp.DefaultCo(m, o.W1, o.W2, o.SMax); err != nil {
			return usageErr("%v", err)
		}
	} else if o.Co, err = strconv.ParseFloat(*co, 64); err != nil {
		return usageErr("--co must be auto or a number >= 0, got %q", *co)
	}

	// Validate everything before the solve, which may take a while.
	ev, err := smdp.NewEvaluator(m, o)
	if err != nil {
		return usageErr("%v", err)
	}
	type named struct {
		name   string
		policy []int
	}
	var others []named
	for _, spec := range strings.Split(*evaluate, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		pol, err := smdp.NamedPolicy(m, o.SMax, spec)
		if err != nil {
			return usageErr("--evaluate: %v", err)
		}
		others = append(others, named{spec, pol})
	}

	sol, err := smdp.Solve(ctx, m, o)
	if err != nil {
		return err
	}

	if *compare {
		limit := min(sol.ControlLimit, o.SMax+1)
		others = append([]named{
			{"adhoc", smdp.AdHoc(m, o.SMax)},
			{"batchmonitor", smdp.BatchMonitor(m, o.SMax)},
			{fmt.Sprintf("static:%d", m.MaxBatch), smdp.Static(m, o.SMax, m.MaxBatch)},
			{fmt.Sprintf("limit:%d", limit), smdp.ControlLimit(m, o.SMax, limit)},
		}, others...)
	}
	var rows []smdpPolicyRow
	if len(others) > 0 {
		rows = append(rows, newSMDPPolicyRow("optimal", sol.Evaluation, sol.ControlLimit, sol.G, m, prof.HasEnergy))
		for _, p := range others {
			res, err := ev.Evaluate(p.policy)
			if err != nil {
				return fmt.Errorf("evaluating %s: %w", p.name, err)
			}
			rows = append(rows, newSMDPPolicyRow(p.name, res, smdp.ControlLimitOf(p.policy), sol.G, m, prof.HasEnergy))
		}
	}

	if !sol.Converged {
		fmt.Fprintf(stderr, "ratebatch smdp: warning: not converged after %d sweeps (span %.3g >= epsilon %g); raise --iter-max\n",
			sol.Iterations, sol.GUpper-sol.GLower, o.Epsilon)
	}
	if !(sol.Delta < smdp.DeltaAccept) {
		fmt.Fprintf(stderr, "ratebatch smdp: warning: delta %.3g >= %g: the overflow state carries a real share of the cost; raise --smax\n",
			sol.Delta, smdp.DeltaAccept)
	}

	if *asJSON {
		rep := smdpReport{
			G: sol.G, Delta: sol.Delta, Iterations: sol.Iterations, ControlLimit: sol.ControlLimit, Policy: sol.Policy,
			Converged: sol.Converged, GLower: sol.GLower, GUpper: sol.GUpper,
			LatencyMs: sol.LatencyMs, OverflowCost: sol.OverflowCost, MeanBatch: sol.MeanBatch,
			Preset: prof.Name, Latency: m.Latency, MaxBatch: m.MaxBatch,
			Rho: m.Rho(), RateRPS: m.LambdaPerMs * 1000,
			W1: o.W1, W2: o.W2, SMax: o.SMax, Co: o.Co, Epsilon: o.Epsilon, Eta: sol.Eta,
			BatchMonitorBatch: smdp.BatchMonitorSize(m),
			Policies:          rows,
		}
		if prof.HasEnergy {
			rep.PowerW = floatRef(sol.PowerW)
			rep.RequestsPerJoule = smdpRequestsPerJoule(m, sol.PowerW)
			rep.BetaMJ, rep.Zeta0MJ = floatRef(m.BetaMJ), floatRef(m.Zeta0MJ)
		}
		return json.NewEncoder(stdout).Encode(rep)
	}
	printSMDP(stdout, prof, m, o, *co == "auto", sol, rows)
	return nil
}

func newSMDPPolicyRow(name string, ev smdp.Evaluation, limit int, gOpt float64, m smdp.Model, energy bool) smdpPolicyRow {
	r := smdpPolicyRow{
		Name: name, G: ev.G, GapPct: 100 * (ev.G - gOpt) / gOpt, Delta: ev.Delta,
		LatencyMs: ev.LatencyMs, MeanBatch: ev.MeanBatch, ControlLimit: limit,
	}
	if energy {
		r.PowerW = floatRef(ev.PowerW)
		r.RequestsPerJoule = smdpRequestsPerJoule(m, ev.PowerW)
	}
	return r
}

// requestsPerJoule is lambda / power: (req/ms) / (mJ/ms) per mJ, times 1000.
func smdpRequestsPerJoule(m smdp.Model, powerW float64) *float64 {
	if !(powerW > 0) {
		return nil
	}
	return floatRef(1000 * m.LambdaPerMs / powerW)
}

func floatRef(v float64) *float64 { return &v }

func printSMDP(w io.Writer, prof preset.Profile, m smdp.Model, o smdp.Options, autoCo bool, sol smdp.Solution, rows []smdpPolicyRow) {
	energy := "no energy figures"
	if prof.HasEnergy {
		energy = fmt.Sprintf("zeta(b) = %g*b + %g mJ", m.BetaMJ, m.Zeta0MJ)
	}
	fmt.Fprintf(w, "model %s: tau(b) = %g*b + %g ms, %s, B_max %d\n", prof.Name, m.AlphaMs, m.Tau0Ms, energy, m.MaxBatch)
	coNote := ""
	if autoCo {
		coNote = " (auto)"
	}
	fmt.Fprintf(w, "load rho %.4g (%.6g req/s); objective %g*latency_ms + %g*power_W; smax %d, co %.6g%s\n",
		m.Rho(), m.LambdaPerMs*1000, o.W1, o.W2, o.SMax, o.Co, coNote)
	fmt.Fprintf(w, "optimal: g %.6g = latency %.6g ms", sol.G, sol.LatencyMs)
	if prof.HasEnergy {
		fmt.Fprintf(w, ", power %.6g W", sol.PowerW)
	}
	fmt.Fprintf(w, ", mean batch %.4g; control limit %d\n", sol.MeanBatch, sol.ControlLimit)
	conv := "converged"
	if !sol.Converged {
		conv = "NOT converged"
	}
	fmt.Fprintf(w, "RVI: %d sweeps, %s, g in [%.6g, %.6g]; delta %.3g\n", sol.Iterations, conv, sol.GLower, sol.GUpper, sol.Delta)
	fmt.Fprintln(w, "policy by state (requests in system):")
	for _, r := range smdpPolicyRuns(sol.Policy) {
		fmt.Fprintf(w, "  %-10s %s\n", r.states, r.action)
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tg\tgap %\tlatency ms\tpower W\treq/J\tmean batch\tlimit\tdelta\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.6g\t%.2f\t%.4g\t%s\t%s\t%.3g\t%d\t%.2g\t\n", r.Name, r.G, r.GapPct, r.LatencyMs,
			smdpOptFloat(r.PowerW, "%.4g"), smdpOptFloat(r.RequestsPerJoule, "%.4g"), r.MeanBatch, r.ControlLimit, r.Delta)
	}
	tw.Flush()
	var over []string
	for _, r := range rows {
		if !(r.Delta < smdp.DeltaAccept) {
			over = append(over, r.Name)
		}
	}
	if len(over) > 0 {
		fmt.Fprintf(w, "note: delta >= %g for %s: the queue reaches the state bound, so g understates the cost; raise --smax\n",
			smdp.DeltaAccept, strings.Join(over, ", "))
	}
}

func smdpOptFloat(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

type smdpPolicyRun struct{ states, action string }

// smdpPolicyRuns groups consecutive states with the same kind of action:
// wait, serve all, or serve a fixed size; the overflow state comes last.
func smdpPolicyRuns(policy []int) []smdpPolicyRun {
	if len(policy) < 2 {
		return nil
	}
	so := len(policy) - 1
	label := func(s int) string {
		switch a := policy[s]; {
		case a == 0:
			return "wait"
		case a == s:
			return "serve all"
		default:
			return fmt.Sprintf("serve %d", a)
		}
	}
	var runs []smdpPolicyRun
	start := 0
	for s := 1; s <= so; s++ {
		if s < so && label(s) == label(start) {
			continue
		}
		states := strconv.Itoa(start)
		if s-1 > start {
			states += "-" + strconv.Itoa(s-1)
		}
		runs = append(runs, smdpPolicyRun{states, label(start)})
		start = s
	}
	a := policy[so]
	overflow := "wait"
	if a > 0 {
		overflow = fmt.Sprintf("serve %d", a)
	}
	return append(runs, smdpPolicyRun{"S_o", overflow})
}

// smdpBudgetReport is the --latency-budget --json output. The first seven
// keys are the CLI contract (issue 15); control_limit holds the limits of
// the two policies the optimum mixes, mix the probability of following the
// second where they differ.
type smdpBudgetReport struct {
	AdhocMeanLatencyMs float64  `json:"adhoc_mean_latency_ms"`
	MeanLatencyMs      float64  `json:"mean_latency_ms"`
	PowerW             float64  `json:"power_w"`
	RequestsPerJoule   *float64 `json:"requests_per_joule"`
	W2                 float64  `json:"w2"`
	Mix                float64  `json:"mix"`
	ControlLimit       [2]int   `json:"control_limit"`

	Budget          string     `json:"budget"`
	BudgetMs        float64    `json:"budget_ms"`
	Binding         bool       `json:"binding"`
	TimeShare       float64    `json:"time_share"`
	PolicyLatencyMs [2]float64 `json:"policy_latency_ms"`
	PolicyPowerW    [2]float64 `json:"policy_power_w"`
	AdhocPowerW     float64    `json:"adhoc_power_w"`
	AdhocRPJ        *float64   `json:"adhoc_requests_per_joule"`
	MeanBatch       float64    `json:"mean_batch"`
	Delta           float64    `json:"delta"`
	Solves          int        `json:"solves"`
	Preset          string     `json:"preset"`
	Rho             float64    `json:"rho"`
	RateRPS         float64    `json:"rate_rps"`
	SMax            int        `json:"smax"`
}

func runSMDPBudget(ctx context.Context, stdout io.Writer, prof preset.Profile, m smdp.Model, b smdp.Budget, sMax int, asJSON bool) error {
	c, err := smdp.SolveBudget(ctx, m, b, sMax)
	if err != nil {
		return err
	}
	adhoc, err := smdp.Evaluate(m, smdp.Options{W1: 1, Epsilon: smdp.DefaultEpsilon, SMax: sMax, IterMax: smdp.DefaultIterMax}, smdp.AdHoc(m, sMax))
	if err != nil {
		return fmt.Errorf("evaluating ad-hoc: %w", err)
	}
	rep := smdpBudgetReport{
		AdhocMeanLatencyMs: c.AdhocLatencyMs, MeanLatencyMs: c.LatencyMs, PowerW: c.PowerW,
		RequestsPerJoule: smdpRequestsPerJoule(m, c.PowerW), W2: c.W2, Mix: c.Mix,
		ControlLimit: [2]int{c.First.Limit, c.Second.Limit},
		Budget:       b.String(), BudgetMs: c.BudgetMs, Binding: c.Binding, TimeShare: c.TimeShare,
		PolicyLatencyMs: [2]float64{c.First.LatencyMs, c.Second.LatencyMs},
		PolicyPowerW:    [2]float64{c.First.PowerW, c.Second.PowerW},
		AdhocPowerW:     adhoc.PowerW, AdhocRPJ: smdpRequestsPerJoule(m, adhoc.PowerW),
		MeanBatch: c.MeanBatch, Delta: c.Delta, Solves: c.Solves,
		Preset: prof.Name, Rho: m.Rho(), RateRPS: 1000 * m.LambdaPerMs, SMax: sMax,
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(rep)
	}
	fmt.Fprintf(stdout, "model %s: tau(b) = %g*b + %g ms, zeta(b) = %g*b + %g mJ, B_max %d\n", prof.Name, m.AlphaMs, m.Tau0Ms, m.BetaMJ, m.Zeta0MJ, m.MaxBatch)
	fmt.Fprintf(stdout, "load rho %.4g (%.6g req/s); budget %s = %.4g ms mean latency (ad-hoc %.4g ms, %.4g req/J)\n",
		m.Rho(), 1000*m.LambdaPerMs, b, c.BudgetMs, c.AdhocLatencyMs, *rep.AdhocRPJ)
	if !c.Binding {
		fmt.Fprintf(stdout, "the budget does not bind: control limit %d, latency %.4g ms, power %.4g W, %.4g req/J\n",
			c.First.Limit, c.LatencyMs, c.PowerW, *rep.RequestsPerJoule)
		return nil
	}
	fmt.Fprintf(stdout, "optimum: control limit %d (%.4g ms, %.4g W) mixed with %d (%.4g ms, %.4g W): mix %.4f (time share %.4f), w2 %.4g ms/W\n",
		c.First.Limit, c.First.LatencyMs, c.First.PowerW, c.Second.Limit, c.Second.LatencyMs, c.Second.PowerW, c.Mix, c.TimeShare, c.W2)
	fmt.Fprintf(stdout, "mean latency %.4g ms, power %.4g W, %.4g req/J (%+.1f%% vs ad-hoc), %d solves\n",
		c.LatencyMs, c.PowerW, *rep.RequestsPerJoule, 100*(*rep.RequestsPerJoule / *rep.AdhocRPJ - 1), c.Solves)
	return nil
}
