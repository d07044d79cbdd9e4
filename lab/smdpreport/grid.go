package smdpreport

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
)

// DefaultGrid is the loads Grid compares at when none is given: light to
// near saturation.
var DefaultGrid = []float64{0.1, 0.3, 0.5, 0.7, 0.9}

// Grid is one comparison per load: o at each load rho (o.Model's rate is
// replaced), the Compare policies (and Evaluate's) priced against each
// optimum.
type Grid struct {
	o    Options
	jobs []*Job
}

// NewGrid checks o at every load, as New does; its errors are the caller's
// input errors.
func NewGrid(o Options, rhos []float64) (*Grid, error) {
	o.Compare = true
	g := &Grid{o: o}
	for _, rho := range rhos {
		if !(rho > 0 && rho < 1) {
			return nil, fmt.Errorf("every load of the grid must be in (0, 1), got %v", rho)
		}
		oi := o
		oi.Model.LambdaPerMs = rho * o.Model.MuPerMs(o.Model.MaxBatch)
		j, err := New(oi)
		if err != nil {
			return nil, err
		}
		g.jobs = append(g.jobs, j)
	}
	return g, nil
}

// Run solves every load and prints one table, a block of rows per load,
// or a JSON array of Reports.
func (g *Grid) Run(ctx context.Context, stdout, stderr io.Writer, asJSON bool) error {
	o, jobs := g.o, g.jobs
	var reps []Report
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	if !asJSON {
		writeModel(stdout, o.Profile, o.Model)
		fmt.Fprintf(stdout, "objective %g*latency_ms + %g*power_W; smax %d; each load's optimum against the policies\n\n", o.Solve.W1, o.Solve.W2, o.Solve.SMax)
		fmt.Fprintln(tw, "rho\tpolicy\tg\tgap %\tlatency ms\tpower W\treq/J\tmean batch\tlimit\tdelta\t")
	}
	for _, j := range jobs {
		sol, rows, err := j.Solve(ctx)
		if err != nil {
			return err
		}
		j.warn(stderr, sol)
		reps = append(reps, j.report(sol, rows))
		for _, r := range rows {
			fmt.Fprintf(tw, "%.4g\t%s\t%.6g\t%.2f\t%.4g\t%s\t%s\t%.3g\t%d\t%.2g\t\n", j.o.Model.Rho(), r.Name, r.G, r.GapPct, r.LatencyMs,
				optFloat(r.PowerW, "%.4g"), optFloat(r.RequestsPerJoule, "%.4g"), r.MeanBatch, r.ControlLimit, r.Delta)
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(reps)
	}
	return tw.Flush()
}
