package registry

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/kserve"
)

// The probe made up from a model's configuration is one row of zeros of
// each required input, decodable as a KServe v2 request in binary form,
// whatever the datatype and shape.
func TestProbeRequest(t *testing.T) {
	type want struct {
		name     string
		datatype kserve.Datatype
		shape    []int64
		bytes    int
	}
	for _, tc := range []struct {
		name     string
		maxBatch int
		inputs   []kserve.ConfigInput
		want     []want
		err      string
	}{
		{"fp32 batched", 8, []kserve.ConfigInput{{Name: "x", DataType: "TYPE_FP32", Dims: kserve.Dims{16}}},
			[]want{{"x", kserve.FP32, []int64{1, 16}, 64}}, ""},
		{"not batched: no batch dimension", 0, []kserve.ConfigInput{{Name: "x", DataType: "TYPE_INT64", Dims: kserve.Dims{2, 3}}},
			[]want{{"x", kserve.Int64, []int64{2, 3}, 48}}, ""},
		{"variable dims take 1", 4, []kserve.ConfigInput{{Name: "ids", DataType: "TYPE_INT32", Dims: kserve.Dims{-1, 3, -1}}},
			[]want{{"ids", kserve.Int32, []int64{1, 1, 3, 1}, 12}}, ""},
		{"string is BYTES of empty elements", 4, []kserve.ConfigInput{{Name: "text", DataType: "TYPE_STRING", Dims: kserve.Dims{2}}},
			[]want{{"text", kserve.Bytes, []int64{1, 2}, 8}}, ""},
		{"half floats", 4, []kserve.ConfigInput{
			{Name: "h", DataType: "TYPE_FP16", Dims: kserve.Dims{3}},
			{Name: "b", DataType: "TYPE_BF16", Dims: kserve.Dims{-1}},
		}, []want{{"h", kserve.FP16, []int64{1, 3}, 6}, {"b", kserve.BF16, []int64{1, 1}, 2}}, ""},
		{"bool, uint8, fp64", 2, []kserve.ConfigInput{
			{Name: "m", DataType: "TYPE_BOOL", Dims: kserve.Dims{4}},
			{Name: "u", DataType: "TYPE_UINT8", Dims: kserve.Dims{3, 2}},
			{Name: "d", DataType: "TYPE_FP64", Dims: kserve.Dims{1}},
		}, []want{{"m", kserve.Bool, []int64{1, 4}, 4}, {"u", kserve.Uint8, []int64{1, 3, 2}, 6}, {"d", kserve.FP64, []int64{1, 1}, 8}}, ""},
		{"optional inputs left out", 2, []kserve.ConfigInput{
			{Name: "x", DataType: "TYPE_FP32", Dims: kserve.Dims{2}},
			{Name: "mask", DataType: "TYPE_FP32", Dims: kserve.Dims{2}, Optional: true},
		}, []want{{"x", kserve.FP32, []int64{1, 2}, 8}}, ""},
		{"shape tensor", 2, []kserve.ConfigInput{{Name: "s", DataType: "TYPE_INT32", Dims: kserve.Dims{2}, IsShapeTensor: true}}, nil, "shape tensor"},
		{"unknown datatype", 2, []kserve.ConfigInput{{Name: "x", DataType: "TYPE_COMPLEX", Dims: kserve.Dims{2}}}, nil, "datatype"},
		{"too large a row", 2, []kserve.ConfigInput{{Name: "x", DataType: "TYPE_FP32", Dims: kserve.Dims{1 << 12, 1 << 12}}}, nil, "MiB"},
		{"no required input", 2, []kserve.ConfigInput{{Name: "x", DataType: "TYPE_FP32", Dims: kserve.Dims{2}, Optional: true}}, nil, "no required input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ProbeRequest(&triton.ModelConfig{Name: "m", MaxBatchSize: tc.maxBatch, Input: tc.inputs})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if w.HeaderLen <= 0 || w.HeaderLen > len(w.Body) {
				t.Fatalf("header length %d of a %d-byte body: want the binary form", w.HeaderLen, len(w.Body))
			}
			req, err := kserve.DecodeRequest(w.Body, w.HeaderLen)
			if err != nil {
				t.Fatalf("the probe does not decode: %v\n%s", err, w.Body[:w.HeaderLen])
			}
			if req.ID != dispatcher.ProbeID {
				t.Errorf("id %q, want %q", req.ID, dispatcher.ProbeID)
			}
			if v, _ := req.Parameters.Bool(kserve.ParamBinaryDataOutput); !v {
				t.Errorf("outputs not asked in binary form (FP16 outputs have no JSON form): %v", req.Parameters)
			}
			if len(req.Inputs) != len(tc.want) {
				t.Fatalf("%d inputs, want %d", len(req.Inputs), len(tc.want))
			}
			for i, in := range req.Inputs {
				wt := tc.want[i]
				if in.Name != wt.name || in.Datatype != wt.datatype || !slices.Equal(in.Shape, wt.shape) || len(in.Data) != wt.bytes {
					t.Errorf("input %d: %s %s %v with %d bytes, want %s %s %v with %d", i, in.Name, in.Datatype, in.Shape, len(in.Data),
						wt.name, wt.datatype, wt.shape, wt.bytes)
				}
				if !bytes.Equal(in.Data, make([]byte, len(in.Data))) {
					t.Errorf("input %s is not all zeros (BYTES: zero lengths)", in.Name)
				}
			}
		})
	}
}

// A configured probe wins over the made-up one and goes as JSON; a model
// whose probe cannot be made up says why in its status.
func TestProbeForModel(t *testing.T) {
	body := `{"inputs":[{"name":"s","datatype":"INT32","shape":[1,2],"data":[1,1]}]}`
	cfg := config.Default()
	cfg.Models = map[string]config.Model{"shaped": {Probe: body}}
	r := New(&fakeUpstream{}, nil, &cfg, nil)
	shape := &triton.ModelConfig{MaxBatchSize: 2, Input: []kserve.ConfigInput{{Name: "s", DataType: "TYPE_INT32", Dims: kserve.Dims{2}, IsShapeTensor: true}}}
	w, why := r.probeFor("shaped", shape)
	if why != "" || string(w.Body) != body || w.HeaderLen != -1 {
		t.Fatalf("configured probe: %q %d (%s)", w.Body, w.HeaderLen, why)
	}
	w, why = r.probeFor("other", shape)
	if w.Body != nil || !strings.Contains(why, "models.other.probe") {
		t.Fatalf("no probe possible: body %q, why %q", w.Body, why)
	}
	for _, bad := range []string{"", "{}", `{"inputs":[]}`, "not json"} {
		if _, err := ConfiguredProbe(bad); err == nil {
			t.Errorf("probe %q accepted", bad)
		}
	}
}
