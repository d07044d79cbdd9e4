package compare

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ratebatch/ratebatch/policy"
)

// frontier writes the latency-budget section: the headline figures of the
// budget policy at 1.10x, the frontier table per preset, its plots and the
// traces at batchmonitor's latency.
func (m md) frontier() {
	r := m.r
	if len(r.Frontier) == 0 {
		return
	}
	m.p("## Latency budget: the most requests per joule within a budget")
	m.p("")
	m.p("The constrained optimum minimises mean power subject to mean latency <= budget (`smdp.SolveBudget`: the Lagrangian over w2 " +
		"with the exact solver, randomised between the two neighbouring control limits so that the budget is met with equality; " +
		"ALGORITHMS.md, \"Latency budget\"). Its curve is the lower convex hull of the control-limit policies in the (latency, power) plane " +
		"(`smdp.Frontier`). A budget of 1.10x is 10% above ad-hoc's exact mean latency at that load. The `budget` policy plans that optimum " +
		"live from the measured rate (on a 2% rate grid) and is simulated on the same arrivals as every other policy; *over* is its simulated " +
		"mean latency against the budget applied to ad-hoc's simulated latency on those arrivals (sampling cancels), *over exact* against the exact budget.")
	m.p("")
	var gaps, overs, oversExact []float64
	var within, inBudget int
	for _, f := range r.Frontier {
		for _, b := range f.Budgets {
			if math.Abs(b.Factor-1.10) > 1e-9 {
				continue
			}
			gaps = append(gaps, b.RPJGapPct)
			overs = append(overs, b.OverPct)
			oversExact = append(oversExact, b.OverOptPct)
			if b.RPJGapPct >= -1 {
				within++
			}
			if b.OverPct <= 1 {
				inBudget++
			}
		}
	}
	if len(gaps) > 0 {
		m.p("- **budget 1.10x**: requests per joule within 1%% of the constrained optimum at %d of %d points (range %s), "+
			"mean latency within the budget +1%% at %d of %d points (over: %s; over exact: %s).",
			within, len(gaps), span(gaps, pct2), inBudget, len(overs), span(overs, pct2), span(oversExact, pct2))
		m.p("")
	}
	for _, pr := range r.Presets {
		var fs []*Frontier
		for i := range r.Frontier {
			if r.Frontier[i].Preset == pr.Name {
				fs = append(fs, &r.Frontier[i])
			}
		}
		if len(fs) == 0 {
			continue
		}
		m.p("### %s", pr.Name)
		m.p("")
		for _, f := range fs {
			if slices.Contains(frontierPlotRhos, f.Rho) {
				m.figure(fmt.Sprintf("frontier-%s-rho%.1f.svg", f.Preset, f.Rho), fmt.Sprintf("requests per joule against mean latency at rho %.1f", f.Rho))
			}
		}
		m.p("")
		head := "| rho | ad-hoc ms, req/J | 1.10x optimum ms, req/J (limits, mix) | budget 1.10x sim ms, req/J (gap, over, over exact) |"
		sep := "|---|---|---|---|"
		for _, f := range FrontierBudgets {
			if math.Abs(f-1.10) > 1e-9 {
				head += fmt.Sprintf(" %.2fx sim req/J (gap, over) |", f)
				sep += "---|"
			}
		}
		for _, w := range FrontierWeights {
			head += fmt.Sprintf(" w2=%g optimum ms, req/J |", w)
			sep += "---|"
		}
		m.p(head)
		m.p(sep)
		for _, f := range fs {
			line := fmt.Sprintf("| %.1f | %s, %.2f |", f.Rho, num(f.AdhocMs), f.AdhocRPJ)
			for _, b := range f.Budgets {
				if math.Abs(b.Factor-1.10) > 1e-9 {
					continue
				}
				line += fmt.Sprintf(" %s, %.2f (%d/%d, %.3f) | %s, %.2f (%s, %s, %s) |", num(b.OptMs), b.OptRPJ, b.Limits[0], b.Limits[1], b.Mix,
					num(b.SimMs), b.SimRPJ, pct2(b.RPJGapPct), pct2(b.OverPct), pct2(b.OverOptPct))
			}
			for _, b := range f.Budgets {
				if math.Abs(b.Factor-1.10) > 1e-9 {
					line += fmt.Sprintf(" %.2f (%s, %s) |", b.SimRPJ, pct2(b.RPJGapPct), pct2(b.OverPct))
				}
			}
			for _, w := range f.Weighted {
				line += fmt.Sprintf(" %s, %.2f |", num(w.LatencyMs), w.RPJ)
			}
			m.p(line)
		}
		m.p("")
	}
	if len(r.TraceBudgets) > 0 {
		m.p("### paper300: the budget policy at batchmonitor's latency")
		m.p("")
		m.p("On each trace, ad-hoc, batchmonitor, and the budget policy at 1.10x (its row in the paper300 tables) and at the budget equal to batchmonitor's simulated " +
			"mean latency relative to ad-hoc's (so that the two are compared at the same latency). Same arrivals for every row.")
		m.p("")
		m.p("| trace | preset | policy | mean ms | x ad-hoc | p99 ms | req/J | vs ad-hoc |")
		m.p("|---|---|---|---|---|---|---|---|")
		for _, c := range r.TraceBudgets {
			if len(c.Rows) == 0 {
				continue
			}
			base := c.Rows[0]
			rows := c.Rows
			for i := range r.Traces {
				if tr := &r.Traces[i]; tr.Preset == c.Preset && tr.Load == c.Load {
					if b := tr.row(policy.NameBudget); b != nil {
						rows = append(append(rows[:2:2], *b), c.Rows[2:]...)
					}
				}
			}
			for _, row := range rows {
				m.p("| %s | %s | %s | %s | %.2f | %s | %.2f | %s |", c.Load, c.Preset, row.Policy, num(row.MeanMs), row.MeanMs/base.MeanMs,
					num(row.P99Ms), row.RPJ, pct2(100*(row.RPJ/base.RPJ-1)))
			}
		}
		m.p("")
	}
}

// pct2 writes a signed percentage with two decimals, for the 1% figures.
func pct2(x float64) string {
	s := fmt.Sprintf("%+.2f%%", x)
	return strings.Replace(s, "+0.00%", "0.00%", 1)
}
