package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/preset"
)

func init() {
	register("emulate", "serve an emulated GPU model server (KServe v2 + Triton metrics)", runEmulate)
}

// emulateShutdownGrace bounds how long in-flight requests may finish once
// the command is told to stop.
const emulateShutdownGrace = 5 * time.Second

func runEmulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("emulate", stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "address of the KServe v2 HTTP API (Triton's port 8000)")
	grpcListen := fs.String("grpc-listen", "", "address of the KServe v2 gRPC API (Triton's port 8001: liveness, readiness, metadata, config, statistics, repository index, ModelInfer); empty: off")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:8002", "address of GET /metrics (Triton's port 8002); empty to disable")
	presetName := fs.String("preset", preset.DefaultPreset, "model profile giving tau(b) and zeta(b) of every model; one of "+fmt.Sprint(preset.Names()))
	realism := fs.String("realism", "exact", "roughness of a real server: "+strings.Join(emulator.RealismNames(), ", ")+" (see docs/LEARNING.md); the true line stays at GET /emulator/models/{m}")
	o := emulator.Options{Logger: slog.New(slog.NewTextHandler(stderr, nil))}
	fs.Float64Var(&o.TimeScale, "tau-scale", 1, "multiplies every batch execution time; 0 executes instantly (overhead benchmarks)")
	fs.IntVar(&o.Instances, "instances", 1, "instances of each model; each runs one batch at a time")
	fs.IntVar(&o.SimpleMaxBatch, "simple-max-batch", emulator.SimpleMaxBatch, "max_batch_size of the simple model (Triton's example has 8): a large B_max without the image model's large rows")
	fs.Float64Var(&o.Jitter, "jitter", 0, "relative spread of execution times: tau(b) times a uniform factor in [1-j, 1+j], 0 <= j < 1")
	fs.Uint64Var(&o.Seed, "seed", 1, "seed of the jitter and the realism")
	fs.Float64Var(&o.IdleWatts, "idle-watts", 0, "power drawn when idle, in W, added to zeta(b) per batch (needs a preset with energy figures)")
	fs.Float64Var(&o.PowerLimitWatts, "power-limit-watts", 0, "reported as nv_gpu_power_limit when > 0")
	asJSON := fs.Bool("json", false, "print the serving addresses as one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var err error
	if *listen == "" {
		return usagef(stderr, "emulate", "--listen must not be empty")
	}
	if o.Profile, err = preset.Lookup(*presetName); err != nil {
		return usagef(stderr, "emulate", "--preset: %v", err)
	}
	if o.Realism, err = emulator.LookupRealism(*realism); err != nil {
		return usagef(stderr, "emulate", "--realism: %v", err)
	}
	em, err := emulator.New(o)
	if err != nil {
		return usagef(stderr, "emulate", "%v", err)
	}
	return em.Serve(ctx, emulator.Addrs{Listen: *listen, Metrics: *metricsListen, GRPC: *grpcListen,
		Realism: *realism, JSON: *asJSON, Grace: emulateShutdownGrace}, stdout)
}
