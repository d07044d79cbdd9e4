package emulator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestSimpleMath(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	url := ts.URL + "/v2/models/simple/infer"
	tests := []struct {
		name    string
		rows    int
		binary  bool
		params  map[string]any
		outputs []map[string]any
		// wantBinary says, per output returned, whether it is in the binary section.
		wantBinary map[string]bool
	}{
		{"json one row", 1, false, nil, nil, map[string]bool{"OUTPUT0": false, "OUTPUT1": false}},
		{"json 5 rows", 5, false, nil, nil, map[string]bool{"OUTPUT0": false, "OUTPUT1": false}},
		{"binary 8 rows, JSON outputs by default", 8, true, nil, nil, map[string]bool{"OUTPUT0": false, "OUTPUT1": false}},
		{"binary_data_output", 3, true, map[string]any{"binary_data_output": true}, nil, map[string]bool{"OUTPUT0": true, "OUTPUT1": true}},
		{"one output, binary", 2, false, nil, []map[string]any{{"name": "OUTPUT1", "parameters": map[string]any{"binary_data": true}}}, map[string]bool{"OUTPUT1": true}},
		{"per-output choice beats the request default", 4, true, map[string]any{"binary_data_output": true},
			[]map[string]any{{"name": "OUTPUT0", "parameters": map[string]any{"binary_data": false}}, {"name": "OUTPUT1"}},
			map[string]bool{"OUTPUT0": false, "OUTPUT1": true}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := simpleInputs(tt.rows, []int64{int64(tt.rows), 16}, int32(i))
			var r inferResult
			if tt.binary {
				body, hl := binaryBody(t, tt.params, tt.outputs, a, b)
				r = post(t, url, body, hl)
			} else {
				r = post(t, url, jsonBody(t, tt.params, tt.outputs, a, b), -1)
			}
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.errMsg)
			}
			if r.model != "simple" {
				t.Errorf("model_name = %q", r.model)
			}
			if anyBinary := slices.Contains(mapValues(tt.wantBinary), true); anyBinary != (r.header.Get("Inference-Header-Content-Length") != "") {
				t.Errorf("Inference-Header-Content-Length = %q with binary outputs %v", r.header.Get("Inference-Header-Content-Length"), tt.wantBinary)
			}
			if len(r.outs) != len(tt.wantBinary) {
				t.Fatalf("got outputs %v, want %v", r.outs, tt.wantBinary)
			}
			for name, wantBin := range tt.wantBinary {
				o, ok := r.outs[name]
				if !ok {
					t.Fatalf("output %s missing", name)
				}
				if o.Binary != wantBin {
					t.Errorf("%s binary = %v, want %v", name, o.Binary, wantBin)
				}
				if o.Datatype != "INT32" || !slices.Equal(o.Shape, []int64{int64(tt.rows), 16}) {
					t.Errorf("%s is %s %v, want INT32 [%d,16]", name, o.Datatype, o.Shape, tt.rows)
				}
				if len(o.I32) != len(a.i32) {
					t.Fatalf("%s has %d elements, want %d", name, len(o.I32), len(a.i32))
				}
				for k := range a.i32 {
					want := a.i32[k] + b.i32[k]
					if name == "OUTPUT1" {
						want = a.i32[k] - b.i32[k]
					}
					if o.I32[k] != want {
						t.Fatalf("%s[%d] = %d, want %d", name, k, o.I32[k], want)
					}
				}
			}
		})
	}
}

func mapValues(m map[string]bool) []bool {
	var v []bool
	for _, b := range m {
		v = append(v, b)
	}
	return v
}

