package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"github.com/ratebatch/ratebatch/lab/trace"
)

func init() {
	register("load", "offer open-loop Poisson or trace load to a KServe v2 server and report latencies", runLoad)
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("load", stderr)
	target := fs.String("target", "", "base URL of the KServe v2 server or proxy, e.g. http://127.0.0.1:8000; with --protocol grpc its gRPC host:port, e.g. 127.0.0.1:8001")
	protocol := fs.String("protocol", "http", "http, or grpc: ModelInfer over KServe v2 gRPC, tensors as raw bytes (as perf_analyzer -i grpc)")
	model := fs.String("model", "", "model name (inputs are read from GET /v2/models/<model>)")
	version := fs.String("model-version", "", "model version (default: the server's choice)")
	rate := fs.Float64("rate", 0, "constant Poisson arrival rate in requests/s")
	traceName := fs.String("trace", "", "arrival rate series: a built-in name ("+strings.Join(trace.Names(), ", ")+
		") or a CSV file (columns time_s,rate_rps)")
	traceScale := fs.Float64("trace-scale", 1, "multiply the trace's rates by this factor (keeps its shape)")
	speedup := fs.Float64("speedup", 1, "play the trace this many times faster, keeping its rates (paper300 with 5 lasts 60 s)")
	duration := fs.Duration("duration", 0, "how long to generate arrivals (required with --rate; default with --trace: the trace's length)")
	seed := fs.Uint64("seed", 1, "seed of the arrival times and the input data")
	rows := fs.Int("rows", 1, "rows (batch dimension) per request")
	binaryForm := fs.Bool("binary", false, "send tensors with Triton's binary extension and ask for binary outputs (default JSON)")
	verify := fs.Bool("verify", false, "check every answer against its own inputs (models: simple, simple_nobatch); mismatches fail the command")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout, connect to last byte")
	maxInFlight := fs.Int("max-inflight", 1024, "most requests out at once (one connection each)")
	onFull := fs.String("on-full", "drop", "when --max-inflight requests are out: drop (count as dropped_by_client, keep the schedule) or wait (send late; the delay shows as lag)")
	payloads := fs.Int("payloads", 0, "distinct prebuilt request bodies (0: up to 1024 within 64 MiB)")
	csvPath := fs.String("csv", "", "write every request to this CSV file (start_ms,latency_ms,status,error)")
	admin := fs.String("admin", "", "the proxy's admin URL (e.g. http://127.0.0.1:9002): sample its /status during the run")
	samplesPath := fs.String("samples-csv", "", "with --admin: write the samples (rate, batch size, requests per joule over time) here for ratebatch report")
	progress := fs.Bool("progress", false, "print a line of progress per second to stderr")
	asJSON := fs.Bool("json", false, "print the summary as JSON")
	warmup := fs.Duration("warmup", 0, "before the run, offer its starting rate this long on the same connections, unrecorded (a load step's connections then exist when it starts)")
	cpuProfile := fs.String("cpuprofile", "", "write the load generator's own CPU profile here (go tool pprof)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	usageErr := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "ratebatch load: "+format+"\n", a...)
		return errUsage
	}

	set := flagsSet(fs)
	cfg := loadgen.Config{
		Target:      *target,
		Model:       *model,
		Version:     *version,
		Duration:    *duration,
		Seed:        *seed,
		Rows:        *rows,
		Binary:      *binaryForm,
		GRPC:        *protocol == "grpc",
		Verify:      *verify,
		Timeout:     *timeout,
		MaxInFlight: *maxInFlight,
		Payloads:    *payloads,
		Warmup:      *warmup,
	}
	switch {
	case *target == "":
		return usageErr("give the server: --target URL")
	case *model == "":
		return usageErr("give the model: --model NAME")
	case *protocol != "http" && *protocol != "grpc":
		return usageErr("--protocol must be http or grpc, got %q", *protocol)
	case *protocol == "grpc" && *binaryForm:
		return usageErr("--binary is an HTTP form; gRPC always sends tensors as raw bytes")
	case *rows < 1:
		return usageErr("--rows must be >= 1, got %d", *rows)
	case *timeout <= 0:
		return usageErr("--timeout must be > 0, got %v", *timeout)
	case *maxInFlight < 1:
		return usageErr("--max-inflight must be >= 1, got %d", *maxInFlight)
	case *payloads < 0:
		return usageErr("--payloads must be >= 0, got %d", *payloads)
	case *warmup < 0:
		return usageErr("--warmup must be >= 0, got %v", *warmup)
	case set["duration"] && *duration <= 0:
		return usageErr("--duration must be > 0, got %v", *duration)
	}
	switch *onFull {
	case "drop":
		cfg.OnFull = loadgen.DropWhenFull
	case "wait":
		cfg.OnFull = loadgen.WaitWhenFull
	default:
		return usageErr("--on-full must be drop or wait, got %q", *onFull)
	}
	if !set["trace"] && countSet(set, "trace-scale", "speedup") > 0 {
		return usageErr("--trace-scale and --speedup need --trace")
	}
	var load string
	switch n := countSet(set, "rate", "trace"); {
	case n == 0:
		return usageErr("give the arrivals: --rate RPS or --trace NAME")
	case n > 1:
		return usageErr("give only one of --rate and --trace")
	case set["rate"]:
		if !(*rate > 0) || *rate > 1e7 {
			return usageErr("--rate must be > 0 and at most 1e7 requests/s, got %v", *rate)
		}
		if !set["duration"] {
			return usageErr("give --duration with --rate, e.g. --duration 30s")
		}
		cfg.Rate = loadgen.ConstantRate(*rate)
		load = fmt.Sprintf("Poisson %g req/s", *rate)
	default:
		tr, err := loadTrace(*traceName)
		if err != nil {
			return usageErr("--trace: %v", err)
		}
		if tr, err = tr.Scale(*traceScale); err != nil {
			return usageErr("--trace-scale: %v", err)
		}
		if tr, err = tr.Compress(*speedup); err != nil {
			return usageErr("--speedup: %v", err)
		}
		if tr.MaxRate() <= 0 {
			return usageErr("--trace %s has no arrivals (its rate is 0 throughout)", *traceName)
		}
		if !set["duration"] {
			cfg.Duration = tr.Duration()
		}
		cfg.Rate = tr
		load = fmt.Sprintf("trace %s (mean %.1f req/s, peak %.6g req/s)", tr.Name(), tr.MeanRate(), tr.MaxRate())
	}
	if *progress {
		cfg.Progress = func(s loadgen.Snapshot) { printLoadProgress(stderr, s) }
	}

	var sampler *loadreport.Sampler
	stopSampling := func() {}
	if *admin != "" {
		sampler = loadreport.NewSampler(*admin, *model)
		if _, err := sampler.Poll(ctx); err != nil {
			return fmt.Errorf("--admin: %w", err)
		}
		sctx, cancel := context.WithCancel(ctx)
		stopSampling = cancel
		go sampler.Run(sctx, 500*time.Millisecond)
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	res, runErr := loadgen.Run(ctx, cfg)
	stopSampling()
	if runErr != nil && res.Records == nil {
		return runErr // nothing was sent: a configuration or metadata problem
	}
	if sampler != nil && *samplesPath != "" {
		sampler.Poll(context.Background()) // the final figures
		if err := writeFile(*samplesPath, func(w io.Writer) error { return loadreport.WriteSamplesCSV(w, sampler.Samples()) }); err != nil {
			return err
		}
	}
	if *csvPath != "" {
		if err := writeLoadCSV(*csvPath, res.Records); err != nil {
			return err
		}
	}
	if *asJSON {
		out := struct {
			loadgen.Summary
			FirstVerifyError string `json:"first_verify_error,omitempty"`
			// Warmup accounts for --warmup's requests, which the rest leaves out.
			Warmup *loadgen.Summary `json:"warmup,omitempty"`
		}{Summary: res.Summary, FirstVerifyError: res.FirstVerifyError}
		if *warmup > 0 {
			out.Warmup = &res.Warmup
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return fmt.Errorf("writing JSON: %w", err)
		}
	} else {
		form := "JSON"
		switch {
		case *protocol == "grpc":
			form = "gRPC"
		case *binaryForm:
			form = "binary"
		}
		fmt.Fprintf(stdout, "load: %s for %v against %s, model %s (%s, %d row(s)/request, %d distinct bodies, seed %d)\n",
			load, cfg.Duration, *target, *model, form, *rows, res.Payloads, *seed)
		printLoadSummary(stdout, res.Summary)
	}
	if runErr != nil {
		return runErr
	}
	if bad := res.Summary.ErrorsByKind["mismatch"] + res.Summary.ErrorsByKind["decode"]; *verify && bad > 0 {
		return fmt.Errorf("%d answers failed verification; the first: %s", bad, res.FirstVerifyError)
	}
	return nil
}

func writeLoadCSV(path string, recs []loadgen.Record) error {
	if err := writeFile(path, func(w io.Writer) error { return loadgen.WriteCSV(w, recs) }); err != nil {
		return fmt.Errorf("--csv: %w", err)
	}
	return nil
}

func printLoadSummary(w io.Writer, s loadgen.Summary) {
	fmt.Fprintf(w, "scheduled %d, sent %d, dropped_by_client %d; ok %d, errors %d%s\n",
		s.Scheduled, s.Sent, s.Dropped, s.OK, s.Errors, countsText(s.ErrorsByKind))
	statuses := make(map[string]int64, len(s.StatusCounts))
	for code, n := range s.StatusCounts {
		statuses[fmt.Sprint(code)] = n
	}
	if len(statuses) > 0 {
		fmt.Fprintf(w, "HTTP status%s\n", countsText(statuses))
	}
	fmt.Fprintf(w, "offered %.1f req/s over %.1f s; throughput %.1f ok/s over %.1f s\n",
		s.OfferedRPS, s.DurationS, s.ThroughputRPS, s.ElapsedS)
	fmt.Fprintf(w, "latency ms (ok answers): mean %.3f, p50 %.3f, p90 %.3f, p99 %.3f, p99.9 %.3f, max %.3f\n",
		s.MeanLatencyMs, s.P50LatencyMs, s.P90LatencyMs, s.P99LatencyMs, s.P999LatencyMs, s.MaxLatencyMs)
	fmt.Fprintf(w, "client send lag ms: p99 %.3f, max %.3f\n", s.LagP99Ms, s.LagMaxMs)
}

// countsText renders counts as " (a 3, b 1)", largest first; "" when empty.
func countsText(counts map[string]int64) string {
	if len(counts) == 0 {
		return ""
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

func printLoadProgress(w io.Writer, s loadgen.Snapshot) {
	fmt.Fprintf(w, "%6.1fs target %7.1f/s sent %7.1f/s ok %7.1f/s p50 %7.3f ms p99 %7.3f ms in flight %d dropped %d errors %d\n",
		s.Elapsed.Seconds(), s.TargetRPS, s.SentRPS, s.OKRPS, s.P50LatencyMs, s.P99LatencyMs, s.InFlight, s.Dropped, s.Errors)
}

// startCPUProfile profiles this process until stop is called.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
