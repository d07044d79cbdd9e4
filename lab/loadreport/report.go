package loadreport

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/internal/stats"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/plot"
)

// Run is one load run through the proxy: its name (usually the policy),
// every request's record and the proxy's samples.
type Run struct {
	Name    string
	Records []loadgen.Record
	Samples []Sample
}

// Row is one run's line of the summary table. Latencies cover ok requests.
type Row struct {
	Name                     string   `json:"name"`
	Sent                     int64    `json:"sent"`
	OK                       int64    `json:"ok"`
	Errors                   int64    `json:"errors"`
	MeanLatencyMs            float64  `json:"mean_latency_ms"`
	P50LatencyMs             float64  `json:"p50_latency_ms"`
	P99LatencyMs             float64  `json:"p99_latency_ms"`
	MeanBatchSize            *float64 `json:"mean_batch_size"`    // null without samples
	RequestsPerJoule         *float64 `json:"requests_per_joule"` // null without an energy source
	RelativeLatency          *float64 `json:"latency_vs_first"`   // mean latency / the first run's
	RelativeEnergyEfficiency *float64 `json:"rpj_vs_first"`       // requests per joule / the first run's
}

// Summarize computes the table; the first run is the baseline of the ratios.
func Summarize(runs []Run) []Row {
	rows := make([]Row, len(runs))
	for i, r := range runs {
		sum := loadgen.Summarize(r.Records, 0, 0)
		row := Row{Name: r.Name, Sent: sum.Sent, OK: sum.OK, Errors: sum.Errors,
			MeanLatencyMs: sum.MeanLatencyMs, P50LatencyMs: sum.P50LatencyMs, P99LatencyMs: sum.P99LatencyMs}
		if n := len(r.Samples); n > 0 {
			last := r.Samples[n-1]
			if last.BatchesSent > 0 {
				mb := float64(last.RowsSent) / float64(last.BatchesSent)
				row.MeanBatchSize = &mb
			}
			row.RequestsPerJoule = last.TotalRequestsPerJoule
		}
		rows[i] = row
	}
	if len(rows) > 0 {
		base := rows[0]
		for i := range rows {
			if base.MeanLatencyMs > 0 {
				v := rows[i].MeanLatencyMs / base.MeanLatencyMs
				rows[i].RelativeLatency = &v
			}
			if base.RequestsPerJoule != nil && rows[i].RequestsPerJoule != nil && *base.RequestsPerJoule > 0 {
				v := *rows[i].RequestsPerJoule / *base.RequestsPerJoule
				rows[i].RelativeEnergyEfficiency = &v
			}
		}
	}
	return rows
}

