package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ratebatch/ratebatch/internal/poll"
)

// lockedBuffer is a bytes.Buffer safe to read while a command writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestEmulateServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"emulate", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
			"--grpc-listen", "127.0.0.1:0", "--preset", "resnet50-v100", "--tau-scale", "0", "--instances", "2", "--idle-watts", "30", "--json"}, &out, &errb)
	}()
	var info struct {
		Listen        string   `json:"listen"`
		MetricsListen string   `json:"metrics_listen"`
		Preset        string   `json:"preset"`
		Models        []string `json:"models"`
		Energy        bool     `json:"energy"`
		GRPCListen    string   `json:"grpc_listen"`
	}
	poll.Until(t, "emulate to print its addresses", func() bool {
		select {
		case c := <-code:
			t.Fatalf("emulate exited with %d before serving: %s", c, errb.String())
		default:
		}
		return strings.HasSuffix(out.String(), "\n")
	})
	if err := json.Unmarshal([]byte(out.String()), &info); err != nil {
		t.Fatalf("--json output %q: %v", out.String(), err)
	}
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
		t.Fatal("--json gives no grpc_listen")
	}
	if c, lout, lerr := runCmd(t, "load", "--protocol", "grpc", "--target", info.GRPCListen, "--model", "simple",
		"--rate", "200", "--duration", "300ms", "--verify", "--json"); c != 0 || !strings.Contains(lout, `"errors": 0`) {
		t.Errorf("load over gRPC: exit %d, %s %s", c, lout, lerr)
	}

	cancel()
	if c := <-code; c != 0 {
		t.Errorf("exit code %d after cancel, want 0; stderr %s", c, errb.String())
	}
}

func TestEmulateFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown preset", []string{"--preset", "nope"}, `unknown preset "nope"`},
		{"negative scale", []string{"--tau-scale", "-1"}, "time scale"},
		{"jitter too large", []string{"--jitter", "1.5"}, "jitter"},
		{"idle power without energy figures", []string{"--preset", "resnet101-titanrtx", "--idle-watts", "50"}, "no published energy figures"},
		{"empty listen", []string{"--listen", ""}, "--listen"},
		{"not a number", []string{"--instances", "two"}, "invalid value"},
		{"stray argument", []string{"extra"}, "unexpected argument"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(context.Background(), append([]string{"emulate", "--listen", "127.0.0.1:0", "--metrics-listen", ""}, tt.args...), &out, &errb)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			if !strings.Contains(errb.String(), tt.want) {
				t.Errorf("stderr %q does not mention %q", errb.String(), tt.want)
			}
		})
	}
}

func TestEmulateListenError(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"emulate", "--listen", "127.0.0.1:notaport", "--metrics-listen", ""}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "listen") {
		t.Errorf("exit %d, stderr %q; want 1 naming the listen failure", code, errb.String())
	}
}
