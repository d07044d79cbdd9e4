package compare

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ratebatch/ratebatch/lab/plot"
	"github.com/ratebatch/ratebatch/policy"
)

// Figure is one plot of the report and the file name it is written to.
type Figure struct {
	File   string
	Figure plot.Figure
}

// sizePolicies are drawn in the batch-size time series: the ones whose size
// (or control limit) moves with the rate. slack's target is Algorithm 1's
// size, the same line as batchmonitor's.
var sizePolicies = []string{policy.NameBatchMonitor, policy.NameBatchMonitorPlus, policy.NameSMDP}

// latencyPolicies are drawn in the latency time series.
var latencyPolicies = []string{policy.NameAdhoc, policy.NameBatchMonitor, policy.NameBatchMonitorPlus, policy.NameSMDP, policy.NameSlack}

// line is one series with the policy's own colour, the same in every
// figure; batchmonitor+ is dashed, as it often lies on batchmonitor's line.
func (r *Report) line(name string, x, y []float64) plot.Series {
	s := plot.Series{Name: name, X: x, Y: y, Dashed: name == policy.NameBatchMonitorPlus}
	if i := slices.Index(r.Policies, name); i >= 0 {
		s.Color = plot.Color(i)
	}
	return s
}

// Figures returns the report's plots: per preset, mean latency, requests
// per joule and cost relative to the SMDP optimum against load; for the
// first preset, the trace runs' rate, chosen batch size and latency over
// time.
func (r *Report) Figures() []Figure {
	var out []Figure
	for _, pr := range r.Presets {
		pts := r.points(pr.Name)
		if len(pts) == 0 {
			continue
		}
		lat := plot.Figure{Title: pr.Name + ": mean latency", XLabel: "load rho", YLabel: "mean latency (ms)", LogY: true}
		rpj := plot.Figure{Title: pr.Name + ": energy efficiency", XLabel: "load rho", YLabel: "requests per joule"}
		rel := plot.Figure{Title: pr.Name + ": cost / SMDP optimum", XLabel: "load rho", YLabel: "weighted cost / g*", LogY: true}
		for _, name := range r.Policies {
			var xs, l, e, c []float64
			for _, pt := range pts {
				row := pt.row(name)
				if row == nil {
					continue
				}
				xs = append(xs, pt.Rho)
				l = append(l, row.MeanMs)
				e = append(e, row.RPJ)
				c = append(c, row.Cost/pt.Optimum.G)
			}
			lat.Series = append(lat.Series, r.line(name, xs, l))
			rpj.Series = append(rpj.Series, r.line(name, xs, e))
			rel.Series = append(rel.Series, r.line(name, xs, c))
		}
		out = append(out,
			Figure{File: "latency-" + pr.Name + ".svg", Figure: lat},
			Figure{File: "rpj-" + pr.Name + ".svg", Figure: rpj},
			Figure{File: "cost-" + pr.Name + ".svg", Figure: rel})
	}
	out = append(out, r.frontierFigures()...)
	if len(r.Presets) == 0 {
		return out
	}
	first := r.Presets[0].Name
	for _, tr := range r.Traces {
		if tr.Preset != first {
			continue
		}
		tag := strings.ReplaceAll(tr.Load, " ", "-") + "-" + first
		rate := plot.Figure{Title: fmt.Sprintf("%s on %s: arrival rate", tr.Load, first), XLabel: "time (s)", YLabel: "requests per second"}
		size := plot.Figure{Title: fmt.Sprintf("%s on %s: batch size in force", tr.Load, first), XLabel: "time (s)", YLabel: "batch size / control limit"}
		lat := plot.Figure{Title: fmt.Sprintf("%s on %s: mean latency per second", tr.Load, first), XLabel: "time (s)", YLabel: "mean latency (ms)", LogY: true}
		for _, row := range tr.Rows {
			inSize, inLat := slices.Contains(sizePolicies, row.Policy), slices.Contains(latencyPolicies, row.Policy)
			if !inSize && !inLat && row.Policy != policy.NameAdhoc {
				continue
			}
			var t, rt, bs, ml []float64
			for _, w := range row.Windows {
				t = append(t, w.StartS)
				rt = append(rt, w.RatePerSec)
				bs = append(bs, float64(w.BatchSize))
				m := math.NaN()
				if w.Completed > 0 {
					m = w.MeanLatencyMs
				}
				ml = append(ml, m)
			}
			if row.Policy == policy.NameAdhoc {
				rate.Series = append(rate.Series, plot.Series{Name: "measured per 1-s window", X: t, Y: rt, Color: plot.Color(0)})
			}
			if inSize {
				size.Series = append(size.Series, r.line(row.Policy, t, bs))
			}
			if inLat {
				lat.Series = append(lat.Series, r.line(row.Policy, t, ml))
			}
		}
		if len(rate.Series) == 0 || len(size.Series) == 0 {
			continue
		}
		out = append(out,
			Figure{File: tag + "-rate.svg", Figure: rate},
			Figure{File: tag + "-batch.svg", Figure: size},
			Figure{File: tag + "-latency.svg", Figure: lat})
	}
	return out
}

// points returns the grid points of one preset in load order.
func (r *Report) points(preset string) []*Point {
	var out []*Point
	for i := range r.Grid {
		if r.Grid[i].Preset == preset {
			out = append(out, &r.Grid[i])
		}
	}
	return out
}

func (p *Point) row(policy string) *Row { return findRow(p.Rows, policy) }

func (c *Case) row(policy string) *Row { return findRow(c.Rows, policy) }

func findRow(rows []Row, policy string) *Row {
	for i := range rows {
		if rows[i].Policy == policy {
			return &rows[i]
		}
	}
	return nil
}
