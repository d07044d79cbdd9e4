package deploy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	pb "github.com/ratebatch/ratebatch/kserve/inference"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// kubelet plays the kubelet's readiness loop and the Service's endpoint
// list for one pod: it probes the readiness path every period, takes the
// pod out of service after failureThreshold failures in a row and back
// after successThreshold successes, as Kubernetes does.
type kubelet struct {
	url                  string
	period, timeout      time.Duration
	successes, failures  int
	inService            atomic.Bool
	mu                   sync.Mutex
	changes              []time.Time // when inService flipped
	okInRow, failedInRow int
}

func newKubelet(t *testing.T, p k8sProbe, url string) *kubelet {
	t.Helper()
	or := func(v, def int) int {
		if v > 0 {
			return v
		}
		return def
	}
	return &kubelet{url: url, period: time.Duration(or(p.PeriodSeconds, 10)) * time.Second,
		timeout:   time.Duration(or(p.TimeoutSeconds, 1)) * time.Second,
		successes: or(p.SuccessThreshold, 1), failures: or(p.FailureThreshold, 3)}
}

func (k *kubelet) run(ctx context.Context) {
	client := &http.Client{Timeout: k.timeout}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(k.period)
	defer tick.Stop()
	for {
		resp, err := client.Get(k.url)
		ok := err == nil && resp.StatusCode >= 200 && resp.StatusCode < 400
		if err == nil {
			resp.Body.Close()
		}
		k.mu.Lock()
		if ok {
			k.okInRow, k.failedInRow = k.okInRow+1, 0
		} else {
			k.okInRow, k.failedInRow = 0, k.failedInRow+1
		}
		in := k.inService.Load()
		if !in && k.okInRow >= k.successes || in && k.failedInRow >= k.failures {
			k.inService.Store(!in)
			k.changes = append(k.changes, time.Now())
		}
		k.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// waitService waits until the pod's service state is want, within bound,
// and returns when it turned.
func (k *kubelet) waitService(t *testing.T, want bool, bound time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(bound)
	for k.inService.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("pod in service %v after %v, want %v", !want, bound, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.changes[len(k.changes)-1]
}

// The Kubernetes loop with the manifests as shipped: the kubelet probes the
// ratebatch container's readiness path at its period and thresholds, the
// Service sends client traffic only while the pod is ready, and the
// upstream fails every inference (500), then heals; then hangs every
// inference, then heals; then refuses connections (killed), then comes
// back. Each time the pod leaves the Service, and with no
// client traffic at all it comes back: the proxy's own probes find the
// upstream healed within 2 s (every readiness door: /readyz, the data
// port's, gRPC ServerReady, ModelReady and grpc.health.v1), and the kubelet
// within its period after that.
func TestKubeletBringsThePodBack(t *testing.T) {
	if testing.Short() {
		t.Skip("tens of seconds at the manifest's probe period")
	}
	rb, _, shipped := shippedRatebatch(t)
	probe := rb.ReadinessProbe
	if probe.HTTPGet == nil || rb.port(probe.HTTPGet.Port) == "" {
		t.Fatalf("the ratebatch container's readiness probe is not an httpGet on a named port: %+v", probe)
	}
	if _, admin, _ := net.SplitHostPort(shipped.AdminListen); admin != rb.port(probe.HTTPGet.Port) {
		t.Fatalf("the readiness probe's port %s (%s) is not admin_listen %s", probe.HTTPGet.Port, rb.port(probe.HTTPGet.Port), shipped.AdminListen)
	}

	const (
		healthy = iota
		failing
		hanging
	)
	var mode atomic.Int32
	var probes atomic.Int64 // probe inferences the upstream received
	// Eight instances: a hung request holds its instance until the proxy
	// gives up on it (upstream_client.timeout, a minute as shipped), and
	// the four clients below hang at most four.
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Instances: 8, Fault: func(b emulator.BatchInfo) emulator.Fault {
		if b.RequestID == dispatcher.ProbeID {
			probes.Add(1)
		}
		switch mode.Load() {
		case failing:
			return emulator.Fault{Status: 500, Message: "CUDA error: device lost"}
		case hanging:
			return emulator.Fault{Hang: true}
		}
		return emulator.Fault{}
	}})
	grpcUp, stopGRPC, err := em.ServeGRPC("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stopGRPC(time.Second)
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		token, grace := c.AdminToken, c.Grace
		*c = *shipped
		// The pod's addresses, on loopback; the rest as shipped. A pod
		// serving one model: when it fails, every batched model does.
		c.Upstream, c.UpstreamGRPC = "http://"+em.Addr(), grpcUp
		c.Listen, c.AdminListen, c.GRPCListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		c.Power.MetricsURL = "http://" + em.MetricsAddr() + "/metrics"
		c.AdminToken, c.Grace = token, grace
		c.Models = map[string]config.Model{}
		for _, m := range em.Models() {
			if m != emulator.SimpleModel {
				c.Models[m] = config.Model{Policy: config.Passthrough}
			}
		}
	})
	cc, err := grpc.NewClient(lt.GRPCAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	infer, health := pb.NewGRPCInferenceServiceClient(cc), healthpb.NewHealthClient(cc)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	k := newKubelet(t, probe, lt.Admin+probe.HTTPGet.Path)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { k.run(ctx) })

	// The Service's clients: four callers, each sending its next request
	// when the last is answered (or after 3 s, when it gives up on a hung
	// one), only while the pod is in service.
	var sent, ok atomic.Int64
	for w := range 4 {
		wg.Go(func() {
			client := &http.Client{Timeout: 3 * time.Second}
			defer client.CloseIdleConnections()
			for i := 0; ctx.Err() == nil; i++ {
				if !k.inService.Load() {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				body := fmt.Sprintf(`{"id":"w%d-%d","inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[%s]},{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[%s]}]}`,
					w, i, strings.Repeat("1,", 15)+"1", strings.Repeat("2,", 15)+"2")
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, lt.Base+"/v2/models/simple/infer", bytes.NewReader([]byte(body)))
				sent.Add(1)
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}

	// Every readiness door, as an observer polling it often.
	doors := func() map[string]bool {
		ready := map[string]bool{}
		for name, url := range map[string]string{"/readyz": lt.Admin + "/readyz", "/v2/health/ready": lt.Base + "/v2/health/ready",
			"/v2/models/simple/ready": lt.Base + "/v2/models/simple/ready"} {
			resp, err := http.Get(url)
			ready[name] = err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				resp.Body.Close()
			}
		}
		cctx, ccancel := context.WithTimeout(ctx, time.Second)
		defer ccancel()
		sr, err := infer.ServerReady(cctx, &pb.ServerReadyRequest{})
		ready["ServerReady"] = err == nil && sr.GetReady()
		mr, err := infer.ModelReady(cctx, &pb.ModelReadyRequest{Name: "simple"})
		ready["ModelReady"] = err == nil && mr.GetReady()
		hc, err := health.Check(cctx, &healthpb.HealthCheckRequest{})
		ready["grpc.health.v1"] = err == nil && hc.GetStatus() == healthpb.HealthCheckResponse_SERVING
		return ready
	}
	all := func(ready map[string]bool, want bool) bool {
		for _, r := range ready {
			if r != want {
				return false
			}
		}
		return true
	}

	// Back in service within the proxy's 2 s, then a period and a probe's
	// timeout (the kubelet's next look), per success needed.
	back := 2*time.Second + time.Duration(k.successes)*(k.period+k.timeout)
	k.waitService(t, true, back+k.period)
	setMode := func(m int32) func() { return func() { mode.Store(m) } }
	addr, metricsAddr := em.Addr(), em.MetricsAddr()
	for _, fault := range []struct {
		name        string
		start, heal func()
		why         string
	}{
		{"500 to every inference", setMode(failing), setMode(healthy), "failing"},
		{"every inference hung", setMode(hanging), setMode(healthy), "failing"},
		{"upstream refusing connections", func() { em.Close() }, func() {
			if err := em.Start(addr, metricsAddr); err != nil {
				t.Fatalf("restarting the upstream: %v", err)
			}
		}, "refusing connections"},
	} {
		t.Run(fault.name, func(t *testing.T) {
			for start := ok.Load(); ok.Load() < start+20; time.Sleep(10 * time.Millisecond) {
				if !k.inService.Load() {
					t.Fatal("out of service while healthy")
				}
			}
			fault.start()
			faulted := time.Now()
			// Out: the model fails within failing_after batches (at once)
			// or hung_min (2 s), then failureThreshold probes.
			out := k.waitService(t, false, 5*time.Second+time.Duration(k.failures+1)*(k.period+k.timeout))
			// /readyz says why.
			if resp, err := http.Get(lt.Admin + "/readyz"); err != nil {
				t.Fatal(err)
			} else {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), fault.why) {
					t.Fatalf("out of service, /readyz %d %s; want 503 saying %q", resp.StatusCode, body, fault.why)
				}
			}
			// Out of service, no client traffic: the proxy probes alone.
			// (A request sent just before the pod left may still be out;
			// while requests are held for a refusing upstream they probe
			// it themselves, for upstream_client.hold at most.)
			sentOut, probesOut := sent.Load(), probesSent(t, lt)
			wait := shipped.Upstreams.Hold + 5*time.Second
			for deadline := time.Now().Add(wait); probesSent(t, lt) < probesOut+2; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("out of service: %v probes in %v, want some", probesSent(t, lt)-probesOut, wait)
				}
			}
			if n := sent.Load() - sentOut; n != 0 {
				t.Fatalf("out of service: %d client requests sent", n)
			}
			fault.heal()
			healed := time.Now()
			for r := doors(); !all(r, true); r = doors() {
				if time.Since(healed) > 2*time.Second {
					t.Fatalf("2 s after healing, with no client traffic, not every door says ready: %v", r)
				}
				time.Sleep(25 * time.Millisecond)
			}
			ready := time.Since(healed)
			in := k.waitService(t, true, back)
			for start := ok.Load(); ok.Load() < start+20; time.Sleep(10 * time.Millisecond) {
				if time.Since(in) > 10*time.Second {
					t.Fatal("back in service, but the clients' requests fail")
				}
			}
			t.Logf("out of service %v after the fault; every door ready %v after healing, back in service %v after healing (bound %v)",
				out.Sub(faulted).Round(time.Millisecond), ready.Round(time.Millisecond), in.Sub(healed).Round(time.Millisecond), back)
		})
	}
	if probes.Load() == 0 {
		t.Fatalf("no probe inference (id %q) reached the upstream", dispatcher.ProbeID)
	}
}

// probesSent is how many probes the proxy has sent (ratebatch_probes_total).
func probesSent(t *testing.T, lt *servertest.Proxy) float64 {
	t.Helper()
	fams, err := lt.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range fams {
		if mf.GetName() == "ratebatch_probes_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
