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
	"strconv"
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

// ModelConfig is the part of Triton's model configuration the proxy uses.
type ModelConfig struct {
	Name          string          `json:"name"`
	Platform      string          `json:"platform"`
	Backend       string          `json:"backend"`
	MaxBatchSize  int             `json:"max_batch_size"`
	Input         []ConfigTensor  `json:"input"`
	Output        []ConfigTensor  `json:"output"`
	InstanceGroup []InstanceGroup `json:"instance_group"`
	// DynamicBatching is present when Triton batches the model itself.
	DynamicBatching json.RawMessage `json:"dynamic_batching,omitempty"`
	// SequenceBatching is present for stateful models, which must not be
	// batched by a proxy that cannot see sequence boundaries.
	SequenceBatching json.RawMessage `json:"sequence_batching,omitempty"`
	// Decoupled models answer with a stream; the proxy passes them through.
	ModelTransactionPolicy struct {
		Decoupled bool `json:"decoupled"`
	} `json:"model_transaction_policy"`
}

// ConfigTensor is an input or output of a model config. Triton prints int64
// dims as JSON numbers or, from protobuf's JSON mapping, as strings.
type ConfigTensor struct {
	Name     string `json:"name"`
	DataType string `json:"data_type"`
	Dims     Dims   `json:"dims"`
}

// Dims decodes dims written as numbers or as strings.
type Dims []int64

// UnmarshalJSON implements json.Unmarshaler.
func (d *Dims) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(Dims, len(raw))
	for i, r := range raw {
		s := strings.Trim(string(r), `"`)
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("dim %d: %q is not an integer", i, s)
		}
		out[i] = v
	}
	*d = out
	return nil
}

// InstanceGroup is one instance_group entry.
type InstanceGroup struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
	GPUs  []int  `json:"gpus"`
}

// Instances is how many executions of the model can run at once: the sum
// over instance groups of count, times the GPUs listed for KIND_GPU groups.
func (m *ModelConfig) Instances() int {
	n := 0
	for _, g := range m.InstanceGroup {
		c := max(g.Count, 1)
		if g.Kind == "KIND_GPU" && len(g.GPUs) > 1 {
			c *= len(g.GPUs)
		}
		n += c
	}
	return max(n, 1)
}

// Batchable reports whether the proxy may batch the model, and why not.
func (m *ModelConfig) Batchable() (bool, string) {
	switch {
	case m.MaxBatchSize <= 0:
		return false, "max_batch_size is 0 (the model takes no batch dimension)"
	case len(m.SequenceBatching) > 0 && string(m.SequenceBatching) != "null":
		return false, "sequence batching: requests carry state"
	case m.ModelTransactionPolicy.Decoupled:
		return false, "decoupled model: responses stream"
	case m.Platform == "ensemble":
		return false, "ensemble: its steps batch on their own"
	}
	return true, ""
}

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

// MeanMs is the mean execution time of the batch size: input, infer and
// output compute together, in milliseconds; 0 when nothing ran.
func (b BatchStat) MeanMs() float64 {
	if b.ComputeInfer.Count == 0 {
		return 0
	}
	ns := b.ComputeInput.Ns + b.ComputeInfer.Ns + b.ComputeOutput.Ns
	return float64(ns) / float64(b.ComputeInfer.Count) / 1e6
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
