package emulator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/lab/preset"
)

func TestEndpoints(t *testing.T) {
	p, err := preset.Lookup("resnet50-v100")
	if err != nil {
		t.Fatal(err)
	}
	_, ts := newTestServer(t, Options{Profile: p, Instances: 3})

	tests := []struct {
		method, path, body string
		wantStatus         int
		check              func(t *testing.T, body []byte)
	}{
		{"GET", "/v2/health/live", "", 200, nil},
		{"GET", "/v2/health/ready", "", 200, nil},
		{"GET", "/v2", "", 200, func(t *testing.T, b []byte) {
			var md kserve.ServerMetadata
			mustUnmarshal(t, b, &md)
			for _, ext := range []string{"binary_tensor_data", "statistics", "model_configuration", "model_repository"} {
				if !slices.Contains(md.Extensions, ext) {
					t.Errorf("extensions %v lack %q", md.Extensions, ext)
				}
			}
		}},
		{"GET", "/v2/models/simple", "", 200, func(t *testing.T, b []byte) {
			var md kserve.ModelMetadata
			mustUnmarshal(t, b, &md)
			want := []kserve.TensorMetadata{{Name: "INPUT0", Datatype: "INT32", Shape: []int64{-1, 16}}, {Name: "INPUT1", Datatype: "INT32", Shape: []int64{-1, 16}}}
			if md.Name != "simple" || !slices.Equal(md.Versions, []string{"1"}) || !equalTensors(md.Inputs, want) {
				t.Errorf("metadata = %+v, want simple v1 with inputs %+v", md, want)
			}
			if len(md.Outputs) != 2 || md.Outputs[0].Name != "OUTPUT0" || md.Outputs[1].Name != "OUTPUT1" {
				t.Errorf("outputs = %+v, want OUTPUT0, OUTPUT1", md.Outputs)
			}
		}},
		{"GET", "/v2/models/simple/versions/1", "", 200, nil},
		{"GET", "/v2/models/simple_nobatch", "", 200, func(t *testing.T, b []byte) {
			var md kserve.ModelMetadata
			mustUnmarshal(t, b, &md)
			if !slices.Equal(md.Inputs[0].Shape, []int64{16}) {
				t.Errorf("non-batching input shape = %v, want [16]", md.Inputs[0].Shape)
			}
		}},
		{"GET", "/v2/models/image", "", 200, func(t *testing.T, b []byte) {
			var md kserve.ModelMetadata
			mustUnmarshal(t, b, &md)
			want := []kserve.TensorMetadata{{Name: "INPUT__0", Datatype: "FP32", Shape: []int64{-1, 3, 224, 224}}}
			if !equalTensors(md.Inputs, want) || !equalTensors(md.Outputs, []kserve.TensorMetadata{{Name: "OUTPUT__0", Datatype: "FP32", Shape: []int64{-1, 1000}}}) {
				t.Errorf("image metadata = %+v", md)
			}
		}},
		{"GET", "/v2/models/simple/config", "", 200, func(t *testing.T, b []byte) {
			var raw map[string]any
			mustUnmarshal(t, b, &raw)
			if _, ok := raw["dynamic_batching"]; ok {
				t.Error("config has dynamic_batching; the emulator executes each request as one batch")
			}
			var c kserve.ModelConfig
			mustUnmarshal(t, b, &c)
			if c.MaxBatchSize != 8 || c.Input[0].DataType != "TYPE_INT32" || !slices.Equal(c.Input[0].Dims, []int64{16}) {
				t.Errorf("config = %+v, want max_batch_size 8, TYPE_INT32 dims [16]", c)
			}
			if len(c.InstanceGroup) != 1 || c.InstanceGroup[0].Count != 3 || c.InstanceGroup[0].Kind != "KIND_GPU" {
				t.Errorf("instance_group = %+v, want one KIND_GPU group of 3", c.InstanceGroup)
			}
		}},
		{"GET", "/v2/models/image/config", "", 200, func(t *testing.T, b []byte) {
			var c kserve.ModelConfig
			mustUnmarshal(t, b, &c)
			if c.MaxBatchSize != p.MaxBatch || c.Output[0].DataType != "TYPE_FP32" || !slices.Equal(c.Output[0].Dims, []int64{1000}) {
				t.Errorf("image config = %+v, want max_batch_size %d (the preset's), TYPE_FP32 [1000] out", c, p.MaxBatch)
			}
		}},
		{"GET", "/v2/models/simple_nobatch/versions/1/config", "", 200, func(t *testing.T, b []byte) {
			var c kserve.ModelConfig
			mustUnmarshal(t, b, &c)
			if c.MaxBatchSize != 0 {
				t.Errorf("max_batch_size = %d, want 0", c.MaxBatchSize)
			}
		}},
		{"GET", "/v2/models/simple/ready", "", 200, nil},
		{"GET", "/v2/models/simple/versions/1/ready", "", 200, nil},
		{"POST", "/v2/repository/index", "", 200, func(t *testing.T, b []byte) {
			var idx []kserve.IndexEntry
			mustUnmarshal(t, b, &idx)
			want := []kserve.IndexEntry{{Name: "simple", Version: "1", State: "READY"}, {Name: "simple_nobatch", Version: "1", State: "READY"}, {Name: "image", Version: "1", State: "READY"}}
			if !slices.Equal(idx, want) {
				t.Errorf("index = %+v, want %+v", idx, want)
			}
		}},
		{"POST", "/v2/repository/index", `{"ready": true}`, 200, nil},
		{"POST", "/v2/repository/index", `{"ready": `, 400, errorContains("repository index")},
		{"GET", "/v2/models/stats", "", 200, func(t *testing.T, b []byte) {
			var st StatsResponse
			mustUnmarshal(t, b, &st)
			if len(st.ModelStats) != 3 {
				t.Errorf("stats for %d models, want 3", len(st.ModelStats))
			}
		}},
		{"GET", "/v2/models/image/stats", "", 200, func(t *testing.T, b []byte) {
			var raw map[string][]map[string]any
			mustUnmarshal(t, b, &raw)
			ms := raw["model_stats"]
			if len(ms) != 1 {
				t.Fatalf("model_stats = %v, want one entry", ms)
			}
			for _, k := range []string{"name", "version", "last_inference", "inference_count", "execution_count", "inference_stats", "batch_stats"} {
				if _, ok := ms[0][k]; !ok {
					t.Errorf("model_stat lacks %q: %v", k, ms[0])
				}
			}
			is, _ := ms[0]["inference_stats"].(map[string]any)
			for _, k := range []string{"success", "fail", "queue", "compute_input", "compute_infer", "compute_output"} {
				if d, ok := is[k].(map[string]any); !ok || d["count"] == nil || d["ns"] == nil {
					t.Errorf("inference_stats.%s = %v, want {count, ns}", k, is[k])
				}
			}
		}},
		{"GET", "/v2/models/nope", "", 404, errorContains("Request for unknown model: 'nope' is not found")},
		{"GET", "/v2/models/nope/config", "", 404, errorContains("unknown model")},
		{"POST", "/v2/models/nope/infer", "{}", 404, errorContains("unknown model")},
		{"GET", "/v2/models/simple/versions/2", "", 404, errorContains("'simple' version 2 is not found")},
		{"GET", "/v2/models/simple/versions/2/stats", "", 404, errorContains("version 2")},
		{"GET", "/v3/whatever", "", 404, errorContains("no endpoint GET /v3/whatever")},
		{"POST", "/v2/health/live", "", 405, nil},
		{"GET", "/v2/models/simple/infer", "", 405, nil},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" "+tt.body, func(t *testing.T) {
			req, err := http.NewRequest(tt.method, ts.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.check != nil {
				tt.check(t, body)
			}
		})
	}
}

