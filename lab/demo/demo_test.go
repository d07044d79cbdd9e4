package demo

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
)

func TestDemoProgressCells(t *testing.T) {
	rpj := 12.5
	samples := []loadreport.Sample{
		{T: 0, BatchesSent: 10, RowsSent: 80},
		{T: 0.5, BatchesSent: 12, RowsSent: 90},
		{T: 1.0, BatchesSent: 14, RowsSent: 100, RequestsPerJoule: &rpj},
	}
	// 4 batches of 20 rows in the last second: 5 rows a batch, whatever the cap.
	b, p50, r := progressCells(loadgen.Snapshot{OKRPS: 100, P50LatencyMs: 3.25}, samples)
	if b != "5.00" || p50 != "3.25" || r != "12.5" {
		t.Errorf("cells %q %q %q, want 5.00 3.25 12.5", b, p50, r)
	}
	// A second without completions or batches shows -, not 0.00.
	idle := []loadreport.Sample{{T: 0, BatchesSent: 14, RowsSent: 100}, {T: 1, BatchesSent: 14, RowsSent: 100}}
	b, p50, r = progressCells(loadgen.Snapshot{}, idle)
	if b != "-" || p50 != "-" || r != "-" {
		t.Errorf("idle second: %q %q %q, want - - -", b, p50, r)
	}
}

// The verdict compares each policy with ad-hoc wherever it sits in the
// list, sums the default up against its budgets, and says when there is
// nothing to compare.
func TestDemoVerdict(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	light := []loadreport.Row{
		{Name: "budget", MeanLatencyMs: 4.4, P99LatencyMs: 9, RequestsPerJoule: f(25)},
		{Name: "adhoc", MeanLatencyMs: 4, P99LatencyMs: 10, RequestsPerJoule: f(20)},
		{Name: "smdp", MeanLatencyMs: 4, P99LatencyMs: 10},
	}
	var line bytes.Buffer
	writeVerdictLines(&line, light)
	for _, want := range []string{"budget         +25.0% req/J (25.00 vs 20.00), mean 1.10x, p99 0.90x: less energy, slower",
		"smdp           no energy figures; mean 1.00x, p99 1.00x"} {
		if !strings.Contains(line.String(), want) {
			t.Errorf("verdict lines lack %q:\n%s", want, line.String())
		}
	}
	if strings.Contains(line.String(), "adhoc  ") {
		t.Errorf("the baseline got a verdict line:\n%s", line.String())
	}

	dir := t.TempDir()
	var out bytes.Buffer
	if err := writeVerdict(&out, dir, []regimeResult{{regime: "light", rows: light}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| budget | +25.0% | 1.10x (0.90x) |", "| adhoc | 20.00 req/J | 4.00 (10.00) ms |",
		"The default, budget, against adhoc (its budgets: mean 1.10x, p99 1.20x):",
		"  light   +25.0% req/J, mean 1.10x, p99 0.90x: within both budgets"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("closing table lacks %q:\n%s", want, out.String())
		}
	}
	fitsTheTerminal(t, out.String())

	line.Reset()
	writeVerdictLines(&line, light[:1])
	if !strings.Contains(line.String(), "no adhoc run to compare with") {
		t.Errorf("without adhoc: %q", line.String())
	}
}

// fitsTheTerminal fails for every line of text wider than progressWidth.
func fitsTheTerminal(t *testing.T, text string) {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if len(l) > progressWidth {
			t.Errorf("a line of %d columns:\n%s", len(l), l)
		}
	}
}

// The default policies start with the baseline and include budget.
func TestDemoDefaultPolicies(t *testing.T) {
	got := PolicyList("")
	if len(got) == 0 || got[0] != Baseline || !slices.Contains(got, "budget") {
		t.Errorf("default policies %v: want %s first and budget among them", got, Baseline)
	}
	if got := PolicyList("a,b"); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("--policies a,b gave %v", got)
	}
}

// The per-second table fits 100 columns with the default policies (and
// with many more), and every lane's figures appear under its name.
func TestDemoProgressFitsTheTerminal(t *testing.T) {
	for _, names := range [][]string{DefaultPolicies, {"adhoc"}, append(slices.Clone(DefaultPolicies), DefaultPolicies...)} {
		table := newProgressTable(names)
		var out bytes.Buffer
		table.header(&out)
		cells := make([][3]string, len(names))
		for i := range names {
			cells[i] = [3]string{"7.25", "123.45", "1234.5"}
		}
		cells[len(cells)-1] = [3]string{"-", "-", "-"}
		table.row(&out, 42*time.Second, 1234, cells)
		for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
			if len(line) > progressWidth {
				t.Errorf("%d policies: a line of %d columns:\n%s", len(names), len(line), line)
			}
		}
		text := out.String()
		for _, n := range names {
			if !strings.Contains(text, " "+n) {
				t.Errorf("%d policies: no column named %s:\n%s", len(names), n, text)
			}
		}
		if got := strings.Count(text, "123.45"); got != len(names)-1 {
			t.Errorf("%d policies: %d lanes' figures shown, want %d:\n%s", len(names), got, len(names)-1, text)
		}
		if !strings.Contains(text, " 42s ") || !strings.Contains(text, " 1234 ") {
			t.Errorf("%d policies: the time and the offered rate are missing:\n%s", len(names), text)
		}
	}
}
