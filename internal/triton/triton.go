// Package triton reads what the proxy needs to know from a Triton server's
// management API: which models it serves (repository index), their batching
// limits (model config) and per-batch-size execution times (statistics).
// (Model metadata, which only load generation needs, is read by loadgen.)
// It reads; it never loads, unloads or infers.
package triton

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratebatch/ratebatch/kserve"
)

// Client talks to one Triton HTTP endpoint.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client for the server at base, e.g. http://127.0.0.1:8000.
func NewClient(base string, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimRight(base, "/"), http: hc}
}

// IndexEntry is one row of POST /v2/repository/index; kserve owns the type.
type IndexEntry = kserve.IndexEntry

// RepositoryIndex lists the models the server knows, ready or not.
func (c *Client) RepositoryIndex(ctx context.Context) ([]IndexEntry, error) {
	var out []IndexEntry
	if err := c.do(ctx, http.MethodPost, "/v2/repository/index", []byte("{}"), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// ModelConfig and InstanceGroup are Triton's model configuration, which
// kserve owns with the other bodies of the protocol's endpoints.
type (
	ModelConfig   = kserve.ModelConfig
	InstanceGroup = kserve.InstanceGroup
)

// ModelConfig reads GET /v2/models/{m}/config.
func (c *Client) ModelConfig(ctx context.Context, model string) (*ModelConfig, error) {
	var out ModelConfig
	if err := c.do(ctx, http.MethodGet, "/v2/models/"+url.PathEscape(model)+"/config", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// BatchStat is one row of batch_stats: how many executions of that batch
// size ran and their summed compute time.
type BatchStat struct {
	BatchSize    int `json:"batch_size"`
	ComputeInfer struct {
		Count int64 `json:"count"`
		Ns    int64 `json:"ns"`
	} `json:"compute_infer"`
	ComputeInput struct {
		Count int64 `json:"count"`
		Ns    int64 `json:"ns"`
	} `json:"compute_input"`
	ComputeOutput struct {
		Count int64 `json:"count"`
		Ns    int64 `json:"ns"`
	} `json:"compute_output"`
}

// ComputeNs is the total execution time of the batch size's executions
// (ComputeInfer.Count of them): input, infer and output compute together,
// the time a batch holds the model, in nanoseconds.
func (b BatchStat) ComputeNs() int64 {
	return b.ComputeInput.Ns + b.ComputeInfer.Ns + b.ComputeOutput.Ns
}

// MeanMs is the mean execution time (ComputeNs) of the batch size in
// milliseconds; 0 when nothing ran.
func (b BatchStat) MeanMs() float64 {
	if b.ComputeInfer.Count == 0 {
		return 0
	}
	return float64(b.ComputeNs()) / float64(b.ComputeInfer.Count) / 1e6
}

// ModelStats reads GET /v2/models/{m}/stats and returns the batch_stats of
// every version of the model.
func (c *Client) ModelStats(ctx context.Context, model string) ([]BatchStat, error) {
	var out struct {
		ModelStats []struct {
			Name       string      `json:"name"`
			BatchStats []BatchStat `json:"batch_stats"`
		} `json:"model_stats"`
	}
	if err := c.do(ctx, http.MethodGet, "/v2/models/"+url.PathEscape(model)+"/stats", nil, &out); err != nil {
		return nil, err
	}
	var stats []BatchStat
	for _, m := range out.ModelStats {
		stats = append(stats, m.BatchStats...)
	}
	return stats, nil
}

// maxReply bounds what one management reply may cost.
const maxReply = 16 << 20

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("triton %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("triton %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return fmt.Errorf("triton %s %s: reading reply: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return &StatusError{Status: resp.StatusCode, Msg: e.Error}
		}
		return &StatusError{Status: resp.StatusCode, Msg: strings.TrimSpace(string(data))}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("triton %s %s: decoding reply: %w", method, path, err)
	}
	return nil
}

// StatusError is a non-200 answer of the management API.
type StatusError struct {
	Status int
	Msg    string
}

func (e *StatusError) Error() string { return fmt.Sprintf("triton answered %d: %s", e.Status, e.Msg) }
