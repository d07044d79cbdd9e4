package registry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/kserve"
)

// A real Triton answers the probe made up from each model's configuration
// with 200. It runs against the server RATEBATCH_TRITON_URL names (e.g.
// tests/triton/server.py, whose models simple, image, half and echo cover
// INT32, FP32, FP16 with a variable dimension and every JSON datatype),
// for the models RATEBATCH_TRITON_MODELS lists (comma-separated; default
// those four); skipped without it.
func TestProbeRequestOnTriton(t *testing.T) {
	base := os.Getenv("RATEBATCH_TRITON_URL")
	if base == "" {
		t.Skip("RATEBATCH_TRITON_URL not set: no Triton to probe")
	}
	models := []string{"simple", "image", "half", "echo"}
	if v := os.Getenv("RATEBATCH_TRITON_MODELS"); v != "" {
		models = strings.Split(v, ",")
	}
	client := triton.NewClient(base, nil)
	for _, name := range models {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			mc, err := client.ModelConfig(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			w, err := ProbeRequest(mc)
			if err != nil {
				t.Fatal(err)
			}
			status, body, err := postProbe(ctx, base, name, w)
			if err != nil {
				t.Fatal(err)
			}
			if status != http.StatusOK {
				t.Fatalf("Triton answered the probe %d: %s", status, body.data)
			}
			if _, err := kserve.DecodeResponse(body.data, body.headerLen); err != nil {
				t.Fatalf("Triton's answer to the probe does not decode: %v", err)
			}
		})
	}
}

type reply struct {
	data      []byte
	headerLen int
}

func postProbe(ctx context.Context, base, model string, w dispatcher.Wire) (int, reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+dispatcher.InferPath(model, ""), bytes.NewReader(w.Body))
	if err != nil {
		return 0, reply{}, err
	}
	if w.HeaderLen >= 0 {
		req.Header.Set(kserve.HeaderContentLength, fmt.Sprint(w.HeaderLen))
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, reply{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, reply{}, err
	}
	hl := -1
	if v := resp.Header.Get(kserve.HeaderContentLength); v != "" {
		if hl, err = kserve.ParseHeaderLength(v, len(data)); err != nil {
			return 0, reply{}, err
		}
	}
	return resp.StatusCode, reply{data, hl}, nil
}
