package demo

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"github.com/ratebatch/ratebatch/lab/sim"
)

// records makes n requests per block over span, the i-th block's latency
// lat(i).
func records(span time.Duration, n int, lat func(block int) time.Duration) []loadgen.Record {
	var out []loadgen.Record
	step := span / time.Duration(blocks*n)
	for i := range blocks * n {
		out = append(out, loadgen.Record{Start: time.Duration(i) * step, Latency: lat(i / n), Status: 200})
	}
	return out
}

// The spread of the mean ratio is measured over the run's blocks: none
// when every block reads the same ratio, wide when the blocks disagree,
// and the interval holds the whole run's ratio either way.
func TestMeasureSpread(t *testing.T) {
	span := 60 * time.Second
	base := records(span, 50, func(int) time.Duration { return time.Millisecond })
	steady := records(span, 50, func(int) time.Duration { return 1100 * time.Microsecond })
	s := measureSpread(base, steady, span)
	if !s.ok || math.Abs(s.lo-1.1) > 1e-9 || math.Abs(s.hi-1.1) > 1e-9 || math.Abs(s.p99lo-1.1) > 1e-9 {
		t.Errorf("a steady 1.1x: %+v, want the interval and the blocks' p99 at 1.1x", s)
	}
	if s.block != 6*time.Second || s.blocks != blocks {
		t.Errorf("blocks of %v (%d), want 10 of 6 s", s.block, s.blocks)
	}
	noisy := records(span, 50, func(i int) time.Duration {
		return time.Duration(1000+200*(i%2)) * time.Microsecond // 1.0x and 1.2x in turn
	})
	s = measureSpread(base, noisy, span)
	if !s.ok || !(s.lo < 1.1 && s.hi > 1.1) || s.hi-s.lo < 0.1 {
		t.Errorf("blocks at 1.0x and 1.2x: interval %.3f to %.3f, want a wide one around 1.1", s.lo, s.hi)
	}
	if math.Abs(s.p99lo-1.0) > 1e-9 || math.Abs(s.p99hi-1.2) > 1e-9 {
		t.Errorf("blocks' p99 ratios %.3f to %.3f, want 1.0 to 1.2", s.p99lo, s.p99hi)
	}
	if s := measureSpread(base, nil, span); s.ok {
		t.Errorf("no records: %+v, want no spread", s)
	}
}

// The default's line says within its budgets, or over one and whether the
// run's noise covers it, and why it can be over.
func TestDefaultLine(t *testing.T) {
	r := regimeResult{regime: "loaded"}
	wide := spread{ok: true, lo: 1.03, hi: 1.21, p99lo: 0.8, p99hi: 1.6, blocks: 10, block: 6 * time.Second, runSpan: time.Minute}
	narrow := wide
	narrow.lo, narrow.hi = 1.15, 1.19
	for _, c := range []struct {
		name string
		v    verdict
		s    spread
		want []string
		not  []string
	}{
		{"within", verdict{lat: 1.08, p99: 1.03, gain: 1.05, hasEnergy: true, hasBase: true}, wide,
			[]string{"mean 1.08x adhoc's (budget 1.10x), p99 1.03x (budget 1.20x), +5.0% requests per joule: within both budgets."},
			[]string{"blocks", "trim"}},
		{"over, within the noise", verdict{lat: 1.12, p99: 1.03, gain: 1.05, hasEnergy: true, hasBase: true}, wide,
			[]string{"over its mean budget.", "Over 10 blocks of 6.0 s the mean ratio reads 1.03x to 1.21x (95%): one 60 s run cannot tell it from 1.10x.",
				"first step after about 45 s"}, []string{"slowest"}},
		{"over, beyond the noise", verdict{lat: 1.17, p99: 1.25, gain: 1.05, hasEnergy: true, hasBase: true}, narrow,
			[]string{"over both budgets.", "1.15x to 1.19x (95%): over the budget beyond this run's noise.",
				"block by block it reads 0.80x to 1.60x adhoc's", "latency-cost.md"}, nil},
	} {
		got := defaultLine(r, c.v, c.s)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", c.name, got, w)
			}
		}
		for _, w := range c.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: %q has %q", c.name, got, w)
			}
		}
	}
}

