package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/lab/capacity"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/loadreport"
	"github.com/ratebatch/ratebatch/lab/trace"
)

func init() {
	register("load", "offer open-loop Poisson or trace load to a KServe v2 server and report latencies", runLoad)
}

// loadFlags are load's flags; those that map one to one onto
// loadgen.Config are bound to it directly.
type loadFlags struct {
	c                                       loadgen.Config
	protocol, traceName, onFull             string
	rate, traceScale, speedup               float64
	csvPath, admin, samplesPath, cpuProfile string
	intervalsPath                           string
	progress, asJSON                        bool
	load                                    string // the arrivals, for the summary's first line
	find                                    capacity.Search
	findRequests                            int
}

func bindLoadFlags(fs *flag.FlagSet) *loadFlags {
	f := &loadFlags{}
	fs.StringVar(&f.c.Target, "target", "", "base URL of the KServe v2 server or proxy, e.g. http://127.0.0.1:8000; with --protocol grpc its gRPC host:port, e.g. 127.0.0.1:8001")
	fs.StringVar(&f.protocol, "protocol", "http", "http, or grpc: ModelInfer over KServe v2 gRPC, tensors as raw bytes (as perf_analyzer -i grpc)")
	fs.StringVar(&f.c.Model, "model", "", "model name (inputs are read from GET /v2/models/<model>)")
	fs.StringVar(&f.c.Version, "model-version", "", "model version (default: the server's choice)")
	fs.Float64Var(&f.rate, "rate", 0, "constant Poisson arrival rate in requests/s")
	fs.StringVar(&f.traceName, "trace", "", "arrival rate series: a built-in name ("+strings.Join(trace.Names(), ", ")+
		") or a CSV file (columns time_s,rate_rps)")
	fs.Float64Var(&f.traceScale, "trace-scale", 1, "multiply the trace's rates by this factor (keeps its shape)")
	fs.Float64Var(&f.speedup, "speedup", 1, "play the trace this many times faster, keeping its rates (paper300 with 5 lasts 60 s)")
	fs.DurationVar(&f.c.Duration, "duration", 0, "how long to generate arrivals (required with --rate; default with --trace: the trace's length)")
	fs.Uint64Var(&f.c.Seed, "seed", 1, "seed of the arrival times and the input data")
	fs.IntVar(&f.c.Rows, "rows", 1, "rows (batch dimension) per request")
	fs.BoolVar(&f.c.Binary, "binary", false, "send tensors with Triton's binary extension and ask for binary outputs (default JSON)")
	fs.BoolVar(&f.c.Verify, "verify", false, "check every answer against its own inputs (models: simple, simple_nobatch); mismatches fail the command")
	fs.DurationVar(&f.c.Timeout, "timeout", 10*time.Second, "per-request timeout, connect to last byte")
	fs.IntVar(&f.c.MaxInFlight, "max-inflight", 1024, "most requests out at once (one connection each)")
	fs.StringVar(&f.onFull, "on-full", "drop", "when --max-inflight requests are out: drop (count as dropped_by_client, keep the schedule) or wait (send late; the delay shows as lag)")
	fs.IntVar(&f.c.Payloads, "payloads", 0, "distinct prebuilt request bodies (0: up to 1024 within 64 MiB)")
	fs.StringVar(&f.csvPath, "csv", "", "write every request to this CSV file (start_ms,latency_ms,status,error)")
	fs.StringVar(&f.admin, "admin", "", "the proxy's admin URL (e.g. http://127.0.0.1:9002): sample its /status during the run")
	fs.StringVar(&f.samplesPath, "samples-csv", "", "with --admin: write the samples (rate, batch size, requests per joule over time) here for ratebatch report")
	fs.BoolVar(&f.progress, "progress", false, "print a line of progress per second to stderr")
	fs.BoolVar(&f.asJSON, "json", false, "print the summary as JSON")
	fs.DurationVar(&f.c.Warmup, "warmup", 0, "before the run, offer its starting rate this long on the same connections, unrecorded (a load step's connections then exist when it starts)")
	fs.StringVar(&f.intervalsPath, "write-intervals", "", "send nothing: write the arrivals' gaps in microseconds to this file, for perf_analyzer --request-intervals (needs only --rate and --duration, or --trace)")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile here (go tool pprof)")
	fs.DurationVar(&f.find.Bound, "find-rate-p99", 0, "find the highest Poisson rate whose p99 latency stays under this bound (e.g. 15ms): runs of --duration each from --rate, bracketed then bisected, the answer confirmed; prints the table of tried rates")
	fs.Float64Var(&f.find.Resolution, "find-resolution", 0.05, "with --find-rate-p99: stop bisecting when the bracket's ends are within this fraction")
	fs.IntVar(&f.find.Confirm, "find-confirm", 1, "with --find-rate-p99: runs with other seeds the answer must also pass")
	fs.IntVar(&f.findRequests, "find-requests", capacity.DefaultStepRequests, "with --find-rate-p99: the fewest arrivals a step expects (a step lasts longer than --duration at low rates)")
	return f
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("load", stderr)
	f := bindLoadFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.intervalsPath != "" {
		return f.writeIntervals(flagsSet(fs), stdout, stderr)
	}
	if err := f.config(flagsSet(fs)); err != nil {
		return usagef(stderr, "load", "%v", err)
	}
	if f.find.Bound > 0 {
		f.find.Start, f.find.Seed = float64(f.c.Rate.MaxRate()), f.c.Seed
		_, err := capacity.Find(ctx, f.c, f.find, f.findRequests, stdout)
		return err
	}
	if f.progress {
		f.c.Progress = func(s loadgen.Snapshot) { loadgen.WriteProgress(stderr, s) }
	}
	if f.cpuProfile != "" {
		stop, err := startCPUProfile(f.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	var res loadgen.Result
	var runErr error
	if f.admin != "" {
		res, runErr = loadreport.RunSampled(ctx, f.c, f.admin, f.samplesPath)
	} else {
		res, runErr = loadgen.Run(ctx, f.c)
	}
	if runErr != nil && res.Records == nil {
		return runErr // nothing was sent: a configuration or metadata problem
	}
	if f.csvPath != "" {
		if err := loadreport.WriteFile(f.csvPath, func(w io.Writer) error { return loadgen.WriteCSV(w, res.Records) }); err != nil {
			return fmt.Errorf("--csv: %w", err)
		}
	}
	if f.asJSON {
		if err := res.WriteJSON(stdout, f.c.Warmup > 0); err != nil {
			return err
		}
	} else {
		res.WriteText(stdout, f.c, f.load)
	}
	if runErr != nil {
		return runErr
	}
	return res.Verified()
}

// config checks the flags and completes f.c; an error is a usage error.
func (f *loadFlags) config(set map[string]bool) error {
	if err := loadgen.Command(&f.c, f.protocol, f.onFull, set["duration"]); err != nil {
		return err
	}
	if set["find-rate-p99"] && (f.find.Bound <= 0 || !set["rate"]) {
		return errors.New("--find-rate-p99 needs a bound > 0 and --rate (the first rate tried) with --duration (each step's length)")
	}
	arr := loadgen.Arrivals{Rate: given(set, "rate", &f.rate), Scale: given(set, "trace-scale", &f.traceScale),
		Speedup: given(set, "speedup", &f.speedup), DurationGiven: set["duration"]}
	if set["trace"] {
		arr.Trace = f.traceName
	}
	var err error
	f.load, err = arr.Apply(&f.c)
	return err
}

// writeIntervals writes the schedule of --write-intervals and says what it
// wrote: the arrivals alone, no server needed.
func (f *loadFlags) writeIntervals(set map[string]bool, stdout, stderr io.Writer) error {
	arr := loadgen.Arrivals{Rate: given(set, "rate", &f.rate), Scale: given(set, "trace-scale", &f.traceScale),
		Speedup: given(set, "speedup", &f.speedup), DurationGiven: set["duration"]}
	if set["trace"] {
		arr.Trace = f.traceName
	}
	load, err := arr.Apply(&f.c)
	if err != nil {
		return usagef(stderr, "load", "%v", err)
	}
	var n int
	if err := loadreport.WriteFile(f.intervalsPath, func(w io.Writer) (err error) {
		n, err = loadgen.WriteIntervals(w, f.c.Rate, f.c.Seed, f.c.Duration)
		return err
	}); err != nil {
		return fmt.Errorf("--write-intervals: %w", err)
	}
	fmt.Fprintf(stdout, "%s: %d request intervals over %v (%s, seed %d); use perf_analyzer --request-intervals %s\n",
		f.intervalsPath, n, f.c.Duration, load, f.c.Seed, f.intervalsPath)
	return nil
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
