package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"

	pb "github.com/ratebatch/ratebatch/kserve/inference"
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
	grpcListen := fs.String("grpc-listen", "", "address of the KServe v2 gRPC API (Triton's port 8001: liveness, readiness, metadata, ModelInfer); empty: off")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:8002", "address of GET /metrics (Triton's port 8002); empty to disable")
	presetName := fs.String("preset", preset.DefaultPreset, "model profile giving tau(b) and zeta(b) of every model; one of "+fmt.Sprint(preset.Names()))
	scale := fs.Float64("tau-scale", 1, "multiplies every batch execution time; 0 executes instantly (overhead benchmarks)")
	instances := fs.Int("instances", 1, "instances of each model; each runs one batch at a time")
	jitter := fs.Float64("jitter", 0, "relative spread of execution times: tau(b) times a uniform factor in [1-j, 1+j], 0 <= j < 1")
	realism := fs.String("realism", "exact", "roughness of a real server: "+strings.Join(emulator.RealismNames(), ", ")+" (see docs/LEARNING.md); the true line stays at GET /emulator/models/{m}")
	seed := fs.Uint64("seed", 1, "seed of the jitter and the realism")
	idleWatts := fs.Float64("idle-watts", 0, "power drawn when idle, in W, added to zeta(b) per batch (needs a preset with energy figures)")
	powerLimit := fs.Float64("power-limit-watts", 0, "reported as nv_gpu_power_limit when > 0")
	asJSON := fs.Bool("json", false, "print the serving addresses as one JSON object")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *listen == "" {
		fmt.Fprintln(stderr, "ratebatch emulate: --listen must not be empty")
		return errUsage
	}
	p, err := preset.Lookup(*presetName)
	if err != nil {
		fmt.Fprintf(stderr, "ratebatch emulate: --preset: %v\n", err)
		return errUsage
	}
	rough, err := emulator.LookupRealism(*realism)
	if err != nil {
		fmt.Fprintf(stderr, "ratebatch emulate: --realism: %v\n", err)
		return errUsage
	}
	em, err := emulator.New(emulator.Options{
		Profile:         p,
		Realism:         rough,
		TimeScale:       *scale,
		Instances:       *instances,
		Jitter:          *jitter,
		Seed:            *seed,
		IdleWatts:       *idleWatts,
		PowerLimitWatts: *powerLimit,
		Logger:          slog.New(slog.NewTextHandler(stderr, nil)),
	})
	if err != nil {
		fmt.Fprintf(stderr, "ratebatch emulate: %v\n", err)
		return errUsage
	}
	if err := em.Start(*listen, *metricsListen); err != nil {
		return err
	}
	var grpcAddr string
	if *grpcListen != "" {
		ln, err := net.Listen("tcp", *grpcListen)
		if err != nil {
			em.Close()
			return fmt.Errorf("emulator: listen on %q (--grpc-listen): %w", *grpcListen, err)
		}
		grpcAddr = ln.Addr().String()
		srv := grpc.NewServer()
		pb.RegisterGRPCInferenceServiceServer(srv, em.GRPC())
		go srv.Serve(ln) // returns once stopped below
		defer func() {
			// Let answers in flight go out, within the grace the HTTP
			// door has too.
			done := make(chan struct{})
			go func() { srv.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(emulateShutdownGrace):
				srv.Stop()
			}
		}()
	}

	if *asJSON {
		out := struct {
			Listen        string   `json:"listen"`
			MetricsListen string   `json:"metrics_listen"`
			Preset        string   `json:"preset"`
			Models        []string `json:"models"`
			Energy        bool     `json:"energy"`
			Realism       string   `json:"realism"`
			GRPCListen    string   `json:"grpc_listen,omitempty"`
		}{em.Addr(), em.MetricsAddr(), p.Name, em.Models(), p.HasEnergy, *realism, grpcAddr}
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			em.Close()
			return fmt.Errorf("writing the addresses: %w", err)
		}
	} else {
		fmt.Fprintf(stdout, "emulating %s (%s) on http://%s (models %v)\n", p.Name, *realism, em.Addr(), em.Models())
		if grpcAddr != "" {
			fmt.Fprintf(stdout, "gRPC on %s\n", grpcAddr)
		}
		if a := em.MetricsAddr(); a != "" {
			fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", a)
		}
		if !p.HasEnergy {
			fmt.Fprintf(stdout, "preset %s has no published energy figures: no energy or power metrics are exported\n", p.Name)
		}
	}

	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), emulateShutdownGrace)
	defer cancel()
	if err := em.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("stopping the emulator: %w", err)
	}
	return nil
}