// A command wraps as it pastes into a shell: each broken line ends in a
// backslash, a flag stays with its value, and the words are the command's.
func TestSayCommand(t *testing.T) {
	cmd := "bin/ratebatch sim --preset googlenet-p4 --bmax 8 --trace paper300 --speedup 5 --trace-scale 2 --seed 7 --policy adhoc,budget --slo-p99 10ms"
	var out bytes.Buffer
	sayCommand(&out, cmd)
	text := strings.TrimRight(out.String(), "\n")
	fitsTheTerminal(t, text)
	lines := strings.Split(text, "\n")
	if len(lines) < 2 {
		t.Fatalf("not wrapped: %q", text)
	}
	for i, l := range lines {
		if i < len(lines)-1 && !strings.HasSuffix(l, " \\") {
			t.Errorf("line %d does not continue: %q", i, l)
		}
		if strings.HasSuffix(strings.TrimSuffix(l, " \\"), "--policy") || strings.HasSuffix(strings.TrimSuffix(l, " \\"), "--slo-p99") {
			t.Errorf("a flag parted from its value: %q", l)
		}
	}
	if got := strings.Join(strings.Fields(strings.ReplaceAll(text, " \\\n", " ")), " "); got != cmd {
		t.Errorf("the command wrapped reads %q, want %q", got, cmd)
	}
}

// The light regime explains a default that saves nothing, maxbatch's gain
// and what an SLO buys, within the terminal's width.
func TestTellLightRegime(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	r := regimeResult{regime: "light", rate: 109, span: time.Minute,
		rows: []loadreport.Row{
			{Name: "adhoc", MeanLatencyMs: 2.0, P50LatencyMs: 1.9, P99LatencyMs: 5, RequestsPerJoule: f(25)},
			{Name: "budget", MeanLatencyMs: 2.0, P50LatencyMs: 1.9, P99LatencyMs: 5, RequestsPerJoule: f(25.1)},
			{Name: "maxbatch", MeanLatencyMs: 7.5, P50LatencyMs: 7.6, P99LatencyMs: 12, RequestsPerJoule: f(30)},
		},
		slo: &sloResult{
			base:    sim.Result{MeanLatencyMs: 1.53, P99LatencyMs: 2.82, RequestsPerJoule: f(25.66)},
			slo:     sim.Result{P99LatencyMs: 9.53, RequestsPerJoule: f(33.95)},
			command: "bin/ratebatch sim --preset googlenet-p4 --bmax 8 --trace paper300 --speedup 5 --policy adhoc,budget --slo-p99 10ms",
		},
	}
	var out bytes.Buffer
	tellRegime(&out, r)
	text := out.String()
	flat := strings.Join(strings.Fields(text), " ")
	for _, want := range []string{
		"The default (budget) in the light regime: mean 1.00x adhoc's",
		"a partner comes every 9.2 ms on average, while its budgets leave about 0.15 ms of adhoc's 1.53-ms mean and 0.56 ms of its 2.82-ms p99",
		"+20.0% requests per joule, for a p50 of 7.6 ms against adhoc's 1.9 ms",
		"--policy-slo-p99 10ms", "+32.3% requests per joule at a p99 of 9.5 ms (adhoc's 2.8 ms)",
		"--policy adhoc,budget --slo-p99 10ms",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("the light regime's story lacks %q:\n%s", want, text)
		}
	}
	fitsTheTerminal(t, text)
	if strings.Contains(text, "busy") {
		t.Errorf("a quiet run called busy:\n%s", text)
	}

	// A client mean far over the simulated GPU's: the machine was busy.
	r.rows[0].MeanLatencyMs, r.rows[1].MeanLatencyMs = 20, 20
	out.Reset()
	tellRegime(&out, r)
	if !strings.Contains(strings.Join(strings.Fields(out.String()), " "), "This machine was busy: adhoc's mean as the client saw it, 20.00 ms, is 13x") {
		t.Errorf("a busy run not called busy:\n%s", out.String())
	}

	// Loaded, the story is the default's line alone.
	r.regime = "loaded"
	out.Reset()
	tellRegime(&out, r)
	if strings.Contains(out.String(), "maxbatch") || strings.Contains(out.String(), "slo") {
		t.Errorf("the loaded regime tells the light one's story:\n%s", out.String())
	}
}
