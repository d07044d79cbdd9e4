package regression

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Report is a fit of samples as `ratebatch fit` shows it: the line, its
// quality, and the samples the robust fit left out, so that a reader can
// find each in the file and see why.
type Report struct {
	Fit     Fit
	Samples []Sample
}

// RejectedSample is a sample the robust fit left out, numbered from 1 in
// the order of the samples.
type RejectedSample struct {
	Sample    int     `json:"sample"`
	Batch     int     `json:"batch_size"`
	LatencyMs float64 `json:"latency_ms"`
}

// Rejected lists the fit's rejected samples.
func (r Report) Rejected() []RejectedSample {
	out := make([]RejectedSample, 0, len(r.Fit.Rejected))
	for _, i := range r.Fit.Rejected {
		out = append(out, RejectedSample{Sample: i + 1, Batch: r.Samples[i].Batch, LatencyMs: r.Samples[i].LatencyMs})
	}
	return out
}

// WriteJSON writes the report as one JSON object: alpha_ms, tau0_ms, r2,
// n, sizes, outliers and rejected.
func (r Report) WriteJSON(w io.Writer) error {
	f := r.Fit
	return json.NewEncoder(w).Encode(struct {
		batchcost.Latency
		R2       float64          `json:"r2"`
		N        int              `json:"n"`
		Sizes    int              `json:"sizes"`
		Outliers int              `json:"outliers"`
		Rejected []RejectedSample `json:"rejected"`
	}{f.Line, f.R2, f.N, f.Sizes, f.Outliers, r.Rejected()})
}

// WriteText prints the report as lines of text.
func (r Report) WriteText(w io.Writer) {
	f := r.Fit
	fmt.Fprintf(w, "tau(b) = %.6g*b + %.6g ms  (alpha %.6g ms, tau0 %.6g ms)\n", f.AlphaMs, f.Tau0Ms, f.AlphaMs, f.Tau0Ms)
	fmt.Fprintf(w, "R^2 %.6f over n %d samples, %d batch sizes, %d outliers rejected\n", f.R2, f.N, f.Sizes, f.Outliers)
	for _, s := range r.Rejected() {
		fmt.Fprintf(w, "rejected: sample %d (batch %d, %.6g ms)\n", s.Sample, s.Batch, s.LatencyMs)
	}
}

// ReadCSVFile reads samples (ReadCSV) from path, or from stdin when path
// is "-".
func ReadCSVFile(path string, stdin io.Reader) ([]Sample, error) {
	if path == "-" {
		s, err := ReadCSV(stdin)
		if err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
		return s, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading the samples: %w", err)
	}
	defer f.Close()
	s, err := ReadCSV(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}
