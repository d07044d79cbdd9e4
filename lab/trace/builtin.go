package trace

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

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
