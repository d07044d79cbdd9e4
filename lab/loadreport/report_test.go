package loadreport

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/loadgen"
)

func f(v float64) *float64 { return &v }

func recs(latencies ...time.Duration) []loadgen.Record {
	out := make([]loadgen.Record, len(latencies))
	for i, l := range latencies {
		out[i] = loadgen.Record{Start: time.Duration(i) * 300 * time.Millisecond, Latency: l, Status: 200}
	}
	return out
}

func TestSummarizeRatios(t *testing.T) {
	ms := time.Millisecond
	runs := []Run{
		{Name: "base", Records: recs(2*ms, 2*ms, 2*ms), Samples: []Sample{{BatchesSent: 2, RowsSent: 3, TotalRequestsPerJoule: f(10)}}},
		{Name: "slow", Records: recs(4*ms, 4*ms, 4*ms), Samples: []Sample{{BatchesSent: 1, RowsSent: 3, TotalRequestsPerJoule: f(12)}}},
		{Name: "nosamples", Records: append(recs(1*ms), loadgen.Record{Status: 503, Err: loadgen.KindStatus})},
	}
	rows := Summarize(runs)
	if rows[0].MeanLatencyMs != 2 || *rows[0].MeanBatchSize != 1.5 || *rows[0].RelativeLatency != 1 {
		t.Fatalf("base row %+v", rows[0])
	}
	if *rows[1].RelativeLatency != 2 || math.Abs(*rows[1].RelativeEnergyEfficiency-1.2) > 1e-12 || *rows[1].MeanBatchSize != 3 {
		t.Fatalf("slow row %+v", rows[1])
	}
	if r := rows[2]; r.OK != 1 || r.Errors != 1 || r.RequestsPerJoule != nil || r.MeanBatchSize != nil || r.RelativeEnergyEfficiency != nil {
		t.Fatalf("a run without samples must have no energy or batch figures: %+v", r)
	}
	var b strings.Builder
	if err := WriteTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "| nosamples | 2 | 1 | 1 |") || !strings.Contains(b.String(), "| - | - |") {
		t.Fatalf("table:\n%s", b.String())
	}
}

func TestPerSecond(t *testing.T) {
	r := []loadgen.Record{
		{Start: 100 * time.Millisecond, Latency: 3 * time.Millisecond},
		{Start: 200 * time.Millisecond, Latency: 1 * time.Millisecond},
		{Start: 900 * time.Millisecond, Latency: 2 * time.Millisecond},
		{Start: 2500 * time.Millisecond, Latency: 9 * time.Millisecond, Err: loadgen.KindTimeout},
	}
	ts, arr, p50 := PerSecond(r, time.Second)
	if len(ts) != 3 || arr[0] != 3 || arr[1] != 0 || arr[2] != 1 {
		t.Fatalf("t %v arrivals %v", ts, arr)
	}
	if p50[0] != 2 || !math.IsNaN(p50[1]) || !math.IsNaN(p50[2]) {
		t.Fatalf("p50 %v: want 2 ms, then no ok answers (NaN, a gap in the plot)", p50)
	}
}

func TestSamplesCSVRoundTrip(t *testing.T) {
	in := []Sample{
		{T: 0.5, RatePerSec: 120, BatchSize: 2, QueueRows: 3, BatchesSent: 10, RowsSent: 17, RequestsPerJoule: f(28.5), TotalRequestsPerJoule: f(27), PowerW: f(61.25)},
		{T: 1, BatchSize: 1},
	}
	var b bytes.Buffer
	if err := WriteSamplesCSV(&b, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadSamplesCSV(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 2 || *out[0].PowerW != 61.25 || out[0].RowsSent != 17 || out[1].RequestsPerJoule != nil {
		t.Fatalf("round trip %+v", out)
	}
	for _, bad := range []string{"", "t_s\n1\n", SamplesHeader + "\nx,1,1,1,1,1,,,\n"} {
		if _, err := ReadSamplesCSV(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadSamplesCSV(%q) accepted", bad)
		}
	}
}

func TestSampleOfPrefersTheModelsEnergyShare(t *testing.T) {
	st := &status{}
	st.Models = append(st.Models, struct {
		Model string `json:"model"`
		Rule  *struct {
			BatchSize  int     `json:"batch_size"`
			RatePerSec float64 `json:"rate_rps"`
		} `json:"rule"`
	}{Model: "m", Rule: &struct {
		BatchSize  int     `json:"batch_size"`
		RatePerSec float64 `json:"rate_rps"`
	}{BatchSize: 4, RatePerSec: 90}})
	s := sampleOf(st, "m", 2)
	if s.BatchSize != 4 || s.RatePerSec != 90 || s.RequestsPerJoule != nil {
		t.Fatalf("sample %+v: no energy section must leave energy unknown", s)
	}
}

// TestFiguresShareTheTimeAxis: every figure spans the same seconds, and the
// energy figure names its window.
func TestFiguresShareTheTimeAxis(t *testing.T) {
	rpj := 3.0
	var recs []loadgen.Record
	for i := range 60 {
		recs = append(recs, loadgen.Record{Start: time.Duration(i) * time.Second, Latency: time.Millisecond, Status: 200})
	}
	runs := []Run{{Name: "a", Records: recs, Samples: []Sample{
		{T: 0, RequestsPerJoule: &rpj, EnergyWindow: "10s"}, {T: 80, BatchesSent: 1, RowsSent: 1, RequestsPerJoule: &rpj, EnergyWindow: "10s"}}}}
	for _, nf := range Figures(runs) {
		if nf.Figure.XMin != 0 || nf.Figure.XMax != 80 {
			t.Errorf("%s: x axis %v..%v, want 0..80 like the others", nf.Name, nf.Figure.XMin, nf.Figure.XMax)
		}
		if nf.Name == "requests_per_joule" && !strings.Contains(nf.Figure.Title, "10s sliding window") {
			t.Errorf("energy title %q does not state its window", nf.Figure.Title)
		}
	}
}