func TestSimpleWrapsAround(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	a := input{name: "INPUT0", datatype: "INT32", shape: []int64{1, 16}, i32: make([]int32, 16)}
	b := input{name: "INPUT1", datatype: "INT32", shape: []int64{1, 16}, i32: make([]int32, 16)}
	a.i32[0], b.i32[0] = math.MaxInt32, 1
	a.i32[1], b.i32[1] = math.MinInt32, 1
	r := post(t, ts.URL+"/v2/models/simple/infer", jsonBody(t, nil, nil, a, b), -1)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.errMsg)
	}
	if got := r.outs["OUTPUT0"].I32[0]; got != math.MinInt32 {
		t.Errorf("MaxInt32+1 = %d, want MinInt32 (INT32 wrap-around)", got)
	}
	if got := r.outs["OUTPUT1"].I32[1]; got != math.MaxInt32 {
		t.Errorf("MinInt32-1 = %d, want MaxInt32", got)
	}
}

func TestNoBatchModel(t *testing.T) {
	s, ts := newTestServer(t, Options{})
	a, b := simpleInputs(1, []int64{16}, 7)
	r := post(t, ts.URL+"/v2/models/simple_nobatch/infer", jsonBody(t, nil, nil, a, b), -1)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.errMsg)
	}
	o := r.outs["OUTPUT0"]
	if !slices.Equal(o.Shape, []int64{16}) || o.I32[5] != a.i32[5]+b.i32[5] {
		t.Errorf("OUTPUT0 = %v %v", o.Shape, o.I32)
	}
	st, _ := s.Stats(NoBatchModel)
	if st.InferenceCount != 1 || len(st.BatchStats) != 1 || st.BatchStats[0].BatchSize != 1 {
		t.Errorf("stats = %+v, want one inference of batch size 1", st)
	}
}

// imageRow fills one image of the image model with values from rng.
func imageRow(rng *rand.Rand) []float32 {
	row := make([]float32, 3*224*224)
	for i := range row {
		row[i] = float32(rng.IntN(2001)-1000) / 256 // exact in float32, sums exact in float64
	}
	return row
}

// foldExpected is the image model's documented output, computed directly.
func foldExpected(row []float32) []float32 {
	out := make([]float32, 1000)
	for k := range out {
		var s float64
		for i := k; i < len(row); i += 1000 {
			s += float64(row[i])
		}
		out[k] = float32(s)
	}
	return out
}

func TestImageOutputFollowsEachRow(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	rows := [][]float32{imageRow(rng), imageRow(rng)}
	send := func(rows [][]float32, binary bool) output {
		in := input{name: "INPUT__0", datatype: "FP32", shape: []int64{int64(len(rows)), 3, 224, 224}}
		for _, r := range rows {
			in.f32 = append(in.f32, r...)
		}
		var r inferResult
		if binary {
			body, hl := binaryBody(t, map[string]any{"binary_data_output": true}, nil, in)
			r = post(t, ts.URL+"/v2/models/image/infer", body, hl)
		} else {
			r = post(t, ts.URL+"/v2/models/image/infer", jsonBody(t, nil, nil, in), -1)
		}
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.errMsg)
		}
		return r.outs["OUTPUT__0"]
	}
	for _, binary := range []bool{false, true} {
		t.Run(fmt.Sprintf("binary=%v", binary), func(t *testing.T) {
			out := send(rows, binary)
			if !slices.Equal(out.Shape, []int64{2, 1000}) {
				t.Fatalf("shape %v, want [2,1000]", out.Shape)
			}
			for r, row := range rows {
				if got, want := out.F32[r*1000:(r+1)*1000], foldExpected(row); !slices.Equal(got, want) {
					t.Fatalf("row %d: output differs from the fold-sum of its own input", r)
				}
			}
			// The same images in another order come back in that order.
			swapped := send([][]float32{rows[1], rows[0]}, binary)
			if !slices.Equal(swapped.F32[:1000], out.F32[1000:]) || !slices.Equal(swapped.F32[1000:], out.F32[:1000]) {
				t.Error("reordered rows did not reorder the outputs")
			}
			if slices.Equal(out.F32[:1000], out.F32[1000:2000]) {
				t.Error("two different images gave the same output; mix-ups would go unnoticed")
			}
		})
	}
}

