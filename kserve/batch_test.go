package kserve

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func decodeJSON(t testing.TB, body string) *Request {
	t.Helper()
	r, err := DecodeRequest([]byte(body), -1)
	if err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return r
}

func TestBatchKey(t *testing.T) {
	const base = `{"inputs":[{"name":"A","datatype":"FP32","shape":[1,3],"data":[1,2,3]},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}]}`
	for _, tc := range []struct {
		name  string
		other string
		same  bool
	}{
		{"identical", base, true},
		{"more rows", `{"inputs":[{"name":"A","datatype":"FP32","shape":[2,3],"data":[1,2,3,4,5,6]},{"name":"B","datatype":"INT32","shape":[2],"data":[1,2]}]}`, true},
		{"inputs reordered, binary form, other id", `{"id":"z","inputs":[{"name":"B","datatype":"INT32","shape":[1],"data":[9]},{"name":"A","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]}`, true},
		{"output subset and form", `{"parameters":{"binary_data_output":true,"timeout":5},"inputs":[{"name":"A","datatype":"FP32","shape":[1,3],"data":[1,2,3]},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}],"outputs":[{"name":"O","parameters":{"binary_data":false}}]}`, true},
		{"other non-batch dim", `{"inputs":[{"name":"A","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}]}`, false},
		{"other rank", `{"inputs":[{"name":"A","datatype":"FP32","shape":[1,3,1],"data":[1,2,3]},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}]}`, false},
		{"other datatype", `{"inputs":[{"name":"A","datatype":"FP64","shape":[1,3],"data":[1,2,3]},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}]}`, false},
		{"other input name", `{"inputs":[{"name":"A2","datatype":"FP32","shape":[1,3],"data":[1,2,3]},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}]}`, false},
		{"missing input", `{"inputs":[{"name":"A","datatype":"FP32","shape":[1,3],"data":[1,2,3]}]}`, false},
		{"request parameter", `{"parameters":{"priority":1},"inputs":[{"name":"A","datatype":"FP32","shape":[1,3],"data":[1,2,3]},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}]}`, false},
		{"input parameter", `{"inputs":[{"name":"A","datatype":"FP32","shape":[1,3],"data":[1,2,3],"parameters":{"x":1}},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}]}`, false},
		{"classification", `{"inputs":[{"name":"A","datatype":"FP32","shape":[1,3],"data":[1,2,3]},{"name":"B","datatype":"INT32","shape":[1],"data":[1]}],"outputs":[{"name":"O","parameters":{"classification":3}}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k1, _, ok1 := BatchKey(decodeJSON(t, base))
			k2, _, ok2 := BatchKey(decodeJSON(t, tc.other))
			if !ok1 || !ok2 {
				t.Fatalf("unbatchable: %v %v", ok1, ok2)
			}
			if (k1 == k2) != tc.same {
				t.Fatalf("keys equal = %v, want %v\n%q\n%q", k1 == k2, tc.same, k1, k2)
			}
		})
	}
	// Two classification requests with the same k share a key.
	c1 := decodeJSON(t, `{"inputs":[{"name":"A","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[{"name":"O","parameters":{"classification":3,"binary_data":true}}]}`)
	c2 := decodeJSON(t, `{"inputs":[{"name":"A","datatype":"INT8","shape":[2],"data":[1,2]}],"outputs":[{"name":"O","parameters":{"classification":3}}]}`)
	if k1, _, _ := BatchKey(c1); k1 != mustKey(t, c2) {
		t.Fatal("equal classification requests got different keys")
	}
	// The key's derivation counts the rows; BatchKey hands them back.
	if _, rows, _ := BatchKey(c2); rows != 2 {
		t.Fatalf("BatchKey rows = %d, want 2", rows)
	}
}

func mustKey(t *testing.T, r *Request) string {
	k, _, ok := BatchKey(r)
	if !ok {
		t.Fatal("unbatchable")
	}
	return k
}

func TestUnbatchable(t *testing.T) {
	for _, tc := range []struct {
		body, why string
	}{
		{`{"inputs":[{"name":"A","datatype":"INT8","shape":[4],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":4}}]}`, `input "A" is in shared memory`},
		{`{"inputs":[{"name":"A","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[{"name":"O","parameters":{"shared_memory_region":"r"}}]}`, `output "O" is requested into shared memory`},
		{`{"parameters":{"sequence_id":7},"inputs":[{"name":"A","datatype":"INT8","shape":[1],"data":[1]}]}`, `sequence`},
		{`{"parameters":{"sequence_start":true},"inputs":[{"name":"A","datatype":"INT8","shape":[1],"data":[1]}]}`, `sequence`},
		{`{"inputs":[{"name":"A","datatype":"INT8","shape":[],"data":1}]}`, `input "A": shape [] has no batch dimension`},
		{`{"inputs":[{"name":"A","datatype":"INT8","shape":[0],"data":[]}]}`, `no rows`},
		{`{"inputs":[{"name":"A","datatype":"INT8","shape":[1],"data":[1]},{"name":"B","datatype":"INT8","shape":[2],"data":[1,2]}]}`, `input "B": dimension 0 is 2, input "A" has 1`},
		{`{"inputs":[{"name":"A","datatype":"INT8","shape":[1],"data":[1]},{"name":"A","datatype":"INT8","shape":[1],"data":[1]}]}`, `input "A" appears twice`},
		{`{"inputs":[{"name":"A","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[{"name":"O"},{"name":"O"}]}`, `output "O" requested twice`},
	} {
		r := decodeJSON(t, tc.body)
		if k, _, ok := BatchKey(r); ok {
			t.Errorf("%s: batchable with key %q", tc.body, k)
		}
		if _, _, err := appendBatchKey(nil, r); err == nil || !strings.Contains(err.Error(), tc.why) {
			t.Errorf("%s: reason %v, want %q", tc.body, err, tc.why)
		}
		if _, err := Merge([]*Request{r}); err == nil || !strings.Contains(err.Error(), "cannot be batched") {
			t.Errorf("%s: Merge error %v", tc.body, err)
		}
	}
}

// TestMergeSplit follows three callers with 1, 3 and 2 rows through a
// batch: input bytes land in order, the batched request asks for the union
// of outputs in binary, and each caller gets exactly what serving it alone
// gives, byte for byte.
func TestMergeSplit(t *testing.T) {
	reqs := []*Request{
		// All outputs, JSON; input in JSON form.
		decodeJSON(t, `{"id":"a","inputs":[{"name":"X","datatype":"INT32","shape":[1,2],"data":[1,2]},{"name":"S","datatype":"BYTES","shape":[1,1],"data":["é"]}]}`),
		// X_OUT in binary only; nested JSON data.
		decodeJSON(t, `{"id":"b","inputs":[{"name":"S","datatype":"BYTES","shape":[3,1],"data":[[""],["xyz"],["日本"]]},{"name":"X","datatype":"INT32","shape":[3,2],"data":[[3,4],[5,6],[7,8]]}],"outputs":[{"name":"X_OUT","parameters":{"binary_data":true}}]}`),
		// COUNT as JSON (overriding binary_data_output) and S_OUT binary by default; no id.
		decodeJSON(t, `{"parameters":{"binary_data_output":true,"timeout":100},"inputs":[{"name":"X","datatype":"INT32","shape":[2,2],"data":[9,10,11,12]},{"name":"S","datatype":"BYTES","shape":[2,1],"data":["p","q"]}],"outputs":[{"name":"COUNT","parameters":{"binary_data":false}},{"name":"S_OUT"}]}`),
	}
	b, err := Merge(reqs)
	if err != nil {
		t.Fatal(err)
	}
	if b.Rows != 6 || fmt.Sprint(b.Callers) != "[{a 0 1} {b 1 3} { 4 2}]" {
		t.Fatalf("rows %d callers %v", b.Rows, b.Callers)
	}
	body, hl := b.AppendBody(nil)
	if len(body) != b.BodyLen() {
		t.Fatalf("BodyLen %d, body %d", b.BodyLen(), len(body))
	}
	wantHeader := `{"parameters":{"binary_data_output":true,"timeout":100},"inputs":[` +
		`{"name":"X","datatype":"INT32","shape":[6,2],"parameters":{"binary_data_size":48}},` +
		`{"name":"S","datatype":"BYTES","shape":[6,1],"parameters":{"binary_data_size":37}}]}`
	if string(body[:hl]) != wantHeader {
		t.Fatalf("batched header\n%s\nwant\n%s", body[:hl], wantHeader)
	}
	wantBin := i32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	for _, s := range []string{"é", "", "xyz", "日本", "p", "q"} {
		wantBin = AppendBytesElement(wantBin, []byte(s))
	}
	if !bytes.Equal(body[hl:], wantBin) {
		t.Fatalf("batched data\n%x\nwant\n%x", body[hl:], wantBin)
	}

	got, err := serveBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	wantForms := []string{
		`a: S_OUT json [1 1], X_OUT json [1 2], COUNT json [1 1]`,
		`b: X_OUT bin [3 2]`,
		`: COUNT json [2 1], S_OUT bin [2 1]`,
	}
	for i, r := range got {
		var desc []string
		for _, o := range r.Outputs {
			form := "json"
			if o.Binary {
				form = "bin"
			}
			desc = append(desc, fmt.Sprintf("%s %s %v", o.Name, form, o.Shape))
		}
		if d := r.ID + ": " + strings.Join(desc, ", "); d != wantForms[i] {
			t.Errorf("caller %d: %s, want %s", i, d, wantForms[i])
		}
		alone, err := serve(reqs[i])
		if err != nil {
			t.Fatal(err)
		}
		assertSameWire(t, r, alone)
	}
	// Split slices the batched response instead of copying.
	resp, _ := serve(decodeBatch(t, b))
	parts, err := b.Split(resp)
	if err != nil {
		t.Fatal(err)
	}
	xOut := slices.IndexFunc(resp.Outputs, func(t Tensor) bool { return t.Name == "X_OUT" })
	if &parts[1].Outputs[0].Data[0] != &resp.Outputs[xOut].Data[2*4*1] {
		t.Error("caller b's X_OUT is not a slice of the batched output")
	}
}

func decodeBatch(t *testing.T, b *Batch) *Request {
	t.Helper()
	body, hl := b.AppendBody(nil)
	r, err := DecodeRequest(body, hl)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func assertSameWire(t testing.TB, got, want *Response) {
	t.Helper()
	g, ghl, err1 := AppendResponse(nil, got)
	w, whl, err2 := AppendResponse(nil, want)
	if err1 != nil || err2 != nil {
		t.Fatalf("encode: %v, %v", err1, err2)
	}
	if ghl != whl || !bytes.Equal(g, w) {
		t.Fatalf("split response (header %d)\n%q\nwant (header %d)\n%q", ghl, g, whl, w)
	}
}

func TestMergeErrors(t *testing.T) {
	a := decodeJSON(t, `{"id":"a","inputs":[{"name":"X","datatype":"INT32","shape":[1,2],"data":[1,2]}]}`)
	c := decodeJSON(t, `{"id":"c","inputs":[{"name":"X","datatype":"INT32","shape":[1,3],"data":[1,2,3]}]}`)
	if _, err := Merge(nil); err == nil {
		t.Error("Merge(nil) succeeded")
	}
	if _, err := Merge([]*Request{a, c}); err == nil || !strings.Contains(err.Error(), `request 1 (id "c") differs from request 0`) {
		t.Errorf("Merge of different shapes: %v", err)
	}
	bad := &Request{Inputs: []Tensor{{Name: "X", Datatype: Int32, Shape: []int64{1, 2}, Data: make([]byte, 5)}}}
	if _, err := Merge([]*Request{a, bad}); err == nil || !strings.Contains(err.Error(), `input "X": shape [1,2] of INT32 needs 8 bytes, data has 5`) {
		t.Errorf("Merge of bad data: %v", err)
	}
}

// MergeSameKey trusts its caller on keys, but a broken promise is an
// error, not a panic.
func TestMergeSameKeyBrokenPromise(t *testing.T) {
	a := decodeJSON(t, `{"id":"a","inputs":[{"name":"X","datatype":"INT32","shape":[1,2],"data":[1,2]}]}`)
	for _, tc := range []struct {
		name string
		r    *Request
		want string
	}{
		{"no inputs", &Request{ID: "b"}, `request 1 (id "b") cannot be batched: request has no inputs`},
		{"no batch dimension", &Request{ID: "b", Inputs: []Tensor{{Name: "X", Datatype: Int32}}}, `shape [] has no batch dimension`},
		{"no rows", &Request{ID: "b", Inputs: []Tensor{{Name: "X", Datatype: Int32, Shape: []int64{0, 2}}}}, `request has no rows`},
		{"another input", &Request{ID: "b", Inputs: []Tensor{{Name: "Y", Datatype: Int32, Shape: []int64{1, 2}, Data: make([]byte, 8)}}}, `request 1 (id "b") has no input "X"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := MergeSameKey([]*Request{a, tc.r}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("MergeSameKey = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// The batched request's parameters are the first caller's, with
// binary_data_output true and the smallest timeout any caller set (none
// when none did); each output it asks for is in binary form, with the
// other options of the first caller naming it.
func TestMergeParameters(t *testing.T) {
	req := func(params, outputs string) *Request {
		return decodeJSON(t, `{"parameters":`+params+`,"inputs":[{"name":"X","datatype":"INT32","shape":[1],"data":[1]}]`+outputs+`}`)
	}
	for _, tc := range []struct {
		name string
		reqs []*Request
		want string // the batched header's start, or its end (outputs)
	}{
		{"no parameters", []*Request{req(`{}`, ``), req(`{}`, ``)},
			`{"parameters":{"binary_data_output":true},`},
		{"first caller's, JSON output turned binary", []*Request{req(`{"binary_data_output":false,"x":"y"}`, ``), req(`{"binary_data_output":false,"x":"y"}`, ``)},
			`{"parameters":{"binary_data_output":true,"x":"y"},`},
		{"smallest timeout", []*Request{req(`{"timeout":300}`, ``), req(`{}`, ``), req(`{"timeout":200}`, ``)},
			`{"parameters":{"binary_data_output":true,"timeout":200},`},
		{"the first caller's timeout not a number", []*Request{req(`{"timeout":"soon"}`, ``), req(`{}`, ``)},
			`{"parameters":{"binary_data_output":true},`},
		{"a timeout of 0 is none", []*Request{req(`{"timeout":0}`, ``), req(`{"timeout":200}`, ``)},
			`{"parameters":{"binary_data_output":true,"timeout":200},`},
		{"a uint64 timeout saturates", []*Request{req(`{"timeout":18446744073709551615}`, ``), req(`{}`, ``)},
			`{"parameters":{"binary_data_output":true,"timeout":9223372036854775807},`},
		{"outputs in binary, union in order", []*Request{
			req(`{}`, `,"outputs":[{"name":"B","parameters":{"binary_data":false,"classification":2}}]`),
			req(`{}`, `,"outputs":[{"name":"A"},{"name":"B","parameters":{"binary_data":true,"classification":2}}]`)},
			`"outputs":[{"name":"B","parameters":{"binary_data":true,"classification":2}},{"name":"A","parameters":{"binary_data":true}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := MergeSameKey(tc.reqs)
			if err != nil {
				t.Fatal(err)
			}
			if h := string(b.header); !strings.HasPrefix(h, tc.want) && !strings.HasSuffix(h, tc.want) {
				t.Errorf("header %s\nwant it to begin or end with %s", h, tc.want)
			}
		})
	}
}

// appendParamsEdited writes what appendParameters writes for the edited
// copy of p, leaving p as it was.
func TestAppendParamsEdited(t *testing.T) {
	p := Parameters{"b": true, "a": int64(3), ParamBinaryDataSize: int64(8), "c": "x"}
	for _, tc := range []struct {
		name  string
		edits []paramEdit
		want  string
	}{
		{"none", nil, `{"a":3,"b":true,"c":"x"}`},
		{"drop one", []paramEdit{{key: "b"}}, `{"a":3,"c":"x"}`},
		{"drop absent", []paramEdit{{key: "z"}}, `{"a":3,"b":true,"c":"x"}`},
		{"set present", []paramEdit{{"a", int64(1)}}, `{"a":1,"b":true,"c":"x"}`},
		{"set absent, sorted in", []paramEdit{{"bb", false}}, `{"a":3,"b":true,"bb":false,"c":"x"}`},
		{"drop and set", []paramEdit{{key: "a"}, {"c", "y"}, {"0", int64(0)}}, `{"0":0,"b":true,"c":"y"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := appendParamsEdited(nil, p, -1, tc.edits...)
			if err != nil || string(got) != tc.want {
				t.Errorf("got %s, %v; want %s", got, err, tc.want)
			}
			if len(p) != 4 || p["a"] != int64(3) || p["b"] != true {
				t.Errorf("p changed: %v", p)
			}
		})
	}
	if _, err := appendParamsEdited(nil, nil, -1, paramEdit{"x", struct{}{}}); err == nil || !strings.Contains(err.Error(), `parameter "x"`) {
		t.Errorf("an edit with a value JSON cannot hold: %v", err)
	}
}

func TestSplitErrors(t *testing.T) {
	a := decodeJSON(t, `{"id":"a","inputs":[{"name":"X","datatype":"INT32","shape":[1,2],"data":[1,2]}],"outputs":[{"name":"Y"}]}`)
	b := decodeJSON(t, `{"id":"b","inputs":[{"name":"X","datatype":"INT32","shape":[2,2],"data":[1,2,3,4]}]}`)
	batch, err := Merge([]*Request{a, b})
	if err != nil {
		t.Fatal(err)
	}
	y := func(shape []int64, data []byte) Tensor {
		return Tensor{Name: "Y", Datatype: Int32, Shape: shape, Data: data}
	}
	for _, tc := range []struct {
		name string
		out  []Tensor
		want string
	}{
		{"missing output", []Tensor{{Name: "Z", Datatype: Int8, Shape: []int64{3}, Data: []byte{1, 2, 3}}}, `split: output "Y" requested by caller 0 (id "a") is missing from the batched response`},
		{"wrong rows", []Tensor{y([]int64{2, 1}, i32(1, 2))}, `split: output "Y": shape [2,1] does not have the batch's 3 rows in dimension 0`},
		{"scalar", []Tensor{y(nil, i32(1))}, `shape [] does not have the batch's 3 rows`},
		{"short data", []Tensor{y([]int64{3}, i32(1, 2))}, `split: output "Y": shape [3] of INT32 needs 12 bytes, data has 8`},
		{"broken bytes", []Tensor{{Name: "Y", Datatype: Bytes, Shape: []int64{3}, Data: []byte{1, 0, 0, 0, 'a', 9, 0, 0, 0}}}, `BYTES element 1: length 9 runs past the end`},
		{"shared memory", []Tensor{{Name: "Y", Datatype: Int32, Shape: []int64{3}, Parameters: Parameters{ParamSharedMemRegion: "r"}}}, `is in shared memory`},
		// Found by FuzzSplit: caller 0 asked for Y by name, which of the two?
		{"output twice", []Tensor{y([]int64{3}, i32(1, 2, 3)), y([]int64{3}, i32(4, 5, 6))}, `split: output "Y" appears twice in the answer`},
	} {
		_, err := batch.Split(&Response{Outputs: tc.out})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// randomModel draws a request signature: 1-3 inputs of random datatypes
// and non-batch shapes.
type randomInput struct {
	name  string
	dt    Datatype
	shape []int64 // without the batch dimension
}

func randomModel(rng *rand.Rand) []randomInput {
	ins := make([]randomInput, 1+rng.IntN(3))
	for i := range ins {
		dims := make([]int64, rng.IntN(3))
		for d := range dims {
			dims[d] = int64(rng.IntN(4)) // zero-size dimensions included
		}
		ins[i] = randomInput{name: fmt.Sprintf("IN%d", i), dt: Datatypes[rng.IntN(len(Datatypes))], shape: dims}
	}
	return ins
}

var outputNames = func(ins []randomInput) []string {
	names := []string{"COUNT"}
	for _, in := range ins {
		names = append(names, in.name+"_OUT")
	}
	return names
}

// randomRequest builds a request for the model and returns its wire body,
// with random rows, data, wire form per input, id, input order and output
// selection.
func randomRequest(rng *rand.Rand, model []randomInput, id string) ([]byte, int) {
	rows := int64(1 + rng.IntN(3))
	r := &Request{ID: id}
	if rng.IntN(3) == 0 {
		r.ID = ""
	}
	if rng.IntN(2) == 0 {
		r.Parameters = Parameters{ParamBinaryDataOutput: rng.IntN(2) == 0}
	}
	for _, k := range rng.Perm(len(model)) {
		in := model[k]
		shape := append([]int64{rows}, in.shape...)
		n, _ := ElementCount(shape)
		t := Tensor{Name: in.name, Datatype: in.dt, Shape: shape, Binary: rng.IntN(2) == 0}
		if in.dt == Bytes {
			for range n {
				t.Data = AppendBytesElement(t.Data, randomString(rng, t.Binary))
			}
		} else {
			t.Data = make([]byte, n*int64(in.dt.Size()))
			for i := range t.Data {
				t.Data[i] = byte(rng.Uint32())
			}
			if in.dt == Bool {
				for i := range t.Data {
					t.Data[i] &= 1
				}
			}
		}
		r.Inputs = append(r.Inputs, t)
	}
	if rng.IntN(2) == 0 {
		for _, name := range outputNames(model) {
			if rng.IntN(2) == 0 {
				o := RequestedOutput{Name: name}
				if rng.IntN(2) == 0 {
					o.Parameters = Parameters{ParamBinaryData: rng.IntN(2) == 0}
				}
				r.Outputs = append(r.Outputs, o)
			}
		}
	}
	body, hl, err := AppendRequest(nil, r, false)
	if err != nil {
		panic(err)
	}
	return body, hl
}

// randomString returns empty, ASCII, multi-byte UTF-8 or (binary form
// only) arbitrary bytes.
func randomString(rng *rand.Rand, binaryOK bool) []byte {
	switch rng.IntN(4) {
	case 0:
		return nil
	case 1:
		return []byte("ascii \"quoted\" \\ \n")[:rng.IntN(19)]
	case 2:
		return []byte("héllo wörld 日本語 😀")
	}
	if !binaryOK {
		return []byte{0x7f, 'z'}
	}
	b := make([]byte, rng.IntN(6))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestRoundTripProperty: for random requests of random models in random
// wire forms, split(execute(merge(reqs))) gives each caller the very bytes
// executing its request alone gives.
func TestRoundTripProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	iterations := 400
	if testing.Short() {
		iterations = 50
	}
	for it := range iterations {
		model := randomModel(rng)
		reqs := make([]*Request, 1+rng.IntN(8))
		for i := range reqs {
			body, hl := randomRequest(rng, model, fmt.Sprintf("r%d-%d", it, i))
			r, err := DecodeRequest(body, hl)
			if err != nil {
				t.Fatalf("iteration %d: generated request does not decode: %v\n%q", it, err, body)
			}
			reqs[i] = r
		}
		b, err := Merge(reqs)
		if err != nil {
			t.Fatalf("iteration %d: merge: %v", it, err)
		}
		trusted, err := MergeSameKey(reqs)
		if err != nil {
			t.Fatalf("iteration %d: MergeSameKey: %v", it, err)
		}
		want, _ := b.AppendBody(nil)
		if body, _ := trusted.AppendBody(nil); !bytes.Equal(body, want) {
			t.Fatalf("iteration %d: MergeSameKey's body differs from Merge's", it)
		}
		got, err := serveBatch(b)
		if err != nil {
			t.Fatalf("iteration %d: %v", it, err)
		}
		for i, r := range reqs {
			alone, err := serve(r)
			if err != nil {
				t.Fatal(err)
			}
			assertSameWire(t, got[i], alone)
		}
	}
}

// HalfInJSON: FP16 and BF16 values as JSON, in an input or in an output
// asked for, are what Triton refuses; binary or shared-memory ones are not.
func TestHalfInJSON(t *testing.T) {
	in := func(dt Datatype, binary bool, params Parameters) Tensor {
		return Tensor{Name: "x", Datatype: dt, Shape: []int64{1}, Data: []byte{0, 0}, Binary: binary, Parameters: params}
	}
	for _, tc := range []struct {
		name string
		r    Request
		half []string
		want bool
	}{
		{"FP32 JSON", Request{Inputs: []Tensor{in(FP32, false, nil)}}, nil, false},
		{"FP16 JSON", Request{Inputs: []Tensor{in(FP16, false, nil)}}, nil, true},
		{"BF16 JSON", Request{Inputs: []Tensor{in(BF16, false, nil)}}, nil, true},
		{"FP16 binary", Request{Inputs: []Tensor{in(FP16, true, nil)}}, nil, false},
		{"FP16 shared memory", Request{Inputs: []Tensor{in(FP16, false, Parameters{ParamSharedMemRegion: "r"})}}, nil, false},
		{"half output, all in JSON", Request{Inputs: []Tensor{in(FP32, true, nil)}}, []string{"y"}, true},
		{"half output in binary", Request{Inputs: []Tensor{in(FP32, true, nil)}, Parameters: Parameters{ParamBinaryDataOutput: true}}, []string{"y"}, false},
		{"half output not asked for", Request{Inputs: []Tensor{in(FP32, true, nil)}, Outputs: []RequestedOutput{{Name: "z"}}}, []string{"y"}, false},
		{"half output asked for in binary", Request{Inputs: []Tensor{in(FP32, true, nil)}, Outputs: []RequestedOutput{{Name: "y", Parameters: Parameters{ParamBinaryData: true}}}}, []string{"y"}, false},
	} {
		if got := tc.r.HalfInJSON(tc.half); got != tc.want {
			t.Errorf("%s: HalfInJSON %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestHalfOutputs(t *testing.T) {
	mc := ModelConfig{Output: []ConfigOutput{
		{Name: "a", DataType: "TYPE_FP32"}, {Name: "b", DataType: "TYPE_FP16"}, {Name: "c", DataType: "TYPE_BF16"}, {Name: "d", DataType: "TYPE_STRING"},
	}}
	if got := mc.HalfOutputs(); !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("HalfOutputs %v, want [b c]", got)
	}
}
