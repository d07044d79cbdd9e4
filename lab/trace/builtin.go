package trace

import (
	_ "embed"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Built-in bursty traces: open traffic whose rate jumps, for checking that
// a policy keeps its promise when arrivals are not one Poisson rate.
const (
	OnOff = "onoff"
	MMPP  = "mmpp"
)

// Azure2023 is the name of the built-in recorded trace: a public
// production arrival trace (azure2023.txt says whose, and its licence).
const Azure2023 = "azure2023"

// Paper300 is the name of the built-in trace modelled on the adaptive-batching
// paper's workload.
const Paper300 = "paper300"

// builtin holds the named traces with a sentence on how each is shaped.
var builtin = map[string]struct {
	points []Point
	shape  string
}{
	Paper300: {
		points: []Point{
			{0, 1},                   // night
			{20 * time.Second, 1},    //
			{60 * time.Second, 60},   // morning ramp
			{90 * time.Second, 150},  //
			{120 * time.Second, 240}, // midday peak
			{150 * time.Second, 240}, //
			{190 * time.Second, 100}, // afternoon dip
			{215 * time.Second, 180}, // evening rise
			{270 * time.Second, 1},   // evening decline
			{300 * time.Second, 1},   // night lull
		},
		shape: "300 s of one day's load between 1 and 240 req/s: night at 1 req/s until 20 s, " +
			"a morning ramp to 150 req/s at 90 s, the midday peak of 240 req/s from 120 s to 150 s, " +
			"an afternoon dip to 100 req/s at 190 s, an evening rise to 180 req/s at 215 s, " +
			"a decline to 1 req/s at 270 s and a night lull to the end (rates move linearly between these points)",
	},
	Azure2023: {
		points: perSecond(azure2023),
		shape: "a recorded production trace, 57 min of Azure's LLM inference code service (2023-11-16, " +
			"8,819 requests, CC-BY 4.0): arrivals per second, mean 2.57 req/s, up to 67 in a second " +
			"and 2,521 seconds with none; scale and speed it up (--trace-scale 100 --speedup 60: 57 s at 257 req/s on average)",
	},
	OnOff: {
		points: onOff(60*time.Second, 500*time.Millisecond, 1400, 20),
		shape: "60 s of on/off load: 500 ms at 1400 req/s, then 500 ms at 20 req/s, and again " +
			"(about 0.75 of the emulator's simple model's capacity while on; mean 710 req/s)",
	},
	MMPP: {
		points: mmpp(60*time.Second, 1400, 200*time.Millisecond, 200, 400*time.Millisecond, 0x6d6d7070),
		shape: "60 s of a two-state Markov-modulated Poisson load: 1400 req/s for exponential sojourns of " +
			"mean 200 ms, 200 req/s for sojourns of mean 400 ms (one fixed draw; mean about 600 req/s)",
	},
}

//go:embed azure2023.txt
var azure2023 string

// perSecond is a step series from arrivals counted per second, one count
// a line (lines starting with # are comments): each second at its count.
// It panics on a malformed file, which is embedded and tested.
func perSecond(counts string) []Point {
	var ps []Point
	t := time.Duration(0)
	for _, line := range strings.Split(counts, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		n, err := strconv.Atoi(line)
		if err != nil || n < 0 {
			panic(fmt.Sprintf("trace: per-second count %q: want a count >= 0", line))
		}
		r := float64(n)
		if len(ps) > 0 && ps[len(ps)-1].RatePerSec == r {
			ps[len(ps)-1].At = t + time.Second - edge // the same rate goes on
		} else {
			ps = append(ps, Point{t, r}, Point{t + time.Second - edge, r})
		}
		t += time.Second
	}
	return append(ps, Point{t, ps[len(ps)-1].RatePerSec})
}

// edge is how long a built-in trace takes to jump between two rates: a
// series' times increase strictly, so a step is a steep line.
const edge = time.Microsecond

// onOff alternates between rate on for period and rate off for period,
// until d.
func onOff(d, period time.Duration, on, off float64) []Point {
	var ps []Point
	for t, r := time.Duration(0), on; t < d; t += period {
		ps = append(ps, Point{t, r}, Point{t + period - edge, r})
		r = on + off - r
	}
	return append(ps, Point{d, ps[len(ps)-1].RatePerSec})
}

// mmpp is one draw, from seed, of a two-state Markov-modulated rate: hi
// for exponential sojourns of mean hiMean, lo for lo's, until d.
func mmpp(d time.Duration, hi float64, hiMean time.Duration, lo float64, loMean time.Duration, seed uint64) []Point {
	rng := rand.New(rand.NewPCG(seed, seed))
	var ps []Point
	high := true
	for t := time.Duration(0); t < d; high = !high {
		r, mean := lo, loMean
		if high {
			r, mean = hi, hiMean
		}
		stay := max(time.Duration(rng.ExpFloat64()*float64(mean)), 2*edge)
		end := min(t+stay, d)
		ps = append(ps, Point{t, r}, Point{end - edge, r})
		t = end
	}
	return append(ps, Point{d, ps[len(ps)-1].RatePerSec})
}

// Lookup returns the named built-in trace.
func Lookup(name string) (*Series, error) {
	b, ok := builtin[name]
	if !ok {
		return nil, fmt.Errorf("unknown trace %q (built-in: %s)", name, strings.Join(Names(), ", "))
	}
	return New(name, b.points)
}

// Shape describes how the named built-in trace moves, for --help texts.
func Shape(name string) string { return builtin[name].shape }

// Names lists the built-in traces, sorted.
func Names() []string { return slices.Sorted(maps.Keys(builtin)) }