func TestClassification(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	in := input{name: "INPUT__0", datatype: "FP32", shape: []int64{2, 3, 224, 224}, f32: make([]float32, 2*3*224*224)}
	// Row 0 puts 3 into class 7 and 2 into class 900; row 1 puts 5 into class 0.
	in.f32[7], in.f32[900] = 3, 2
	in.f32[3*224*224] = 5
	for _, binary := range []bool{false, true} {
		outputs := []map[string]any{{"name": "OUTPUT__0", "parameters": map[string]any{"classification": 2, "binary_data": binary}}}
		body, hl := binaryBody(t, nil, outputs, in)
		r := post(t, ts.URL+"/v2/models/image/infer", body, hl)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.errMsg)
		}
		o := r.outs["OUTPUT__0"]
		want := []string{"3.000000:7", "2.000000:900", "5.000000:0", "0.000000:1"}
		if o.Datatype != "BYTES" || !slices.Equal(o.Shape, []int64{2, 2}) || !slices.Equal(o.Strs, want) {
			t.Errorf("binary=%v: classification = %s %v %q, want BYTES [2,2] %q", binary, o.Datatype, o.Shape, o.Strs, want)
		}
	}
}

func TestInferErrors(t *testing.T) {
	s, ts := newTestServer(t, Options{})
	a, b := simpleInputs(2, []int64{2, 16}, 1)
	a9, b9 := simpleInputs(9, []int64{9, 16}, 1)
	short := a
	short.shape = []int64{2, 8}
	short.i32 = short.i32[:16]
	wrongType := input{name: "INPUT0", datatype: "FP32", shape: []int64{2, 16}, f32: make([]float32, 32)}
	b1 := b
	b1.shape, b1.i32 = []int64{1, 16}, b.i32[:16]
	unknown := input{name: "INPUT9", datatype: "INT32", shape: []int64{2, 16}, i32: make([]int32, 32)}
	nb0, nb1 := simpleInputs(1, []int64{1, 16}, 1)

	tests := []struct {
		name      string
		model     string
		body      []byte
		headerLen int
		want      string
	}{
		{"not JSON", "simple", []byte("{"), -1, ""},
		{"no inputs", "simple", []byte(`{"inputs": []}`), -1, "inputs"},
		{"header longer than body", "simple", []byte(`{}`), 10, "Inference-Header-Content-Length"},
		{"missing input", "simple", jsonBody(t, nil, nil, a), -1, "input 'INPUT1' is missing"},
		{"unknown input", "simple", jsonBody(t, nil, nil, a, b, unknown), -1, "unexpected inference input 'INPUT9'"},
		{"duplicate input", "simple", jsonBody(t, nil, nil, a, a), -1, "more than once"},
		{"wrong datatype", "simple", jsonBody(t, nil, nil, wrongType, b), -1, "data-type is 'FP32', but model 'simple' expects 'INT32'"},
		{"wrong shape", "simple", jsonBody(t, nil, nil, short, b), -1, "Expected [-1,16], got [2,8]"},
		{"batch too large", "simple", jsonBody(t, nil, nil, a9, b9), -1, "batch-size must be <= 8"},
		{"batch sizes differ", "simple", jsonBody(t, nil, nil, a, b1), -1, "same batch size"},
		{"unknown output", "simple", jsonBody(t, nil, []map[string]any{{"name": "OUTPUT7"}}, a, b), -1, "unexpected inference output 'OUTPUT7'"},
		{"output twice", "simple", jsonBody(t, nil, []map[string]any{{"name": "OUTPUT0"}, {"name": "OUTPUT0"}}, a, b), -1, "more than once"},
		{"batch dim on a non-batching model", "simple_nobatch", jsonBody(t, nil, nil, nb0, nb1), -1, "Expected [16], got [1,16]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := s.Stats(tt.model)
			r := post(t, ts.URL+"/v2/models/"+tt.model+"/infer", tt.body, tt.headerLen)
			if r.status != 400 {
				t.Fatalf("status %d (%q), want 400", r.status, r.errMsg)
			}
			if !strings.Contains(r.errMsg, tt.want) {
				t.Errorf("error %q does not contain %q", r.errMsg, tt.want)
			}
			after, _ := s.Stats(tt.model)
			if after.InferenceStats.Fail.Count != before.InferenceStats.Fail.Count+1 || after.ExecutionCount != before.ExecutionCount {
				t.Errorf("fail count %d -> %d, executions %d -> %d; want one more failure and no execution",
					before.InferenceStats.Fail.Count, after.InferenceStats.Fail.Count, before.ExecutionCount, after.ExecutionCount)
			}
		})
	}
}

