// Command fleetrun runs ratebatch's load reports against real balancers on
// this machine, with emulated GPUs (docs/SCALING.md):
//
//	go build -o /tmp/ratebatch ./cmd/ratebatch
//	go run ./lab/fleetrun -bin /tmp/ratebatch -run rho
//	go run ./lab/fleetrun -bin /tmp/ratebatch -run fleet
//	go run ./lab/fleetrun -bin /tmp/ratebatch -run haproxy
//	go run ./lab/fleetrun -bin /tmp/ratebatch -run pack -load 0.15
//
// -run rho starts one emulated GPU with a ratebatch in front, sends Poisson
// load over HTTP at rho 0.2, 0.5 and 0.8 of the emulator's true capacity
// mu(B_max), and compares the application_utilization of the
// endpoint-load-metrics header with the true rho.
//
// -run fleet starts three emulated GPUs, the third at half speed, a
// ratebatch (with its gRPC door) in front of each, and sends Poisson load
// at a share of the fleet's capacity from a grpc-go client whose balancer
// is round_robin or weighted_round_robin (fed by the proxies' ORCA
// trailers), alternating, repeated: each replica's share of the traffic,
// the fleet's mean and p99 latency and requests per joule (the emulators'
// energy counters, idle power included).
//
// -run haproxy is the same fleet over HTTP through a real HAProxy (the
// haproxy binary on PATH, run in the foreground on loopback ports with a
// config in a temporary directory): balance roundrobin with equal
// weights, roundrobin with each server's weight from ratebatch's agent
// check (--haproxy-agent-listen), and leastconn.
//
// -run pack starts four full-speed emulated GPUs and sends a low load
// (-load, e.g. 0.15 of the fleet's capacity) over HTTP spread evenly over
// the four, packed onto two, and packed onto one: requests per joule of
// the fleet with the idle GPUs' power counted and with it left out (the
// idle GPUs scaled away), mean and p99 latency. -idle-watts is then the
// real GPU's idle power: the emulators draw it divided by -tau-scale,
// because the emulator slows batches without scaling their energy, so
// this keeps idle energy against batch energy as on the real GPU.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	v3 "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratebatch/ratebatch/internal/stats"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleetrun:", err)
		os.Exit(1)
	}
}

type options struct {
	bin, mode, preset, policy string
	tauScale, idleWatts, load float64
	duration, warmup          time.Duration
	repeats                   int
	seed                      uint64
}

func run() error {
	var o options
	fs := flag.NewFlagSet("fleetrun", flag.ContinueOnError)
	fs.StringVar(&o.bin, "bin", "", "ratebatch binary (go build -o /tmp/ratebatch ./cmd/ratebatch); required")
	fs.StringVar(&o.mode, "run", "fleet", "experiment: rho (utilization against the true rho), fleet (gRPC round_robin against weighted_round_robin), haproxy (HTTP through HAProxy, with and without agent-check weights) or pack (spread against packed at low load)")
	fs.StringVar(&o.preset, "preset", "googlenet-p4", "emulator preset")
	fs.StringVar(&o.policy, "policy", "batchmonitor+", "ratebatch's batching policy")
	fs.Float64Var(&o.tauScale, "tau-scale", 20, "tau-scale of the full-speed emulators (the half-speed one gets twice it): slows the GPU so the load fits the machine")
	fs.Float64Var(&o.idleWatts, "idle-watts", 20, "idle power of each emulated GPU")
	fs.Float64Var(&o.load, "load", 0.7, "fleet: offered load as a share of the fleet's capacity")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "length of each measured run")
	fs.DurationVar(&o.warmup, "warmup", 8*time.Second, "load before each measured run, left out of its figures (the proxies learn, the balancer weighs)")
	fs.IntVar(&o.repeats, "repeats", 2, "fleet: runs of each balancer, alternating")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the arrivals")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if o.bin == "" {
		return errors.New("-bin is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch o.mode {
	case "rho":
		return runRho(ctx, o)
	case "fleet":
		return runFleet(ctx, o)
	case "haproxy":
		return runHAProxy(ctx, o)
	case "pack":
		return runPack(ctx, o)
	}
	return fmt.Errorf("-run %q: want rho, fleet, haproxy or pack", o.mode)
}

// replica is one emulated GPU with a ratebatch in front.
type replica struct {
	emu             emuAddrs
	http, grpc, adm string
	agent           string  // HAProxy agent-check address (-run haproxy)
	mu              float64 // true capacity of model simple, rows/s
	procs           []*exec.Cmd
}

type emuAddrs struct {
	Listen        string `json:"listen"`
	MetricsListen string `json:"metrics_listen"`
	GRPCListen    string `json:"grpc_listen"`
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs one emulator at tauScale and a ratebatch in front of it.
func start(ctx context.Context, o options, tauScale float64) (*replica, error) {
	r := &replica{}
	emu := exec.CommandContext(ctx, o.bin, "emulate", "-json", "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0",
		"-grpc-listen", "127.0.0.1:0", "-preset", o.preset, "-tau-scale", strconv.FormatFloat(tauScale, 'g', -1, 64),
		"-idle-watts", strconv.FormatFloat(emulatorIdleWatts(o), 'g', -1, 64))
	emu.Stderr = os.Stderr
	out, err := emu.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := emu.Start(); err != nil {
		return nil, err
	}
	r.procs = append(r.procs, emu)
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("emulator: %w", err)
	}
	if err := json.Unmarshal(line, &r.emu); err != nil {
		r.stop()
		return nil, fmt.Errorf("emulator addresses %q: %w", line, err)
	}
	for _, p := range []*string{&r.http, &r.grpc, &r.adm, &r.agent} {
		if *p, err = freePort(); err != nil {
			r.stop()
			return nil, err
		}
	}
	if err := r.trueCapacity(); err != nil {
		r.stop()
		return nil, err
	}
	args := []string{"serve", "--upstream", "http://" + r.emu.Listen, "--upstream-grpc", r.emu.GRPCListen,
		"--listen", r.http, "--grpc-listen", r.grpc, "--admin-listen", r.adm, "--policy", o.policy,
		"--power-source", "triton", "--power-metrics-url", "http://" + r.emu.MetricsListen + "/metrics", "--log-level", "warn"}
	if o.mode == "haproxy" {
		// 100% is a full-speed replica's capacity, what an operator
		// knows of the fleet's fastest GPU profile.
		full := r.mu * tauScale / o.tauScale
		args = append(args, "--haproxy-agent-listen", r.agent, "--haproxy-agent-full-rps", strconv.FormatFloat(full, 'g', 6, 64))
	}
	srv := exec.CommandContext(ctx, o.bin, args...)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		r.stop()
		return nil, err
	}
	r.procs = append(r.procs, srv)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get("http://" + r.adm + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("ratebatch at %s not ready after 20 s", r.http)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *replica) stop() {
	for _, p := range slices.Backward(r.procs) {
		p.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			p.Process.Kill()
			<-done
		}
	}
}

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// trueCapacity reads the emulator's true line and mu(B_max) of "simple".
func (r *replica) trueCapacity() error {
	var line struct {
		AlphaMs float64 `json:"alpha_ms"`
		Tau0Ms  float64 `json:"tau0_ms"`
	}
	var cfg struct {
		MaxBatch int `json:"max_batch_size"`
	}
	base := "http://" + r.emu.Listen
	if err := getJSON(base+"/emulator/models/simple", &line); err != nil {
		return err
	}
	if err := getJSON(base+"/v2/models/simple/config", &cfg); err != nil {
		return err
	}
	r.mu = 1000 * float64(cfg.MaxBatch) / (line.AlphaMs*float64(cfg.MaxBatch) + line.Tau0Ms)
	return nil
}

// energy is the emulator's energy counter in joules.
func (r *replica) energy() (float64, error) {
	resp, err := http.Get("http://" + r.emu.MetricsListen + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(b)) {
		if strings.HasPrefix(l, "nv_energy_consumption{") {
			f := strings.Fields(l)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, errors.New("no nv_energy_consumption")
}

const inferJSON = `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},` +
	`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]}]}`

// poisson calls send at Poisson arrivals of rate per second until ctx
// ends, each in its own goroutine, and waits for the calls.
func poisson(ctx context.Context, rate float64, seed uint64, send func()) {
	rng := rand.New(rand.NewPCG(seed, 7))
	var wg sync.WaitGroup
	next := time.Now()
	for {
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return
			case <-time.After(d):
			}
		} else if ctx.Err() != nil {
			wg.Wait()
			return
		}
		wg.Add(1)
		go func() { defer wg.Done(); send() }()
	}
}

// measure offers Poisson load at rate for o.warmup and then o.duration.
// At the end of the warm-up it reads the energy counter (e0, at t0) and
// sets *measuring under mu, so that send records from then on; after the
// last answer it reads the counter again (e1: the energy while the measured
// load was served, idle power included). ok is false when the run ended
// before its warm-up did.
func measure[E any](ctx context.Context, o options, rate float64, seed uint64, mu *sync.Mutex, measuring *bool,
	energy func() (E, error), send func()) (e0, e1 E, t0 time.Time, ok bool, err error) {
	var eerr error
	rctx, cancel := context.WithTimeout(ctx, o.warmup+o.duration)
	defer cancel()
	go func() {
		select {
		case <-time.After(o.warmup):
		case <-rctx.Done():
			return
		}
		e, err := energy()
		mu.Lock()
		*measuring, e0, t0, eerr, ok = true, e, time.Now(), err, true
		mu.Unlock()
	}()
	poisson(rctx, rate, seed, send)
	if ctx.Err() != nil {
		return e0, e1, t0, false, ctx.Err()
	}
	if e1, err = energy(); err != nil {
		return e0, e1, t0, false, err
	}
	mu.Lock()
	defer mu.Unlock()
	return e0, e1, t0, ok, eerr
}

func runRho(ctx context.Context, o options) error {
	r, err := start(ctx, o, o.tauScale)
	if err != nil {
		return err
	}
	defer r.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512}, Timeout: time.Minute}
	fmt.Printf("preset %s tau-scale %g: true mu(B_max) %.1f rows/s; policy %s; %s warm-up + %s per load; shared machine\n",
		o.preset, o.tauScale, r.mu, o.policy, o.warmup, o.duration)
	fmt.Println("rho_true  rate_rps  reported_utilization(mean of samples)  relative_error  reported_rps")
	for i, rho := range []float64{0.2, 0.5, 0.8} {
		var mu sync.Mutex
		var utils, rps []float64
		measuring := false
		send := func() {
			req, _ := http.NewRequest(http.MethodPost, "http://"+r.http+"/v2/models/simple/infer", strings.NewReader(inferJSON))
			req.Header.Set("endpoint-load-metrics-format", "JSON")
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			h := resp.Header.Get("endpoint-load-metrics")
			var rep v3.OrcaLoadReport
			if protojson.Unmarshal([]byte(strings.TrimPrefix(h, "JSON ")), &rep) != nil {
				return
			}
			mu.Lock()
			if measuring {
				utils = append(utils, rep.ApplicationUtilization)
				rps = append(rps, rep.RpsFractional)
			}
			mu.Unlock()
		}
		rate := rho * r.mu
		wctx, cancel := context.WithTimeout(ctx, o.warmup+o.duration)
		go func() {
			select {
			case <-time.After(o.warmup):
			case <-wctx.Done():
			}
			mu.Lock()
			measuring = true
			mu.Unlock()
		}()
		poisson(wctx, rate, o.seed+uint64(i), send)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		u, q := mean(utils), mean(rps)
		fmt.Printf("%-8.2f  %-8.1f  %-38.4f  %+-14.3f  %.1f\n", rho, rate, u, (u-rho)/rho, q)
	}
	return nil
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

type fleetResult struct {
	balancer  string
	counts    map[string]int
	lat       []float64 // ms
	errors    int
	energyJ   float64
	energyPer []float64 // per replica (HTTP runs)
	requests  int
	durationS float64
}

func runFleet(ctx context.Context, o options) error {
	scales := []float64{o.tauScale, o.tauScale, 2 * o.tauScale}
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	capacity := 0.0
	for _, s := range scales {
		r, err := start(ctx, o, s)
		if err != nil {
			return err
		}
		reps = append(reps, r)
		capacity += r.mu
	}
	rate := o.load * capacity
	fmt.Printf("preset %s, tau-scale %v: true mu(B_max) %.1f, %.1f, %.1f rows/s, fleet %.1f; offered %.1f rows/s (%.0f%%); policy %s; idle %g W each; %s warm-up + %s per run; shared machine\n",
		o.preset, scales, reps[0].mu, reps[1].mu, reps[2].mu, capacity, rate, 100*o.load, o.policy, o.idleWatts, o.warmup, o.duration)
	var results []fleetResult
	order := []string{"round_robin", "weighted_round_robin"}
	for i := range o.repeats {
		for j := range order {
			b := order[(i+j)%2]
			res, err := fleetRun(ctx, o, reps, b, rate, o.seed+uint64(10*i+j))
			if err != nil {
				return err
			}
			results = append(results, res)
			printFleet(res, reps)
			// Let the queues drain and the rate estimates fall before the
			// next balancer starts.
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	// Ratios of the pooled runs.
	pool := map[string]*fleetResult{}
	for _, r := range results {
		p := pool[r.balancer]
		if p == nil {
			p = &fleetResult{balancer: r.balancer, counts: map[string]int{}}
			pool[r.balancer] = p
		}
		for k, v := range r.counts {
			p.counts[k] += v
		}
		p.lat = append(p.lat, r.lat...)
		p.errors += r.errors
		p.energyJ += r.energyJ
		p.requests += r.requests
		p.durationS += r.durationS
	}
	fmt.Println("pooled:")
	for _, b := range order {
		printFleet(*pool[b], reps)
	}
	rr, wrr := pool["round_robin"], pool["weighted_round_robin"]
	fmt.Printf("p99 weighted_round_robin / round_robin: %.3f; requests per joule weighted_round_robin / round_robin: %.3f\n",
		p99(wrr.lat)/p99(rr.lat), (float64(wrr.requests)/wrr.energyJ)/(float64(rr.requests)/rr.energyJ))
	return nil
}

func printFleet(r fleetResult, reps []*replica) {
	full := float64(r.counts[reps[0].grpc]+r.counts[reps[1].grpc]) / 2
	fmt.Printf("%-21s requests %d errors %d | share A %.3f B %.3f C %.3f, C/mean(A,B) %.3f | mean %.1f ms p99 %.1f ms | %.3f requests/J (%.0f J)\n",
		r.balancer, r.requests, r.errors,
		share(r, reps[0].grpc), share(r, reps[1].grpc), share(r, reps[2].grpc), float64(r.counts[reps[2].grpc])/full,
		mean(r.lat), p99(r.lat), float64(r.requests)/r.energyJ, r.energyJ)
}

// p99 is the 99th percentile of v.
func p99(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return stats.Percentile(s, 99)
}

func share(r fleetResult, addr string) float64 {
	n := 0
	for _, v := range r.counts {
		n += v
	}
	return float64(r.counts[addr]) / float64(n)
}

// fleetRun sends Poisson load through a new grpc-go channel over the three
// proxies with the named balancer.
func fleetRun(ctx context.Context, o options, reps []*replica, balancer string, rate float64, seed uint64) (fleetResult, error) {
	res := fleetResult{balancer: balancer, counts: map[string]int{}}
	mr := manual.NewBuilderWithScheme("fleet")
	var addrs []resolver.Address
	for _, r := range reps {
		addrs = append(addrs, resolver.Address{Addr: r.grpc})
	}
	mr.InitialState(resolver.State{Addresses: addrs})
	cfg := `{"loadBalancingConfig":[{"round_robin":{}}]}`
	if balancer == "weighted_round_robin" {
		// Per-call ORCA trailers (the default, no out-of-band stream);
		// weights used 1 s after a replica's first report, refreshed
		// every 0.5 s.
		cfg = `{"loadBalancingConfig":[{"weighted_round_robin":{"blackoutPeriod":"1s","weightUpdatePeriod":"0.5s"}}]}`
	}
	cc, err := grpc.NewClient("fleet:///ratebatch", grpc.WithResolvers(mr),
		grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(cfg))
	if err != nil {
		return res, err
	}
	defer cc.Close()
	client := pb.NewGRPCInferenceServiceClient(cc)
	ints := make([]int32, 16)
	for i := range ints {
		ints[i] = int32(i)
	}
	req := &pb.ModelInferRequest{ModelName: "simple", Inputs: []*pb.ModelInferRequest_InferInputTensor{
		{Name: "INPUT0", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &pb.InferTensorContents{IntContents: ints}},
		{Name: "INPUT1", Datatype: "INT32", Shape: []int64{1, 16}, Contents: &pb.InferTensorContents{IntContents: ints}},
	}}
	var mu sync.Mutex
	measuring := false
	send := func() {
		var p peer.Peer
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t0 := time.Now()
		_, err := client.ModelInfer(cctx, req, grpc.Peer(&p))
		ms := float64(time.Since(t0)) / float64(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if !measuring {
			return
		}
		if err != nil {
			res.errors++
			return
		}
		res.counts[p.Addr.String()]++
		res.lat = append(res.lat, ms)
	}
	energy := func() (float64, error) {
		sum := 0.0
		for _, r := range reps {
			e, err := r.energy()
			if err != nil {
				return 0, err
			}
			sum += e
		}
		return sum, nil
	}
	e0, e1, t0, _, err := measure(ctx, o, rate, seed, &mu, &measuring, energy, send)
	if err != nil {
		return res, err
	}
	mu.Lock() // sends still answering write res
	defer mu.Unlock()
	res.energyJ = e1 - e0
	res.durationS = time.Since(t0).Seconds()
	res.requests = len(res.lat)
	return res, nil
}
