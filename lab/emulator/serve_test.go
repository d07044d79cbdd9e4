package emulator_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/preset"
)

// An emulator started as `ratebatch emulate` starts it (a preset, its
// instances, idle power, both doors) serves its models' configs, Triton's
// energy metrics and verified gRPC inference until shut down.
func TestEmulateServesUntilCancelled(t *testing.T) {
	profile, err := preset.Lookup("resnet50-v100")
	if err != nil {
		t.Fatal(err)
	}
	em, err := emulator.New(emulator.Options{Profile: profile, TimeScale: 0, Instances: 2, IdleWatts: 30})
	if err != nil {
		t.Fatal(err)
	}
	if err := em.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	grpcAddr, stop, err := em.ServeGRPC("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer stop(time.Second)
	info := em.Banner("exact", grpcAddr)
	if info.Preset != "resnet50-v100" || !info.Energy || len(info.Models) != 3 {
		t.Errorf("info = %+v", info)
	}

	resp, err := http.Get("http://" + info.Listen + "/v2/models/image/config")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var cfg struct {
		MaxBatchSize  int `json:"max_batch_size"`
		InstanceGroup []struct {
			Count int `json:"count"`
		} `json:"instance_group"`
	}
	if err := json.Unmarshal(body, &cfg); err != nil || cfg.MaxBatchSize != 128 || cfg.InstanceGroup[0].Count != 2 {
		t.Errorf("image config %s (%v), want max_batch_size 128 from resnet50-v100 and 2 instances", body, err)
	}
	resp, err = http.Get("http://" + info.MetricsListen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "nv_energy_consumption{") || !strings.Contains(string(metrics), `nv_gpu_power_usage{gpu_uuid="GPU-emulator-0"} 30`) {
		t.Errorf("metrics lack energy or the idle power of 30 W:\n%s", metrics)
	}

	// The gRPC door answers ModelMetadata and ModelInfer: the load
	// generator learns the inputs from it and verifies every answer.
	if info.GRPCListen == "" {
		t.Fatal("the banner gives no grpc_listen")
	}
	res, err := loadgen.Run(context.Background(), loadgen.Config{Target: info.GRPCListen, GRPC: true, Model: "simple",
		Rate: loadgen.ConstantRate(200), Duration: 300 * time.Millisecond, Seed: 1, Verify: true})
	if err != nil || res.Summary.Sent == 0 || res.Summary.Errors != 0 {
		t.Errorf("load over gRPC: %v, summary %+v (%s)", err, res.Summary, res.FirstVerifyError)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := em.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// served is an emulator that Serve runs on a goroutine.
type served struct {
	em   *emulator.Server
	line string       // the first line Serve wrote, the banner's; "" if it failed first
	stop func() error // ends Serve's context and returns its error
}

// serve starts a default emulator's Serve with a and reads its first line.
func serve(t *testing.T, a emulator.Addrs) served {
	t.Helper()
	em, err := emulator.New(emulator.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := em.Serve(ctx, a, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil && line != "" {
		t.Fatalf("banner %q: %v", line, err)
	}
	go io.Copy(io.Discard, pr) // nothing more is expected; never block Serve
	return served{em: em, line: line, stop: func() error { cancel(); return <-done }}
}

// `ratebatch emulate --json` prints one JSON line that scripts read to learn
// where it listens and what it serves; the addresses it gives answer once it
// is printed, and the server stops cleanly when told.
func TestServeJSONBanner(t *testing.T) {
	s := serve(t, emulator.Addrs{Listen: "127.0.0.1:0", Metrics: "127.0.0.1:0", GRPC: "127.0.0.1:0",
		Realism: "exact", JSON: true, Grace: 5 * time.Second})
	// Read back by the keys scripts use, not by emulator.Banner: renaming
	// a key breaks them.
	var banner struct {
		Listen        string   `json:"listen"`
		MetricsListen string   `json:"metrics_listen"`
		GRPCListen    string   `json:"grpc_listen"`
		Preset        string   `json:"preset"`
		Models        []string `json:"models"`
		Realism       string   `json:"realism"`
	}
	if err := json.Unmarshal([]byte(s.line), &banner); err != nil {
		t.Fatalf("banner %q is not one JSON object: %v (Serve: %v)", s.line, err, s.stop())
	}
	if banner.Preset != preset.DefaultPreset || banner.Realism != "exact" || !slices.Contains(banner.Models, "simple") {
		t.Errorf("banner %+v: want preset %s, realism exact and the simple model", banner, preset.DefaultPreset)
	}
	for _, url := range []string{"http://" + banner.Listen + "/v2/health/ready", "http://" + banner.MetricsListen + "/metrics"} {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("the banner's address: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", url, resp.Status)
		}
	}
	if _, port, err := net.SplitHostPort(banner.GRPCListen); err != nil || port == "0" {
		t.Errorf("grpc_listen %q: want the bound address (%v)", banner.GRPCListen, err)
	}
	if err := s.stop(); err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}
}

// Without JSON the banner is text naming the address; an address that
// cannot be listened on is Serve's error, before any banner.
func TestServeTextBannerAndListenError(t *testing.T) {
	s := serve(t, emulator.Addrs{Listen: "127.0.0.1:0", Realism: "exact", Grace: time.Second})
	addr := s.em.Addr()
	if addr == "" || !strings.Contains(s.line, "on http://"+addr+" ") {
		t.Errorf("banner %q does not name the address %q", s.line, addr)
	}
	if err := s.stop(); err != nil {
		t.Errorf("Serve after cancel: %v", err)
	}

	s = serve(t, emulator.Addrs{Listen: "127.0.0.1:notaport", Grace: time.Second})
	if err := s.stop(); err == nil || s.line != "" || !strings.Contains(err.Error(), "listen") {
		t.Errorf("Serve on a bad address: banner %q, error %v; want no banner and a listen error", s.line, err)
	}
}
