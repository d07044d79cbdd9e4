package whatif

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// The grid: besides the setting in force and ad-hoc, the budget policy at
// mean budgets over ad-hoc (its p99 budget the same factor, and never
// below its default 1.20x), at p99 objectives over ad-hoc's replayed p99
// (no setting's p99 is much below ad-hoc's, and at 1.5x a p99 objective
// already lets batches fill at most loads), and maxbatch at delays over
// the line's time of a full batch.
var (
	gridBudgets   = []float64{1.05, 1.10, 1.25, 1.5, 2}
	gridSLOs      = []float64{1.1, 1.25, 1.5}
	gridMaxDelays = []float64{0.5, 1, 2}
)

// setting is one point of the grid before it is replayed.
type setting struct {
	policy  string
	options map[string]string
	current bool
}

// grid replays the setting in force, ad-hoc and the grid, in that order,
// each on its own policy built as PUT /policy would build it, into
// rep.Points. A setting that cannot be built or replayed keeps its error
// in its point; the context's end stops them all.
func (p *Replayer) grid(ctx context.Context, q Request, s replaySetup, rep *Report, replayed *atomic.Int32) error {
	name, opts, ok := p.models.InForce(q.Model)
	if !ok {
		return fmt.Errorf("model %q: no policy in force", q.Model)
	}
	pc := &pacer{share: p.c.CPU}
	run := func(st setting) (Point, error) {
		defer replayed.Add(1)
		pt := Point{Policy: st.policy, Options: st.options, Current: st.current, Label: label(st.policy, st.options)}
		if st.current {
			pt.Label = "in force: " + pt.Label
		}
		pol, err := p.models.NewPolicy(q.Model, st.policy, st.options, replayTuning)
		if err == nil {
			var got Point
			if got, err = s.replayOne(ctx, pol, pc.pace); err == nil {
				got.Policy, got.Options, got.Current, got.Label = pt.Policy, pt.Options, pt.Current, pt.Label
				return got, nil
			}
		}
		if ctx.Err() != nil {
			return pt, fmt.Errorf("what-if of %s stopped: %w", q.Model, ctx.Err())
		}
		pt.Error = err.Error()
		return pt, nil
	}
	current := setting{policy: name, current: true}
	if name != "" {
		current.options = opts
	}
	for _, st := range []setting{current, {policy: policy.NameAdhoc}} {
		pt, err := run(st)
		if err != nil {
			return err
		}
		rep.Points = append(rep.Points, pt)
	}
	adhoc := rep.Points[1]
	for _, st := range gridSettings(adhoc, s.line) {
		pt, err := run(st)
		if err != nil {
			return err
		}
		rep.Points = append(rep.Points, pt)
	}
	for i := range rep.Points {
		rep.Points[i].VsAdhoc = versus(rep.Points[i], adhoc)
	}
	return nil
}

// replayTuning is what a replayed policy changes of the options in force:
// the budget's learning phase is skipped (BudgetOptions.NoLearn), its trim
// kept. The minutes replayed are a model's traffic the live proxy has been
// serving, not a fresh start: a budget that learnt afresh would run its
// first thousand calls as ad-hoc, a large share of a slow model's window,
// and read as ad-hoc where the setting, once learnt, would hold. Its
// solves are held to their share of the replay's own clock, as the live
// proxy's are to the wall clock's, so that its plans come from the nearest
// solved rate as often as they did live.
func replayTuning(o *policy.Options) {
	policy.Each(o, func(b *policy.BudgetOptions) { b.NoLearn = true })
}

// gridSettings are the grid's points after ad-hoc's replay: the SLOs are
// over its p99, the delays over the line's full batch.
func gridSettings(adhoc Point, line Line) []setting {
	var out []setting
	for _, f := range gridBudgets {
		out = append(out, setting{policy: policy.NameBudget, options: map[string]string{
			"latency_budget": factor(f), "tail_budget": factor(max(f, 1.2))}})
	}
	if adhoc.Error == "" && adhoc.P99Ms > 0 {
		for _, f := range gridSLOs {
			out = append(out, setting{policy: policy.NameBudget, options: map[string]string{"slo_p99": roundMs(f * adhoc.P99Ms)}})
		}
	}
	full := line.AlphaMs*float64(line.MaxBatch) + line.Tau0Ms
	for _, f := range gridMaxDelays {
		out = append(out, setting{policy: policy.NameMaxBatch, options: map[string]string{"max_queue_delay": roundMs(f * full)}})
	}
	return out
}

func factor(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) + "x" }

// roundMs spells a duration of ms milliseconds to two significant
// digits, as a configuration would: 7.5ms, 12ms, 150us.
func roundMs(ms float64) string {
	d := time.Duration(ms * float64(time.Millisecond))
	if d <= 0 {
		return "0s"
	}
	unit := time.Duration(math.Pow(10, math.Floor(math.Log10(float64(d)))-1))
	return (d.Round(max(unit, 1))).String()
}

// versus is pt's figures over ad-hoc's.
func versus(pt, adhoc Point) Ratios {
	if pt.Error != "" || adhoc.Error != "" {
		return Ratios{}
	}
	return Ratios{Mean: ratio(ptr(pt.MeanMs), ptr(adhoc.MeanMs)), P99: ratio(ptr(pt.P99Ms), ptr(adhoc.P99Ms)),
		RequestsPerJoule: ratio(pt.RequestsPerJoule, adhoc.RequestsPerJoule), BusyShare: ratio(ptr(pt.BusyShare), ptr(adhoc.BusyShare))}
}
