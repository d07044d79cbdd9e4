package triton

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func serve(t *testing.T, routes map[string]string) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"Request for unknown model: 'x' is not found"}`))
			return
		}
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return NewClient(srv.URL+"/", srv.Client())
}

func TestModelConfigVariants(t *testing.T) {
	c := serve(t, map[string]string{
		"GET /v2/models/simple/config": `{"name":"simple","platform":"tensorflow_graphdef","max_batch_size":8,
			"input":[{"name":"INPUT0","data_type":"TYPE_INT32","dims":["16"]}],
			"instance_group":[{"kind":"KIND_GPU","count":2,"gpus":[0,1]},{"kind":"KIND_CPU","count":1}]}`,
		"GET /v2/models/seq/config":   `{"name":"seq","max_batch_size":4,"sequence_batching":{}}`,
		"GET /v2/models/nobat/config": `{"name":"nobat","max_batch_size":0,"input":[{"name":"X","data_type":"TYPE_FP32","dims":[3,224,224]}]}`,
		"GET /v2/models/dec/config":   `{"name":"dec","max_batch_size":4,"model_transaction_policy":{"decoupled":true}}`,
		// The fields that make Triton batch a model's requests otherwise
		// than by concatenating their rows, as GET .../config prints them.
		"GET /v2/models/ragged/config": `{"name":"ragged","max_batch_size":8,"input":[{"name":"X","data_type":"TYPE_FP32","dims":["-1"]},
			{"name":"RAGGED","data_type":"TYPE_FP32","dims":["-1"],"allow_ragged_batch":true}]}`,
		"GET /v2/models/count/config": `{"name":"count","max_batch_size":8,"input":[{"name":"X","data_type":"TYPE_FP32","dims":["-1"]}],
			"batch_input":[{"kind":"BATCH_ELEMENT_COUNT","target_name":["INDEX"],"data_type":"TYPE_FP32","source_input":["X"]}]}`,
		"GET /v2/models/scatter/config": `{"name":"scatter","max_batch_size":8,"input":[{"name":"X","data_type":"TYPE_FP32","dims":["-1"]}],
			"batch_input":[],"batch_output":[{"target_name":["Y"],"kind":"BATCH_SCATTER_WITH_INPUT_SHAPE","source_input":["X"]}]}`,
		"GET /v2/models/shape/config": `{"name":"shape","max_batch_size":8,"input":[{"name":"X","data_type":"TYPE_FP32","dims":["1","3"]},
			{"name":"S","data_type":"TYPE_INT32","dims":["2"],"is_shape_tensor":true}]}`,
		"GET /v2/models/shapeout/config": `{"name":"shapeout","max_batch_size":8,"input":[{"name":"X","data_type":"TYPE_FP32","dims":["3"]}],
			"output":[{"name":"S","data_type":"TYPE_INT32","dims":["2"],"is_shape_tensor":true}]}`,
		"GET /v2/models/cached/config": `{"name":"cached","max_batch_size":8,"input":[{"name":"X","data_type":"TYPE_FP32","dims":["3"]}],
			"batch_input":[],"batch_output":[],"response_cache":{"enable":true}}`,
		"GET /v2/models/uncached/config": `{"name":"uncached","max_batch_size":8,"response_cache":{"enable":false}}`,
	})
	tests := []struct {
		model     string
		batchable bool
		instances int
		why       string // in the reason when not batchable
		cached    bool
	}{
		{"simple", true, 5, "", false},
		{"seq", false, 1, "sequence batching", false},
		{"nobat", false, 1, "max_batch_size is 0", false},
		{"dec", false, 1, "decoupled", false},
		{"ragged", false, 1, "ragged input RAGGED", false},
		{"count", false, 1, "batch_input BATCH_ELEMENT_COUNT", false},
		{"scatter", false, 1, "batch_output BATCH_SCATTER_WITH_INPUT_SHAPE", false},
		{"shape", false, 1, "shape tensor input S", false},
		{"shapeout", false, 1, "shape tensor output S", false},
		{"cached", true, 1, "", true},
		{"uncached", true, 1, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			cfg, err := c.ModelConfig(context.Background(), tt.model)
			if err != nil {
				t.Fatal(err)
			}
			if ok, why := cfg.Batchable(); ok != tt.batchable || !strings.Contains(why, tt.why) || (!ok && why == "") {
				t.Fatalf("Batchable() = %v %q, want %v with a reason naming %q when false", ok, why, tt.batchable, tt.why)
			}
			if got := cfg.ResponseCached(); got != tt.cached {
				t.Fatalf("ResponseCached() = %v, want %v", got, tt.cached)
			}
			if got := cfg.Instances(); got != tt.instances {
				t.Fatalf("Instances() = %d, want %d", got, tt.instances)
			}
		})
	}
	cfg, _ := c.ModelConfig(context.Background(), "simple")
	if got := cfg.Input[0].Dims; len(got) != 1 || got[0] != 16 {
		t.Fatalf("string dims decoded as %v", got)
	}
	cfg, _ = c.ModelConfig(context.Background(), "nobat")
	if got := cfg.Input[0].Dims; len(got) != 3 || got[2] != 224 {
		t.Fatalf("number dims decoded as %v", got)
	}
}

func TestIndexStatsAndErrors(t *testing.T) {
	c := serve(t, map[string]string{
		"POST /v2/repository/index": `[{"name":"simple","version":"1","state":"READY"},{"name":"broken","state":"UNAVAILABLE","reason":"load failed"}]`,
		"GET /v2/models/simple/stats": `{"model_stats":[{"name":"simple","version":"1","batch_stats":[
			{"batch_size":1,"compute_input":{"count":10,"ns":1000000},"compute_infer":{"count":10,"ns":20000000},"compute_output":{"count":10,"ns":1000000}},
			{"batch_size":4,"compute_infer":{"count":0,"ns":0}}]}]}`,
	})
	idx, err := c.RepositoryIndex(context.Background())
	if err != nil || len(idx) != 2 || idx[1].Reason != "load failed" {
		t.Fatalf("index %+v, %v", idx, err)
	}
	stats, err := c.ModelStats(context.Background(), "simple")
	if err != nil || len(stats) != 2 {
		t.Fatalf("stats %+v, %v", stats, err)
	}
	if got := stats[0].MeanMs(); got != 2.2 {
		t.Fatalf("MeanMs = %v, want 2.2 (input+infer+output per execution)", got)
	}
	if got := stats[1].MeanMs(); got != 0 {
		t.Fatalf("MeanMs of an unused size = %v, want 0", got)
	}
	_, err = c.ModelConfig(context.Background(), "x")
	var se *StatusError
	if !errors.As(err, &se) || se.Status != 404 || se.Msg == "" {
		t.Fatalf("unknown model: %v", err)
	}
}

// The health reads: ready is nil, an answer other than 200 is a
// *StatusError carrying Triton's message, and no answer (nothing listens)
// is neither.
func TestReady(t *testing.T) {
	c := serve(t, map[string]string{
		"GET /v2/health/ready":        ``,
		"GET /v2/models/simple/ready": ``,
	})
	ctx := context.Background()
	if err := c.ServerReady(ctx); err != nil {
		t.Fatalf("ServerReady: %v", err)
	}
	if err := c.ModelReady(ctx, "simple"); err != nil {
		t.Fatalf("ModelReady(simple): %v", err)
	}
	var se *StatusError
	if err := c.ModelReady(ctx, "x"); !errors.As(err, &se) || se.Status != 404 || se.Msg == "" {
		t.Fatalf("ModelReady of an unknown model: %v, want a 404 StatusError with the message", err)
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	if err := NewClient(srv.URL, nil).ServerReady(ctx); err == nil || errors.As(err, &se) {
		t.Fatalf("ServerReady of a closed server: %v, want an error that is no StatusError", err)
	}
}
