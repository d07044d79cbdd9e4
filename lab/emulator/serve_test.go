package emulator_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
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