func TestCompressedBodyRefused(t *testing.T) {
	_, ts := newTestServer(t, Options{})
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v2/models/simple/infer", strings.NewReader("\x1f\x8b"))
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if r := parseResponse(t, resp); r.status != http.StatusUnsupportedMediaType || !strings.Contains(r.errMsg, "gzip") {
		t.Errorf("got %d %q, want 415 naming gzip", r.status, r.errMsg)
	}
}

func TestBodyLimit(t *testing.T) {
	_, ts := newTestServer(t, Options{MaxBodyBytes: 100})
	a, b := simpleInputs(2, []int64{2, 16}, 1)
	r := post(t, ts.URL+"/v2/models/simple/infer", jsonBody(t, nil, nil, a, b), -1)
	if r.status != 413 || !strings.Contains(r.errMsg, "100 bytes") {
		t.Errorf("status %d %q, want 413 naming the limit", r.status, r.errMsg)
	}
}

// TestConcurrentRequests runs many callers at once (go test -race): every
// caller gets its own rows back and the counters add up.
func TestConcurrentRequests(t *testing.T) {
	s, ts := newTestServer(t, Options{Instances: 2, TimeScale: 0})
	const callers = 40
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	totalRows := 0
	for c := range callers {
		rows := c%8 + 1
		totalRows += rows
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, b := simpleInputs(rows, []int64{int64(rows), 16}, int32(c))
			var r inferResult
			if c%2 == 0 {
				r = post(t, ts.URL+"/v2/models/simple/infer", jsonBody(t, nil, nil, a, b), -1)
			} else {
				body, hl := binaryBody(t, map[string]any{"binary_data_output": true}, nil, a, b)
				r = post(t, ts.URL+"/v2/models/simple/infer", body, hl)
			}
			if r.status != 200 {
				errs <- fmt.Errorf("caller %d: %d %s", c, r.status, r.errMsg)
				return
			}
			for k := range a.i32 {
				if r.outs["OUTPUT0"].I32[k] != a.i32[k]+b.i32[k] {
					errs <- fmt.Errorf("caller %d got someone else's rows", c)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st, _ := s.Stats(SimpleModel)
	if st.ExecutionCount != callers || st.InferenceCount != uint64(totalRows) || st.InferenceStats.Success.Count != callers {
		t.Errorf("executions %d, inferences %d, successes %d; want %d, %d, %d",
			st.ExecutionCount, st.InferenceCount, st.InferenceStats.Success.Count, callers, totalRows, callers)
	}
}

// TestFoldRowPaths checks the fast path of the image model's math (a
// little-endian machine's chunks copied into a []float32) against the
// element-by-element decoding a big-endian machine takes, on rows that
// start at every alignment and end mid-chunk.
func TestFoldRowPaths(t *testing.T) {
	if !littleEndian {
		t.Skip("the fast path is taken on little-endian machines only")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ offset, elems int }{
		{0, 3 * 224 * 224}, {1, 3 * 224 * 224}, {2, 2500}, {3, 999}, {0, 1}, {5, 1000},
	} {
		buf := make([]byte, c.offset+4*c.elems+3) // 3 trailing bytes: not an element
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		row := buf[c.offset:]
		var fast, slow [imageClasses]float64
		foldRow(&fast, row)
		littleEndian = false
		foldRow(&slow, row)
		littleEndian = true
		for k := range fast {
			if math.Float64bits(fast[k]) != math.Float64bits(slow[k]) && !(math.IsNaN(fast[k]) && math.IsNaN(slow[k])) {
				t.Fatalf("offset %d, %d elements: acc[%d] = %v fast, %v decoded", c.offset, c.elems, k, fast[k], slow[k])
			}
		}
	}
}
