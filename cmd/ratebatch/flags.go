package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
)

// Flag helpers the subcommands share.

// usagef prints "ratebatch NAME: message" and returns errUsage (exit 2).
func usagef(stderr io.Writer, name, format string, a ...any) error {
	fmt.Fprintf(stderr, "ratebatch "+name+": "+format+"\n", a...)
	return errUsage
}

// profileFlags are the model flags shared by commands that need tau(b) and
// zeta(b): a preset, or its fields given one by one.
type profileFlags struct {
	preset                   *string
	alpha, tau0, beta, zeta0 *float64
	bmax                     *int
}

// addProfileFlags registers --preset, --alpha, --tau0, --beta, --zeta0 and
// --bmax on fs.
func addProfileFlags(fs *flag.FlagSet) *profileFlags {
	return &profileFlags{
		preset: fs.String("preset", preset.DefaultPreset, "model profile; one of "+strings.Join(preset.Names(), ", ")+
			". --alpha etc. override its fields; without --preset, --alpha and --tau0 give a custom model"),
		alpha: fs.Float64("alpha", 0, "batch latency slope alpha in ms per request: tau(b) = alpha*b + tau0"),
		tau0:  fs.Float64("tau0", 0, "batch latency intercept tau0 in ms"),
		beta:  fs.Float64("beta", 0, "batch energy slope beta in mJ per request: zeta(b) = beta*b + zeta0"),
		zeta0: fs.Float64("zeta0", 0, "batch energy intercept zeta0 in mJ"),
		bmax:  fs.Int("bmax", 0, "max batch size B_max (custom model default 32)"),
	}
}

// profile returns the profile the flags set on fs name (preset.Overrides).
func (m *profileFlags) profile(fs *flag.FlagSet) (preset.Profile, error) {
	set := flagsSet(fs)
	given := func(name string, v *float64) *float64 {
		if set[name] {
			return v
		}
		return nil
	}
	o := preset.Overrides{Preset: *m.preset, PresetGiven: set["preset"],
		Alpha: given("alpha", m.alpha), Tau0: given("tau0", m.tau0), Beta: given("beta", m.beta), Zeta0: given("zeta0", m.zeta0)}
	if set["bmax"] {
		o.MaxBatch = m.bmax
	}
	return o.Profile()
}

func flagsSet(fs *flag.FlagSet) map[string]bool {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	return set
}

func countSet(set map[string]bool, names ...string) int {
	n := 0
	for _, name := range names {
		if set[name] {
			n++
		}
	}
	return n
}

// msDuration converts milliseconds to a duration.
func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// loadTrace is trace.Load: a built-in name or a CSV file.
func loadTrace(name string) (*trace.Series, error) { return trace.Load(name) }

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, part := range splitList(s) {
		v, err := strconv.ParseFloat(part, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", part)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no value in %q", s)
	}
	return out, nil
}

func joinFloats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// errorf is fmt.Errorf, for messages that wrap nothing.
func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }
