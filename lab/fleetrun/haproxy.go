package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// emulatorIdleWatts is the idle power each emulator draws: -idle-watts as
// given, except in -run pack, where -idle-watts is the real GPU's and the
// emulator, slowed -tau-scale times without its batches' energy scaled,
// draws it divided by -tau-scale.
func emulatorIdleWatts(o options) float64 {
	if o.mode == "pack" && o.tauScale > 0 {
		return o.idleWatts / o.tauScale
	}
	return o.idleWatts
}

// compare runs each arm of order repeats times, alternating, and returns
// the pooled results by arm.
func compare(ctx context.Context, order []string, repeats int, seed uint64,
	one func(arm string, seed uint64) (fleetResult, error), print func(fleetResult)) (map[string]*fleetResult, error) {
	pool := map[string]*fleetResult{}
	for i := range repeats {
		for j := range order {
			arm := order[(i+j)%len(order)]
			r, err := one(arm, seed+uint64(10*i+j))
			if err != nil {
				return nil, err
			}
			print(r)
			p := pool[arm]
			if p == nil {
				p = &fleetResult{balancer: arm, counts: map[string]int{}, energyPer: make([]float64, len(r.energyPer))}
				pool[arm] = p
			}
			for k, v := range r.counts {
				p.counts[k] += v
			}
			for k, v := range r.energyPer {
				p.energyPer[k] += v
			}
			p.lat = append(p.lat, r.lat...)
			p.errors += r.errors
			p.energyJ += r.energyJ
			p.requests += r.requests
			p.durationS += r.durationS
			// Let the queues drain and the rate estimates fall before
			// the next arm starts.
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return pool, nil
}

// httpRun sends Poisson load over HTTP for warmup+duration: each request
// to target(i) (the i-th request), its answer counted under key(resp).
// Energy is every replica's, from the end of the warm-up to the last
// answer.
func httpRun(ctx context.Context, o options, reps []*replica, arm string, rate float64, seed uint64,
	target func(i int) string, key func(i int, h http.Header) string) (fleetResult, error) {
	res := fleetResult{balancer: arm, counts: map[string]int{}}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}, Timeout: time.Minute}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	measuring := false
	n := 0
	send := func() {
		mu.Lock()
		i := n
		n++
		mu.Unlock()
		t0 := time.Now()
		resp, err := client.Post(target(i), "application/json", strings.NewReader(inferJSON))
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
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
		res.counts[key(i, resp.Header)]++
		res.lat = append(res.lat, ms)
	}
	energy := func() ([]float64, error) {
		var es []float64
		for _, r := range reps {
			e, err := r.energy()
			if err != nil {
				return nil, err
			}
			es = append(es, e)
		}
		return es, nil
	}
	e0, e1, t0, ok, err := measure(ctx, o, rate, seed, &mu, &measuring, energy, send)
	if err != nil {
		return res, err
	}
	mu.Lock() // sends still answering write res
	defer mu.Unlock()
	if !ok {
		return res, errors.New("the run ended before its warm-up")
	}
	for i := range reps {
		res.energyPer = append(res.energyPer, e1[i]-e0[i])
		res.energyJ += e1[i] - e0[i]
	}
	res.durationS = time.Since(t0).Seconds()
	res.requests = len(res.lat)
	return res, nil
}

// haproxyConfig is HAProxy's configuration of one arm: the three proxies'
// HTTP ports behind one frontend, each answer marked with the server that
// gave it.
func haproxyConfig(arm, front, stats string, reps []*replica) (string, error) {
	balance, agent := "roundrobin", false
	switch arm {
	case "roundrobin":
	case "roundrobin+agent":
		agent = true
	case "leastconn":
		balance = "leastconn"
	default:
		return "", fmt.Errorf("unknown HAProxy arm %q", arm)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `global
  maxconn 8192
defaults
  mode http
  option http-keep-alive
  timeout connect 2s
  timeout client 90s
  timeout server 90s
frontend stats
  bind %s
  stats enable
  stats uri /stats
frontend fe
  bind %s
  default_backend be
backend be
  balance %s
  http-response set-header X-Served-By %%s
`, stats, front, balance)
	for i, r := range reps {
		fmt.Fprintf(&b, "  server %c %s weight 100", 'A'+i, r.http)
		if agent {
			_, port, err := net.SplitHostPort(r.agent)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, " agent-check agent-port %s agent-inter 500ms", port)
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// startHAProxy runs haproxy in the foreground with cfg, and returns once
// its frontend accepts connections.
func startHAProxy(ctx context.Context, bin, cfg, front string) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "fleetrun-haproxy-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-db", "-f", path)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	stop = func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", front); err == nil {
			c.Close()
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("haproxy not accepting on %s after 10 s", front)
		}
	}
}

func runHAProxy(ctx context.Context, o options) error {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		return errors.New("haproxy not found on PATH (Debian: apt-get install haproxy); -run haproxy needs it")
	}
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
	out, _ := exec.Command(bin, "-v").Output()
	fmt.Printf("%s", strings.SplitN(string(out), "\n", 2)[0]+"\n")
	fmt.Printf("preset %s, tau-scale %v: true mu(B_max) %.1f, %.1f, %.1f rows/s, fleet %.1f; offered %.1f rows/s (%.0f%%) over HTTP through HAProxy; policy %s; idle %g W each; %s warm-up + %s per run; shared machine\n",
		o.preset, scales, reps[0].mu, reps[1].mu, reps[2].mu, capacity, rate, 100*o.load, o.policy, o.idleWatts, o.warmup, o.duration)
	one := func(arm string, seed uint64) (fleetResult, error) {
		front, err := freePort()
		if err != nil {
			return fleetResult{}, err
		}
		stats, err := freePort()
		if err != nil {
			return fleetResult{}, err
		}
		cfg, err := haproxyConfig(arm, front, stats, reps)
		if err != nil {
			return fleetResult{}, err
		}
		stop, err := startHAProxy(ctx, bin, cfg, front)
		if err != nil {
			return fleetResult{}, err
		}
		defer stop()
		url := "http://" + front + "/v2/models/simple/infer"
		res, err := httpRun(ctx, o, reps, arm, rate, seed, func(int) string { return url }, func(_ int, h http.Header) string {
			if s := h.Get("X-Served-By"); len(s) == 1 && s[0] >= 'A' && int(s[0]-'A') < len(reps) {
				return reps[s[0]-'A'].grpc // printFleet's key
			}
			return "?"
		})
		return res, err
	}
	order := []string{"roundrobin", "roundrobin+agent", "leastconn"}
	pool, err := compare(ctx, order, o.repeats, o.seed, one, func(r fleetResult) { printFleet(r, reps) })
	if err != nil {
		return err
	}
	fmt.Println("pooled:")
	for _, b := range order {
		printFleet(*pool[b], reps)
	}
	rr, ag := pool["roundrobin"], pool["roundrobin+agent"]
	fmt.Printf("p99 roundrobin+agent / roundrobin: %.3f; requests per joule roundrobin+agent / roundrobin: %.3f\n",
		p99(ag.lat)/p99(rr.lat), (float64(ag.requests)/ag.energyJ)/(float64(rr.requests)/rr.energyJ))
	return nil
}

// runPack compares spreading a low load over four GPUs with packing it
// onto two or one.
func runPack(ctx context.Context, o options) error {
	const n = 4
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.stop()
		}
	}()
	capacity := 0.0
	for range n {
		r, err := start(ctx, o, o.tauScale)
		if err != nil {
			return err
		}
		reps = append(reps, r)
		capacity += r.mu
	}
	rate := o.load * capacity
	fmt.Printf("preset %s, tau-scale %g: %d GPUs, true mu(B_max) %.1f rows/s each, fleet %.1f; offered %.1f rows/s (fleet rho %.2f) over HTTP; policy %s; idle %g W per GPU (emulators draw %g W: idle/tau-scale); %s warm-up + %s per run; shared machine\n",
		o.preset, o.tauScale, n, reps[0].mu, capacity, rate, o.load, o.policy, o.idleWatts, emulatorIdleWatts(o), o.warmup, o.duration)
	arms := map[string]int{"spread-4": 4, "pack-2": 2, "pack-1": 1}
	order := []string{"spread-4", "pack-2", "pack-1"}
	print := func(r fleetResult) {
		used, usedJ := 0, 0.0
		var shares []string
		for i, rep := range reps {
			shares = append(shares, fmt.Sprintf("%.2f", share(r, rep.http)))
			if r.counts[rep.http] > 0 {
				used++
				usedJ += r.energyPer[i]
			}
		}
		fmt.Printf("%-9s requests %d errors %d | shares %s | mean %.1f ms p99 %.1f ms | requests/J %.3f with the idle GPUs, %.3f with %d GPU(s) (%.0f J, %.0f J)\n",
			r.balancer, r.requests, r.errors, strings.Join(shares, " "), mean(r.lat), p99(r.lat),
			float64(r.requests)/r.energyJ, float64(r.requests)/usedJ, used, r.energyJ, usedJ)
	}
	one := func(arm string, seed uint64) (fleetResult, error) {
		k := arms[arm]
		return httpRun(ctx, o, reps, arm, rate, seed,
			func(i int) string { return "http://" + reps[i%k].http + "/v2/models/simple/infer" },
			func(i int, _ http.Header) string { return reps[i%k].http })
	}
	pool, err := compare(ctx, order, o.repeats, o.seed, one, print)
	if err != nil {
		return err
	}
	fmt.Println("pooled:")
	for _, a := range order {
		print(*pool[a])
	}
	return nil
}
