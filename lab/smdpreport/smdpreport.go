// Package smdpreport is the laboratory's report of the SMDP optimum of a
// model profile (`ratebatch smdp`): the solve, the exact price of other
// policies against it, the latency-budget optimum, and their text and JSON
// forms. The theory itself is policy/smdp.
package smdpreport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Report is the --json output. The first five keys are the CLI
// contract; the rest add context and never rename those.
type Report struct {
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
	Policies []PolicyRow `json:"policies,omitempty"`
}

// PolicyRow is one policy's exact performance on the model.
type PolicyRow struct {
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

func newPolicyRow(name string, ev smdp.Evaluation, limit int, gOpt float64, m smdp.Model, energy bool) PolicyRow {
	r := PolicyRow{
		Name: name, G: ev.G, GapPct: 100 * (ev.G - gOpt) / gOpt, Delta: ev.Delta,
		LatencyMs: ev.LatencyMs, MeanBatch: ev.MeanBatch, ControlLimit: limit,
	}
	if energy {
		r.PowerW = floatRef(ev.PowerW)
		r.RequestsPerJoule = requestsPerJoule(m, ev.PowerW)
	}
	return r
}

// requestsPerJoule is lambda / power: (req/ms) / (mJ/ms) per mJ, times 1000.
func requestsPerJoule(m smdp.Model, powerW float64) *float64 {
	if !(powerW > 0) {
		return nil
	}
	return floatRef(1000 * m.LambdaPerMs / powerW)
}

func floatRef(v float64) *float64 { return &v }

func writeText(w io.Writer, prof preset.Profile, m smdp.Model, o smdp.Options, autoCo bool, sol smdp.Solution, rows []PolicyRow) {
	writeModel(w, prof, m)
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
	for _, r := range policyRuns(sol.Policy) {
		fmt.Fprintf(w, "  %-10s %s\n", r.States, r.Action)
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tg\tgap %\tlatency ms\tpower W\treq/J\tmean batch\tlimit\tdelta\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.6g\t%.2f\t%.4g\t%s\t%s\t%.3g\t%d\t%.2g\t\n", r.Name, r.G, r.GapPct, r.LatencyMs,
			optFloat(r.PowerW, "%.4g"), optFloat(r.RequestsPerJoule, "%.4g"), r.MeanBatch, r.ControlLimit, r.Delta)
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

// writeModel prints the model's line: its tau(b), zeta(b) and B_max.
func writeModel(w io.Writer, prof preset.Profile, m smdp.Model) {
	energy := "no energy figures"
	if prof.HasEnergy {
		energy = fmt.Sprintf("zeta(b) = %g*b + %g mJ", m.BetaMJ, m.Zeta0MJ)
	}
	fmt.Fprintf(w, "model %s: tau(b) = %g*b + %g ms, %s, B_max %d\n", prof.Name, m.AlphaMs, m.Tau0Ms, energy, m.MaxBatch)
}

func optFloat(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// policyRuns groups consecutive states with the same kind of action
// (smdp.PolicyRuns); the overflow state comes last.
func policyRuns(policy []int) []smdp.PolicyRun {
	if len(policy) < 2 {
		return nil
	}
	so := len(policy) - 1
	overflow := "wait"
	if a := policy[so]; a > 0 {
		overflow = fmt.Sprintf("serve %d", a)
	}
	return append(smdp.PolicyRuns(policy[:so]), smdp.PolicyRun{States: "S_o", Action: overflow})
}

// BudgetReport is the --latency-budget --json output. The first seven
// keys are the CLI contract; control_limit holds the limits of
// the two policies the optimum mixes, mix the probability of following the
// second where they differ.
type BudgetReport struct {
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

// Budget is the latency-budget optimum of a model at its load: the
// least-power policy whose mean latency is within the budget.
type Budget struct {
	Profile preset.Profile
	Model   smdp.Model // with the arrival rate set
	Budget  smdp.Budget
	SMax    int
}

// Run solves the budget optimum and prints it, as text or a BudgetReport.
func (bj Budget) Run(ctx context.Context, stdout, _ io.Writer, asJSON bool) error {
	prof, m, b, sMax := bj.Profile, bj.Model, bj.Budget, bj.SMax
	c, err := smdp.SolveBudget(ctx, m, b, sMax)
	if err != nil {
		return err
	}
	adhoc, err := smdp.Evaluate(m, smdp.Options{W1: 1, Epsilon: smdp.DefaultEpsilon, SMax: sMax, IterMax: smdp.DefaultIterMax}, smdp.AdHoc(m, sMax))
	if err != nil {
		return fmt.Errorf("evaluating ad-hoc: %w", err)
	}
	rep := BudgetReport{
		AdhocMeanLatencyMs: c.AdhocLatencyMs, MeanLatencyMs: c.LatencyMs, PowerW: c.PowerW,
		RequestsPerJoule: requestsPerJoule(m, c.PowerW), W2: c.W2, Mix: c.Mix,
		ControlLimit: [2]int{c.First.Limit, c.Second.Limit},
		Budget:       b.String(), BudgetMs: c.BudgetMs, Binding: c.Binding, TimeShare: c.TimeShare,
		PolicyLatencyMs: [2]float64{c.First.LatencyMs, c.Second.LatencyMs},
		PolicyPowerW:    [2]float64{c.First.PowerW, c.Second.PowerW},
		AdhocPowerW:     adhoc.PowerW, AdhocRPJ: requestsPerJoule(m, adhoc.PowerW),
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
