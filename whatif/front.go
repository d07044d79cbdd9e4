package whatif

import "fmt"

// Efficiency axes.
const (
	EfficiencyRPJ  = "requests_per_joule"
	EfficiencyIdle = "idle_share"
)

// efficiency is a point's figure on the efficiency axis, more is better.
func efficiency(pt Point, axis string) float64 {
	if axis == EfficiencyRPJ {
		return *pt.RequestsPerJoule
	}
	return 1 - pt.BusyShare
}

// mark finds the efficiency axis, the Pareto front and the
// recommendation: the most efficient point on the front whose p99 is
// within p99Ms (when > 0), or else whose mean and p99 are within the
// setting in force's. It stays one function: its passes read the
// same points in the same order.
func mark(rep *Report, p99Ms float64) {
	rep.Efficiency = EfficiencyRPJ
	for _, pt := range rep.Points {
		if pt.Error == "" && pt.RequestsPerJoule == nil {
			rep.Efficiency = EfficiencyIdle
		}
	}
	ok := func(pt Point) bool { return pt.Error == "" }
	for i, a := range rep.Points {
		if !ok(a) {
			continue
		}
		dominated := false
		for j, b := range rep.Points {
			if i == j || !ok(b) {
				continue
			}
			ea, eb := efficiency(a, rep.Efficiency), efficiency(b, rep.Efficiency)
			if b.MeanMs <= a.MeanMs && b.P99Ms <= a.P99Ms && eb >= ea && (b.MeanMs < a.MeanMs || b.P99Ms < a.P99Ms || eb > ea) {
				dominated = true
				break
			}
		}
		rep.Points[i].Front = !dominated
	}
	var cur *Point
	for i := range rep.Points {
		if rep.Points[i].Current && ok(rep.Points[i]) {
			cur = &rep.Points[i]
		}
	}
	within := func(pt Point) bool {
		if p99Ms > 0 {
			return pt.P99Ms <= p99Ms
		}
		return cur != nil && pt.MeanMs <= cur.MeanMs && pt.P99Ms <= cur.P99Ms
	}
	best := -1
	for i, pt := range rep.Points {
		if !pt.Front || !within(pt) {
			continue
		}
		if best < 0 || efficiency(pt, rep.Efficiency) > efficiency(rep.Points[best], rep.Efficiency) ||
			(efficiency(pt, rep.Efficiency) == efficiency(rep.Points[best], rep.Efficiency) && pt.Current) {
			best = i
		}
	}
	rep.Recommended = best
	what := "its mean and p99 within those of the setting in force"
	if p99Ms > 0 {
		what = fmt.Sprintf("its p99 within %.3g ms", p99Ms)
	}
	switch {
	case best < 0:
		rep.Recommendation = "no setting on the front has " + what
	case rep.Points[best].Current:
		rep.Recommendation = "the setting in force: no other on the front is more efficient with " + what
	default:
		rep.Recommendation = fmt.Sprintf("%s: the most efficient on the front with %s", rep.Points[best].Label, what)
	}
}
