// Package triton reads what the proxy needs to know from a Triton server's
// management API: which models it serves (repository index), their batching
// limits (model config), per-batch-size execution times (statistics), and
// whether the server and each model say they are ready (health).
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

// ServerReady reads GET /v2/health/ready: nil when the server says it is
// ready, a *StatusError when it answers anything else, another error when
// it does not answer (a refused connection, a timeout of ctx).
func (c *Client) ServerReady(ctx context.Context) error {
	_, err := c.send(ctx, http.MethodGet, "/v2/health/ready", nil)
	return err
}

// ModelReady reads GET /v2/models/{m}/ready: nil when the model is ready, a
// *StatusError when the server answers otherwise (an unloaded or unknown
// model: 400 from Triton), another error when it does not answer.
func (c *Client) ModelReady(ctx context.Context, model string) error {
	_, err := c.send(ctx, http.MethodGet, "/v2/models/"+url.PathEscape(model)+"/ready", nil)
	return err
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	data, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("triton %s %s: decoding reply: %w", method, path, err)
	}
	return nil
}

// send is every request the client makes, the one place that says what
// goes with them: the reply's body when the server answers 200, a
// *StatusError with Triton's message when it answers otherwise.
func (c *Client) send(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("triton %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("triton %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return nil, fmt.Errorf("triton %s %s: reading reply: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return nil, &StatusError{Status: resp.StatusCode, Msg: e.Error}
		}
		return nil, &StatusError{Status: resp.StatusCode, Msg: strings.TrimSpace(string(data))}
	}
	return data, nil
}

// StatusError is a non-200 answer of the management API.
type StatusError struct {
	Status int
	Msg    string
}

func (e *StatusError) Error() string { return fmt.Sprintf("triton answered %d: %s", e.Status, e.Msg) }
