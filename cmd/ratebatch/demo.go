package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/ratebatch/ratebatch/lab/demo"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
)

func init() {
	register("demo", "the embedded default: emulated GPU + proxy + paper300 load per policy, then a comparison", runDemo)
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	var o demo.Options
	fs.StringVar(&o.Preset, "preset", preset.DefaultPreset, "GPU profile the emulator plays (one with energy figures: "+strings.Join(demo.EnergyPresets(), ", ")+")")
	fs.StringVar(&o.TraceName, "trace", trace.Paper300, "load trace (built-in name or CSV time_s,rate_rps)")
	fs.Float64Var(&o.Speedup, "speedup", 5, "play the trace this many times faster (rates kept): paper300 / 5 = 60 s")
	fs.Float64Var(&o.TraceScale, "trace-scale", 1, "multiply the trace's rates (heavier load)")
	pols := fs.String("policies", "", "comma-separated policies to compare (default: "+strings.Join(demo.DefaultPolicies, ",")+", those built in)")
	fs.StringVar(&o.Out, "out", "out/demo", "directory for the table, CSVs and SVG plots")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the arrivals (every policy sees the same ones)")
	fs.Float64Var(&o.IdleWatts, "idle-watts", 0, "emulated idle power in W (0: none, as in the published profiles)")
	fs.BoolVar(&o.Binary, "binary", true, "send tensors in Triton's binary form")
	fs.StringVar(&o.Model, "model", emulator.SimpleModel, "emulated model to load: "+emulator.SimpleModel+" (INT32 [16] add/sub, answers verified) or "+emulator.ImageModel+" (FP32 [3,224,224], 600 KB a request)")
	regimes := fs.String("regimes", "light,loaded", "comma list: light (the trace as it is; paper300 barely loads the GPU) and loaded (the GPU slowed so the trace's peak reaches rho 0.8)")
	realism := fs.String("realism", "exact", "roughness of the emulated server: "+strings.Join(emulator.RealismNames(), ", ")+" (see docs/LEARNING.md)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ratebatch demo [flags]   (also: ratebatch with no command)")
		fmt.Fprintln(fs.Output(), "\nFor each policy, starts an emulated GPU (the preset's tau(b) and zeta(b)) and")
		fmt.Fprintln(fs.Output(), "a ratebatch proxy in front of it, then plays the same trace through every")
		fmt.Fprintln(fs.Output(), "proxy at once, showing rate, batch size, latency and requests per joule as it")
		fmt.Fprintln(fs.Output(), "goes. Ends with a comparison table and SVG plots. No GPU needed.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if o.Realism, err = emulator.LookupRealism(*realism); err != nil {
		fmt.Fprintf(stderr, "ratebatch demo: --realism: %v\n", err)
		return errUsage
	}
	if o.Regimes, err = demo.ParseRegimes(*regimes); err != nil {
		fmt.Fprintf(stderr, "ratebatch demo: --regimes: %v\n", err)
		return errUsage
	}
	o.Policies = demo.PolicyList(*pols)
	return demo.Run(ctx, o, stdout)
}