func TestLoadUnload(t *testing.T) {
	s, ts := newTestServer(t, Options{})
	a, b := simpleInputs(1, []int64{1, 16}, 1)
	infer := jsonBody(t, nil, nil, a, b)

	postStatus(t, ts.URL+"/v2/repository/models/simple/unload", 200)
	if r := post(t, ts.URL+"/v2/models/simple/infer", infer, -1); r.status != 404 || !strings.Contains(r.errMsg, "no available versions") {
		t.Errorf("infer on an unloaded model: %d %q, want 404 ... no available versions", r.status, r.errMsg)
	}
	getStatus(t, ts.URL+"/v2/models/simple/ready", 400)
	var idx []kserve.IndexEntry
	postJSON(t, ts.URL+"/v2/repository/index", "", &idx)
	if idx[0].State != "UNAVAILABLE" || idx[0].Reason != "unloaded" {
		t.Errorf("index entry after unload = %+v, want UNAVAILABLE/unloaded", idx[0])
	}
	postJSON(t, ts.URL+"/v2/repository/index", `{"ready":true}`, &idx)
	if len(idx) != 2 {
		t.Errorf("ready-only index = %+v, want the 2 loaded models", idx)
	}

	postStatus(t, ts.URL+"/v2/repository/models/simple/load", 200)
	getStatus(t, ts.URL+"/v2/models/simple/ready", 200)
	if r := post(t, ts.URL+"/v2/models/simple/infer", infer, -1); r.status != 200 {
		t.Errorf("infer after load: %d %q", r.status, r.errMsg)
	}
	postStatus(t, ts.URL+"/v2/repository/models/nope/load", 400)

	s.SetReady(false)
	getStatus(t, ts.URL+"/v2/health/ready", 400)
	getStatus(t, ts.URL+"/v2/health/live", 200)
	if err := s.SetModelReady("nope", true); err == nil {
		t.Error("SetModelReady(nope) succeeded")
	}
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

func errorContains(sub string) func(*testing.T, []byte) {
	return func(t *testing.T, b []byte) {
		t.Helper()
		var e struct {
			Error string `json:"error"`
		}
		mustUnmarshal(t, b, &e)
		if !strings.Contains(e.Error, sub) {
			t.Errorf("error %q does not contain %q", e.Error, sub)
		}
	}
}

func equalTensors(a, b []kserve.TensorMetadata) bool {
	return slices.EqualFunc(a, b, func(x, y kserve.TensorMetadata) bool {
		return x.Name == y.Name && x.Datatype == y.Datatype && slices.Equal(x.Shape, y.Shape)
	})
}

func getStatus(t *testing.T, url string, want int) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Errorf("GET %s: status %d, want %d", url, resp.StatusCode, want)
	}
}