// WriteTable writes the summary as a Markdown table (it reads as plain text too).
func WriteTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	b.WriteString("| policy | sent | ok | errors | mean ms | p50 ms | p99 ms | mean batch | req/J | latency vs first | req/J vs first |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.2f | %.2f | %.2f | %s | %s | %s | %s |\n",
			r.Name, r.Sent, r.OK, r.Errors, r.MeanLatencyMs, r.P50LatencyMs, r.P99LatencyMs,
			opt(r.MeanBatchSize, "%.2f"), opt(r.RequestsPerJoule, "%.2f"), opt(r.RelativeLatency, "%.2fx"), opt(r.RelativeEnergyEfficiency, "%.3fx"))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func opt(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

// PerSecond buckets a run's records by the second they were sent in:
// arrivals per second and the p50 latency of the ok ones.
func PerSecond(records []loadgen.Record, bucket time.Duration) (t, arrivals, p50 []float64) {
	if len(records) == 0 {
		return nil, nil, nil
	}
	end := slices.MaxFunc(records, func(a, b loadgen.Record) int { return int(a.Start - b.Start) }).Start
	n := int(end/bucket) + 1
	counts := make([]int, n)
	lats := make([][]time.Duration, n)
	for _, r := range records {
		i := int(r.Start / bucket)
		counts[i]++
		if r.Err == loadgen.KindNone {
			lats[i] = append(lats[i], r.Latency)
		}
	}
	for i := range n {
		t = append(t, (float64(i)+0.5)*bucket.Seconds())
		arrivals = append(arrivals, float64(counts[i])/bucket.Seconds())
		v := math.NaN()
		if len(lats[i]) > 0 {
			slices.Sort(lats[i])
			v = float64(stats.Percentile(lats[i], 50)) / float64(time.Millisecond)
		}
		p50 = append(p50, v)
	}
	return t, arrivals, p50
}

// Figures builds the report's plots: the arrival rate, the chosen batch
// size, p50 latency and requests per joule over time, one line per run.
func Figures(runs []Run) []NamedFigure {
	rate := plot.Figure{Title: "Arrival rate", XLabel: "time (s)", YLabel: "requests/s"}
	batch := plot.Figure{Title: "Mean batch size sent", XLabel: "time (s)", YLabel: "rows per batch"}
	lat := plot.Figure{Title: "Latency (p50 per second)", XLabel: "time (s)", YLabel: "ms, logarithmic scale", LogY: true}
	rpj := plot.Figure{Title: "Energy efficiency (sliding window)", XLabel: "time (s)", YLabel: "requests per joule"}
	for i, r := range runs {
		t, arr, p50 := PerSecond(r.Records, time.Second)
		if i == 0 {
			rate.Series = append(rate.Series, plot.Series{Name: "offered", X: t, Y: arr})
		}
		lat.Series = append(lat.Series, plot.Series{Name: r.Name, X: t, Y: p50})
		var st, sb, sr []float64
		for j, s := range r.Samples {
			st = append(st, s.T)
			// Realised, not the rule's target: adhoc's target is B_max
			// whatever it sends.
			mb := math.NaN()
			if j > 0 {
				if db := s.BatchesSent - r.Samples[j-1].BatchesSent; db > 0 {
					mb = float64(s.RowsSent-r.Samples[j-1].RowsSent) / float64(db)
				}
			}
			sb = append(sb, mb)
			v := math.NaN()
			if s.RequestsPerJoule != nil {
				v = *s.RequestsPerJoule
			}
			sr = append(sr, v)
		}
		batch.Series = append(batch.Series, plot.Series{Name: r.Name, X: st, Y: sb})
		rpj.Series = append(rpj.Series, plot.Series{Name: r.Name, X: st, Y: sr})
	}
	// One x range for all four, so that a moment sits at the same place in
	// each: from 0 to the last second any run has.
	end := 0.0
	window := ""
	for _, f := range []plot.Figure{rate, batch, lat, rpj} {
		for _, s := range f.Series {
			for _, x := range s.X {
				if !math.IsNaN(x) && !math.IsInf(x, 0) {
					end = max(end, x)
				}
			}
		}
	}
	for _, r := range runs {
		for _, s := range r.Samples {
			if s.EnergyWindow != "" {
				window = s.EnergyWindow
			}
		}
	}
	if window != "" {
		rpj.Title = "Energy efficiency (requests per joule over a " + window + " sliding window)"
	}
	figs := []NamedFigure{{"rate", rate}, {"batch_size", batch}, {"latency", lat}, {"requests_per_joule", rpj}}
	for i := range figs {
		if end > 0 {
			figs[i].Figure.XMin, figs[i].Figure.XMax = 0, end
		}
	}
	return figs
}

// NamedFigure is a figure with the file stem it is written under.
type NamedFigure struct {
	Name   string
	Figure plot.Figure
}

// WritePlots writes every figure that has data as dir/<name>.svg and
// returns the paths written. A figure without a finite point (no energy
// source: no requests-per-joule) is skipped, not drawn empty.
func WritePlots(dir string, runs []Run) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	var paths []string
	for _, nf := range Figures(runs) {
		if nf.Figure.Validate() != nil {
			continue
		}
		p := filepath.Join(dir, nf.Name+".svg")
		f, err := os.Create(p)
		if err != nil {
			return paths, fmt.Errorf("report: %w", err)
		}
		err = nf.Figure.WriteSVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, fmt.Errorf("report: %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}