func postStatus(t *testing.T, url string, want int) {
	t.Helper()
	resp, err := http.Post(url, "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Errorf("POST %s: status %d, want %d", url, resp.StatusCode, want)
	}
}

func postJSON(t *testing.T, url, body string, v any) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	mustUnmarshal(t, b, v)
}

// --simple-max-batch: the simple model's config states the B_max given
// and a batch of it runs; out-of-range sizes are refused.
func TestSimpleMaxBatch(t *testing.T) {
	for _, tc := range []struct {
		given, want int
		err         bool
	}{{0, SimpleMaxBatch, false}, {32, 32, false}, {128, 128, false}, {-1, 0, true}, {maxSimpleMaxBatch + 1, 0, true}} {
		t.Run(fmt.Sprint(tc.given), func(t *testing.T) {
			if tc.err {
				if _, err := New(Options{SimpleMaxBatch: tc.given}); err == nil {
					t.Fatalf("SimpleMaxBatch %d accepted", tc.given)
				}
				return
			}
			_, ts := newTestServer(t, Options{TimeScale: 0, SimpleMaxBatch: tc.given})
			resp, err := http.Get(ts.URL + "/v2/models/simple/config")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var c kserve.ModelConfig
			if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
				t.Fatal(err)
			}
			if c.MaxBatchSize != tc.want {
				t.Errorf("max_batch_size %d, want %d", c.MaxBatchSize, tc.want)
			}
			rows := make([]int32, 16*tc.want)
			in := func(name string) input {
				return input{name: name, datatype: "INT32", shape: []int64{int64(tc.want), 16}, i32: rows}
			}
			if r := post(t, ts.URL+"/v2/models/simple/infer", jsonBody(t, nil, nil, in("INPUT0"), in("INPUT1")), -1); r.status != http.StatusOK {
				t.Errorf("a batch of %d rows: status %d", tc.want, r.status)
			}
		})
	}
}
