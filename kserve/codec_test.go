package kserve

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// datatypeCases pin each datatype's JSON text to its raw little-endian bytes,
// both ways: decoding `data` must give `raw`, and encoding `raw` as JSON
// must give `encoded` (the canonical flat form).
var datatypeCases = []struct {
	dt      Datatype
	shape   string
	data    string // JSON "data" as a client may send it
	raw     string // hex
	encoded string // JSON "data" as the codec writes it
}{
	{Bool, "[3]", "[true,false,true]", "010001", "[true,false,true]"},
	{Uint8, "[3]", "[0,128,255]", "0080ff", "[0,128,255]"},
	{Uint16, "[2]", "[1,65535]", "0100ffff", "[1,65535]"},
	{Uint32, "[2]", "[1,4294967295]", "01000000ffffffff", "[1,4294967295]"},
	{Uint64, "[2]", "[0,18446744073709551615]", "0000000000000000ffffffffffffffff", "[0,18446744073709551615]"},
	{Int8, "[3]", "[-128,-1,127]", "80ff7f", "[-128,-1,127]"},
	{Int16, "[3]", "[-32768,0,32767]", "00800000ff7f", "[-32768,0,32767]"},
	{Int32, "[2]", "[-2147483648,2147483647]", "00000080ffffff7f", "[-2147483648,2147483647]"},
	{Int64, "[2]", "[-9223372036854775808,9223372036854775807]", "0000000000000080ffffffffffffff7f", "[-9223372036854775808,9223372036854775807]"},
	// Floats are written as Triton writes them (rapidjson): FP32 widened to a
	// double in its shortest form, always with a point or an exponent (as
	// captured from tritonserver 2.51: 4.0, 1.2999999523162842, 1e-7, 1e21).
	// FP16 vectors from Python's struct.pack('<e', x).
	{FP16, "[4]", "[1, -2.0, 0.1, 65504]", "003c00c0662eff7b", "[1.0,-2.0,0.1,65500.0]"},
	{FP16, "[3]", "[5.960464477539063e-08, 0.333, -0]", "01005435" + "0080", "[6e-8,0.333,-0.0]"},
	{BF16, "[3]", "[1, -2, 0.1]", "803f00c0cd3d", "[1.0,-2.0,0.1]"},
	{FP32, "[4]", "[0.1, 1e-45, -0.0, 3.4028234663852886e38]", "cdcccc3d" + "01000000" + "00000080" + "ffff7f7f", "[0.10000000149011612,1.401298464324817e-45,-0.0,3.4028234663852887e38]"},
	{FP32, "[3]", "[NaN, Infinity, -Infinity]", "0000c07f" + "0000807f" + "000080ff", "[NaN,Infinity,-Infinity]"},
	{FP64, "[3]", "[0.1, -1e300, 5e-324]", "9a9999999999b93f" + "9c7500883ce437fe" + "0100000000000000", "[0.1,-1e300,5e-324]"},
	{Bytes, "[3]", `["", "héllo", "\u65e5\ud83d\ude00\n"]`, "00000000" + "06000000" + hex.EncodeToString([]byte("héllo")) + "08000000" + hex.EncodeToString([]byte("日😀\n")), `["","héllo","日😀\n"]`},
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDatatypesJSON(t *testing.T) {
	for _, tc := range datatypeCases {
		t.Run(string(tc.dt)+tc.shape, func(t *testing.T) {
			raw := mustHex(t, tc.raw)
			body := fmt.Sprintf(`{"inputs":[{"name":"x","datatype":%q,"shape":%s,"data":%s}]}`, tc.dt, tc.shape, tc.data)
			r, err := DecodeRequest([]byte(body), -1)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			in := r.Inputs[0]
			if in.Binary || in.Datatype != tc.dt || !bytes.Equal(in.Data, raw) {
				t.Fatalf("decoded %s binary=%v data %x, want %x", in.Datatype, in.Binary, in.Data, raw)
			}
			// Encode as a JSON response output and check the canonical text.
			resp := &Response{ModelName: "m", Outputs: []Tensor{{Name: "y", Datatype: tc.dt, Shape: in.Shape, Data: raw}}}
			out, hl, err := AppendResponse(nil, resp)
			if err != nil || hl != -1 {
				t.Fatalf("encode: headerLen %d, %v", hl, err)
			}
			want := fmt.Sprintf(`{"model_name":"m","model_version":"","outputs":[{"name":"y","datatype":"%s","shape":%s,"data":%s}]}`, tc.dt, tc.shape, tc.encoded)
			if string(out) != want {
				t.Fatalf("encoded\n%s\nwant\n%s", out, want)
			}
			// And the encoded text decodes back to the same bytes.
			back, err := DecodeResponse(out, -1)
			if err != nil || !bytes.Equal(back.Outputs[0].Data, raw) {
				t.Fatalf("re-decoded %x (%v), want %x", back.Outputs[0].Data, err, raw)
			}
		})
	}
}

func TestDatatypesBinary(t *testing.T) {
	for _, tc := range datatypeCases {
		t.Run(string(tc.dt)+tc.shape, func(t *testing.T) {
			raw := mustHex(t, tc.raw)
			header := fmt.Sprintf(`{"inputs":[{"name":"x","datatype":%q,"shape":%s,"parameters":{"binary_data_size":%d}}],"outputs":[{"name":"y","parameters":{"binary_data":true}}]}`, tc.dt, tc.shape, len(raw))
			body := append([]byte(header), raw...)
			r, err := DecodeRequest(body, len(header))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			in := r.Inputs[0]
			if !in.Binary || !bytes.Equal(in.Data, raw) {
				t.Fatalf("decoded binary=%v data %x, want %x", in.Binary, in.Data, raw)
			}
			if len(raw) > 0 && &in.Data[0] != &body[len(header)] {
				t.Fatal("binary data was copied; it must alias the body")
			}
			if len(in.Parameters) != 0 {
				t.Fatalf("binary_data_size leaked into parameters: %v", in.Parameters)
			}
			// Re-encode in binary form: the same header layout and bytes.
			out, hl, err := AppendRequest(nil, r, true)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out[hl:], raw) {
				t.Fatalf("binary section %x, want %x", out[hl:], raw)
			}
			again, err := DecodeRequest(out, hl)
			if err != nil || !bytes.Equal(again.Inputs[0].Data, raw) || !again.OutputBinary("y") {
				t.Fatalf("round trip: %v", err)
			}
			// The response side: a binary output.
			resp := &Response{ModelName: "m", ModelVersion: "1", ID: "q", Outputs: []Tensor{{Name: "y", Datatype: tc.dt, Shape: in.Shape, Data: raw, Binary: true}}}
			rb, rhl, err := AppendResponse(nil, resp)
			if err != nil {
				t.Fatal(err)
			}
			wantHeader := fmt.Sprintf(`{"model_name":"m","model_version":"1","id":"q","outputs":[{"name":"y","datatype":"%s","shape":%s,"parameters":{"binary_data_size":%d}}]}`, tc.dt, tc.shape, len(raw))
			if string(rb[:rhl]) != wantHeader || !bytes.Equal(rb[rhl:], raw) {
				t.Fatalf("response\n%q\nwant header\n%s", rb, wantHeader)
			}
		})
	}
}

func TestMixedFormsAndNesting(t *testing.T) {
	// INPUT0 binary, INPUT1 nested JSON, INPUT2 binary BYTES with an empty
	// and a non-ASCII element; members in unusual order; JSON parameters
	// that must pass through.
	b0 := mustHex(t, "0100000002000000030000000400000005000000"+"06000000")
	b2 := AppendBytesElement(AppendBytesElement(nil, nil), []byte("ÿ€"))
	header := fmt.Sprintf(`{
	  "outputs": [{"name": "OUT", "parameters": {"binary_data": false}}],
	  "inputs": [
	    {"parameters": {"binary_data_size": %d}, "shape": [2, 3], "name": "INPUT0", "datatype": "INT32"},
	    {"data": [[[1.5, 2], [3, 4]], [[5, 6], [7, -8.25]]], "name": "INPUT1", "shape": [2, 2, 2], "datatype": "FP32", "parameters": {"custom": "kept", "n": 7}},
	    {"name": "INPUT2", "datatype": "BYTES", "shape": [1, 2], "parameters": {"binary_data_size": %d}}
	  ],
	  "id": "req-1", "model_name": "ignored",
	  "parameters": {"binary_data_output": true, "priority": 2, "extra": {"a": [1, null]}}
	}`, len(b0), len(b2))
	body := append(append([]byte(header), b0...), b2...)
	r, err := DecodeRequest(body, len(header))
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != "req-1" || len(r.Inputs) != 3 {
		t.Fatalf("got %+v", r)
	}
	if got, _ := r.Inputs[0].Int32s(); fmt.Sprint(got) != "[1 2 3 4 5 6]" || !r.Inputs[0].Binary {
		t.Errorf("INPUT0 = %v", got)
	}
	if got, _ := r.Inputs[1].Float32s(); fmt.Sprint(got) != "[1.5 2 3 4 5 6 7 -8.25]" || r.Inputs[1].Binary {
		t.Errorf("INPUT1 = %v", got)
	}
	if el, _ := r.Inputs[2].BytesElements(); len(el) != 2 || len(el[0]) != 0 || string(el[1]) != "ÿ€" {
		t.Errorf("INPUT2 = %q", el)
	}
	if v, _ := r.Inputs[1].Parameters.String("custom"); v != "kept" {
		t.Errorf("input parameters = %v", r.Inputs[1].Parameters)
	}
	if v, _ := r.Parameters.Int("priority"); v != 2 || string(r.Parameters["extra"].(RawJSON)) != `{"a": [1, null]}` {
		t.Errorf("request parameters = %v", r.Parameters)
	}
	if r.OutputBinary("OUT") || !r.OutputBinary("OTHER") {
		t.Error("binary_data on an output must override binary_data_output")
	}
	// Re-encoding keeps forms and unknown parameters.
	out, hl, err := AppendRequest(nil, r, false)
	if err != nil {
		t.Fatal(err)
	}
	wantHeader := `{"id":"req-1","parameters":{"binary_data_output":true,"extra":{"a": [1, null]},"priority":2},"inputs":[` +
		`{"name":"INPUT0","datatype":"INT32","shape":[2,3],"parameters":{"binary_data_size":24}},` +
		`{"name":"INPUT1","datatype":"FP32","shape":[2,2,2],"parameters":{"custom":"kept","n":7},"data":[1.5,2.0,3.0,4.0,5.0,6.0,7.0,-8.25]},` +
		`{"name":"INPUT2","datatype":"BYTES","shape":[1,2],"parameters":{"binary_data_size":13}}],` +
		`"outputs":[{"name":"OUT","parameters":{"binary_data":false}}]}`
	if string(out[:hl]) != wantHeader {
		t.Fatalf("header\n%s\nwant\n%s", out[:hl], wantHeader)
	}
	if !bytes.Equal(out[hl:], append(append([]byte{}, b0...), b2...)) {
		t.Fatalf("binary section %x", out[hl:])
	}
	var check map[string]any
	if err := json.Unmarshal(out[:hl], &check); err != nil {
		t.Fatalf("header is not valid JSON: %v", err)
	}
}

func TestScalarAndEmptyData(t *testing.T) {
	for _, tc := range []struct {
		body string
		want string
	}{
		{`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":7}]}`, "07"},
		{`{"inputs":[{"name":"x","datatype":"INT8","shape":[0,4],"data":[]}]}`, ""},
		{`{"inputs":[{"name":"x","datatype":"INT8","shape":[2,0],"data":[[],[]]}]}`, ""},
		{`{"inputs":[{"name":"x","datatype":"BYTES","shape":[],"data":"a"}]}`, "0100000061"},
		{" \n{\"inputs\":[{\"name\":\"x\",\"datatype\":\"UINT8\",\"shape\":[1],\"data\":[-0]}]}\t ", "00"},
	} {
		r, err := DecodeRequest([]byte(tc.body), -1)
		if err != nil {
			t.Errorf("%s: %v", tc.body, err)
			continue
		}
		if got := hex.EncodeToString(r.Inputs[0].Data); got != tc.want {
			t.Errorf("%s: data %s, want %s", tc.body, got, tc.want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	bin := func(header string, data string) ([]byte, int) {
		return append([]byte(header), data...), len(header)
	}
	in := func(fields string) []byte {
		return []byte(`{"inputs":[{"name":"INPUT0",` + fields + `}]}`)
	}
	type tc struct {
		name      string
		body      []byte
		headerLen int
		want      string // substring of the error
	}
	cases := []tc{
		{"element count short", in(`"datatype":"INT32","shape":[2,16],"data":[` + strings.Repeat("1,", 30) + `1]`), -1, `input "INPUT0": shape [2,16] needs 32 elements, data has 31`},
		{"element count long", in(`"datatype":"INT32","shape":[2],"data":[1,2,3]`), -1, `input "INPUT0": shape [2] needs 2 elements, data has 3`},
		{"unknown datatype", in(`"datatype":"FP8","shape":[1],"data":[1]`), -1, `input "INPUT0": unknown datatype "FP8"`},
		{"lower-case datatype", in(`"datatype":"fp32","shape":[1],"data":[1]`), -1, `unknown datatype "fp32"`},
		{"missing datatype", in(`"shape":[1],"data":[1]`), -1, `input "INPUT0": missing "datatype"`},
		{"missing shape", in(`"datatype":"INT8","data":[1]`), -1, `input "INPUT0": missing "shape"`},
		{"missing name", []byte(`{"inputs":[{"datatype":"INT8","shape":[1],"data":[1]}]}`), -1, `input 0: missing "name"`},
		{"no data", in(`"datatype":"INT8","shape":[1]`), -1, `input "INPUT0": needs exactly one of "data"`},
		{"data and binary", in(`"datatype":"INT8","shape":[1],"data":[1],"parameters":{"binary_data_size":1}`), -1, `has 2`},
		{"no inputs", []byte(`{"id":"x"}`), -1, `request has no "inputs"`},
		{"negative dim", in(`"datatype":"INT8","shape":[-1],"data":[1]`), -1, `input "INPUT0" "shape": dimension -1 is not a non-negative integer`},
		{"fractional dim", in(`"datatype":"INT8","shape":[1.5],"data":[1]`), -1, `dimension 1.5 is not a non-negative integer`},
		{"overflowing shape", in(`"datatype":"INT8","shape":[4294967296,4294967296,4294967296],"data":[1]`), -1, `input "INPUT0": shape [4294967296,4294967296,4294967296] has too many elements`},
		{"huge shape small data", in(`"datatype":"FP64","shape":[1000000000000],"data":[1,2]`), -1, `shape [1000000000000] needs 1000000000000 elements, data has 2`},
		{"too many inputs", []byte(`{"inputs":[` + strings.Repeat(`{"name":"x","datatype":"INT8","shape":[1],"data":[1]},`, 1024) + `{"name":"y","datatype":"INT8","shape":[1],"data":[1]}]}`), -1, `more than 1024 inputs`},
		{"too many requested outputs", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[` + strings.Repeat(`{"name":"o"},`, 1024) + `{"name":"p"}]}`), -1, `more than 1024 requested outputs`},
		{"too many dims", in(`"datatype":"INT8","shape":[` + strings.Repeat("1,", 40) + `1],"data":[1]`), -1, `more than 32 dimensions`},
		{"too many request parameters", []byte(`{"parameters":{` + strings.Repeat(`"p":1,`, 1024) + `"q":1},"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}]}`), -1, `more than 1024 parameters`},
		{"too many tensor parameters", in(`"datatype":"INT8","shape":[1],"data":[1],"parameters":{` + strings.Repeat(`"p":1,`, 1024) + `"q":1}`), -1, `more than 1024 parameters`},
		{"int out of range", in(`"datatype":"UINT8","shape":[2],"data":[1,256]`), -1, `input "INPUT0": data element 1: 256 is out of range for UINT8`},
		{"negative unsigned", in(`"datatype":"UINT32","shape":[1],"data":[-1]`), -1, `-1 is out of range for UINT32`},
		{"int8 underflow", in(`"datatype":"INT8","shape":[1],"data":[-129]`), -1, `-129 is out of range for INT8`},
		{"int64 overflow", in(`"datatype":"INT64","shape":[1],"data":[9223372036854775808]`), -1, `out of range for INT64`},
		{"uint64 overflow", in(`"datatype":"UINT64","shape":[1],"data":[18446744073709551616]`), -1, `out of range for UINT64`},
		{"fraction for int", in(`"datatype":"INT32","shape":[1],"data":[1.0]`), -1, `data element 0: 1.0 is not an integer, as INT32 needs`},
		{"fp32 overflow", in(`"datatype":"FP32","shape":[1],"data":[1e39]`), -1, `1e39 is out of range for FP32`},
		{"fp16 overflow", in(`"datatype":"FP16","shape":[1],"data":[65520]`), -1, `65520 is out of range for FP16`},
		{"string for number", in(`"datatype":"FP32","shape":[1],"data":["1"]`), -1, `data element 0`},
		{"number for bool", in(`"datatype":"BOOL","shape":[1],"data":[1]`), -1, `expected true or false`},
		{"number for bytes", in(`"datatype":"BYTES","shape":[1],"data":[1]`), -1, `expected a string`},
		{"invalid utf8 bytes", in("\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"a\xff\"]"), -1, `invalid UTF-8 in string`},
		{"lone surrogate", in(`"datatype":"BYTES","shape":[1],"data":["\ud800"]`), -1, `unpaired UTF-16 surrogate`},
		{"bad escape", in(`"datatype":"BYTES","shape":[1],"data":["\q"]`), -1, `invalid escape`},
		{"control char", in("\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"a\nb\"]"), -1, `control character`},
		{"trailing comma", in(`"datatype":"INT8","shape":[2],"data":[1,2,]`), -1, `trailing ','`},
		{"truncated json", []byte(`{"inputs":[{"name":"INPUT0","datatype":"INT8","shape":[2],"data":[1,`), -1, `input "INPUT0": data element 1: invalid JSON at offset 68: expected a number, found end of input`},
		{"leading zero", in(`"datatype":"INT32","shape":[2],"data":[01,2]`), -1, `expected ',' or ']' in array, found '1'`},
		{"long integer", in(`"datatype":"UINT64","shape":[1],"data":[00000000000000000001]`), -1, `expected ',' or ']' in array`},
		{"duplicate member", in(`"datatype":"INT32","shape":[1],"data":[1],"shape":[1]`), -1, `input "INPUT0": duplicate "shape"`},
		{"data before datatype", []byte(`{"inputs":[{"name":"INPUT0","data":[1,2,3],"datatype":"INT8","shape":[2]}]}`), -1, `shape [2] needs 2 elements, data has 3`},
		{"trailing garbage", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}]}x`), -1, `unexpected 'x' after the JSON object`},
		{"not an object", []byte(`[1]`), -1, `expected an object`},
		{"empty body", nil, -1, `expected an object, found end of input`},
		{"deep nesting", in(`"datatype":"INT8","shape":[1],"data":` + strings.Repeat("[", 100) + "1" + strings.Repeat("]", 100)), -1, `nesting deeper than 64 levels`},
		{"deep nesting in parameters", []byte(`{"parameters":{"p":` + strings.Repeat("[", 100000) + `}}`), -1, `nesting deeper than 64 levels`},
		{"id not a string", []byte(`{"id":5,"inputs":[]}`), -1, `request "id": invalid JSON at offset 6: expected a string`},
		{"binary_data_output not bool", []byte(`{"parameters":{"binary_data_output":1},"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}]}`), -1, `"binary_data_output" must be true or false`},
		{"classification negative", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[{"name":"o","parameters":{"classification":-1}}]}`), -1, `requested output "o": parameter "classification" must be a non-negative integer`},
		{"output without name", []byte(`{"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}],"outputs":[{}]}`), -1, `requested output 0: missing "name"`},
	}
	h := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}}]}`
	b, _ := bin(h, "12345678")
	cases = append(cases, tc{"header length past body", b, len(b) + 1, fmt.Sprintf("Inference-Header-Content-Length %d exceeds the body length %d", len(b)+1, len(b))})
	b, n := bin(h, "1234567")
	cases = append(cases, tc{"binary truncated", b, n, `input "INPUT0": binary_data_size 8 runs past the end of the body (7 bytes of binary data left)`})
	b, n = bin(h, "123456789")
	cases = append(cases, tc{"binary surplus", b, n, `body has 1 bytes of binary data beyond the binary_data_size of its inputs (8 bytes declared)`})
	b, n = bin(strings.Replace(h, `"binary_data_size":8`, `"binary_data_size":4`, 1), "1234")
	cases = append(cases, tc{"binary size vs shape", b, n, `input "INPUT0": binary_data_size 4: shape [2] of INT32 needs 8 bytes, data has 4`})
	b, n = bin(strings.Replace(h, `"binary_data_size":8`, `"binary_data_size":-8`, 1), "")
	cases = append(cases, tc{"binary size negative", b, n, `binary_data_size -8 is not a non-negative integer`})
	b, n = bin(strings.Replace(h, `"binary_data_size":8`, `"binary_data_size":99999999999999999999`, 1), "")
	cases = append(cases, tc{"binary size huge", b, n, `is not a non-negative integer`})
	hb := `{"inputs":[{"name":"S","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":9}}]}`
	b, n = bin(hb, "\x01\x00\x00\x00a\x05\x00\x00\x00")
	cases = append(cases, tc{"bytes element past end", b, n, `input "S": binary_data_size 9: BYTES element 1: length 5 runs past the end of the data (0 bytes left)`})
	b, n = bin(strings.Replace(hb, "9}", "7}", 1), "\x01\x00\x00\x00a\x05\x00")
	cases = append(cases, tc{"bytes length cut", b, n, `BYTES element 1: 2 bytes left, too few for its 4-byte length`})
	b, n = bin(strings.Replace(hb, "9}", "5}", 1), "\x01\x00\x00\x00a")
	cases = append(cases, tc{"bytes too few elements", b, n, `shape [2] needs 2 elements, data has 1`})
	b, n = bin(strings.Replace(h, `"binary_data_size":8}`, `"binary_data_size":8,"shared_memory_region":"r"}`, 1), "12345678")
	cases = append(cases, tc{"binary and shared memory", b, n, `needs exactly one of`})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := DecodeRequest(c.body, c.headerLen)
			if err == nil {
				t.Fatalf("decoded %+v, want error containing %q", r, c.want)
			}
			var e *Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("error %T %v is not a 400 *Error", err, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error\n%s\nwant it to contain\n%s", err, c.want)
			}
		})
	}
}

func TestDecodeResponse(t *testing.T) {
	raw := mustHex(t, "0000803f000000400000404000008040")
	header := `{"model_name":"m","model_version":"3","id":"abc","parameters":{"sequence_id":5},"outputs":[` +
		`{"name":"B","datatype":"FP32","shape":[2,2],"parameters":{"binary_data_size":16}},` +
		`{"name":"J","datatype":"INT64","shape":[2],"data":[7,-7]}]}`
	r, err := DecodeResponse(append([]byte(header), raw...), len(header))
	if err != nil {
		t.Fatal(err)
	}
	if r.ModelName != "m" || r.ModelVersion != "3" || r.ID != "abc" || len(r.Outputs) != 2 {
		t.Fatalf("got %+v", r)
	}
	if !r.Outputs[0].Binary || !bytes.Equal(r.Outputs[0].Data, raw) || r.Outputs[1].Binary {
		t.Fatalf("outputs %+v", r.Outputs)
	}
	if v, _ := Values[int64](&r.Outputs[1]); fmt.Sprint(v) != "[7 -7]" {
		t.Fatalf("J = %v", v)
	}
	// Shared-memory outputs carry no data.
	shm := `{"model_name":"m","model_version":"1","outputs":[{"name":"o","datatype":"FP32","shape":[4],"parameters":{"shared_memory_region":"r","shared_memory_byte_size":16}}]}`
	r, err = DecodeResponse([]byte(shm), -1)
	if err != nil || !r.Outputs[0].SharedMemory() || r.Outputs[0].Data != nil {
		t.Fatalf("shared memory output: %+v %v", r, err)
	}
	out, hl, err := AppendResponse(nil, r)
	if err != nil || hl != -1 || string(out) != `{"model_name":"m","model_version":"1","outputs":[{"name":"o","datatype":"FP32","shape":[4],"parameters":{"shared_memory_byte_size":16,"shared_memory_region":"r"}}]}` {
		t.Fatalf("re-encoded %s %d %v", out, hl, err)
	}
}

func TestEncodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		t    Tensor
		want string
	}{
		{"short data", Tensor{Name: "a", Datatype: Int32, Shape: []int64{2}, Data: make([]byte, 7)}, `input "a": shape [2] of INT32 needs 8 bytes, data has 7`},
		{"bad datatype", Tensor{Name: "a", Datatype: "INT4", Shape: []int64{1}}, `input "a": unknown datatype "INT4"`},
		{"bad bytes", Tensor{Name: "a", Datatype: Bytes, Shape: []int64{1}, Data: []byte{9, 0, 0, 0, 1}}, `BYTES element 0: length 9 runs past`},
		{"non-utf8 in json", Tensor{Name: "a", Datatype: Bytes, Shape: []int64{1}, Data: AppendBytesElement(nil, []byte{0xff})}, `BYTES element 0 is not valid UTF-8`},
		{"bad parameter", Tensor{Name: "a", Datatype: Int8, Shape: []int64{1}, Data: []byte{1}, Parameters: Parameters{"p": struct{}{}}}, `parameter "p": unsupported value type struct {}`},
		{"nan parameter", Tensor{Name: "a", Datatype: Int8, Shape: []int64{1}, Data: []byte{1}, Parameters: Parameters{"p": math.NaN()}}, `parameter "p": NaN has no JSON form`},
	} {
		_, _, err := AppendRequest(nil, &Request{Inputs: []Tensor{tc.t}}, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	// Responses replace bytes JSON cannot carry instead of failing.
	resp := &Response{Outputs: []Tensor{{Name: "s", Datatype: Bytes, Shape: []int64{1}, Data: AppendBytesElement(nil, []byte("a\xffb\"\x01"))}}}
	out, _, err := AppendResponse(nil, resp)
	if err != nil || !strings.Contains(string(out), `"data":["a\ufffdb\"\u0001"]`) {
		t.Fatalf("got %s %v", out, err)
	}
}

func TestParameterValues(t *testing.T) {
	body := `{"parameters":{"s":"x\"y","b":false,"i":-3,"u":18446744073709551615,"f":2.5,"e":1e400,"z":null},"inputs":[{"name":"x","datatype":"INT8","shape":[1],"data":[1]}]}`
	_, err := DecodeRequest([]byte(body), -1)
	if err == nil || !strings.Contains(err.Error(), `parameter "e": number 1e400 is out of range`) {
		t.Fatalf("err %v", err)
	}
	body = strings.Replace(body, `"e":1e400,`, "", 1)
	r, err := DecodeRequest([]byte(body), -1)
	if err != nil {
		t.Fatal(err)
	}
	want := Parameters{"s": `x"y`, "b": false, "i": int64(-3), "u": uint64(math.MaxUint64), "f": 2.5, "z": RawJSON("null")}
	if fmt.Sprint(r.Parameters) != fmt.Sprint(want) {
		t.Fatalf("parameters %v, want %v", r.Parameters, want)
	}
	out, _, err := AppendRequest(nil, r, false)
	if err != nil || !strings.HasPrefix(string(out), `{"parameters":{"b":false,"f":2.5,"i":-3,"s":"x\"y","u":18446744073709551615,"z":null},`) {
		t.Fatalf("encoded %s %v", out, err)
	}
}

func TestParseHeaderLength(t *testing.T) {
	for _, tc := range []struct {
		v    string
		body int
		want int
		err  string
	}{
		{"", 10, -1, ""},
		{"0", 10, 0, ""},
		{"10", 10, 10, ""},
		{"11", 10, 0, "exceeds the body length 10"},
		{"-1", 10, 0, "is not a non-negative integer"},
		{"1e3", 10, 0, "is not a non-negative integer"},
		{"99999999999999999999", 10, 0, "is not a non-negative integer"},
	} {
		got, err := ParseHeaderLength(tc.v, tc.body)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.v, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %d %v, want %d", tc.v, got, err, tc.want)
		}
	}
}

// TestHalfRoundingExhaustive checks the FP16 and BF16 conversions against
// the definition: every value converts back to itself, and the midpoint of
// two neighbours rounds to the even one while anything off the midpoint
// rounds to the nearer.
func TestHalfRoundingExhaustive(t *testing.T) {
	for _, f := range []struct {
		name   string
		to     func(float64) uint16
		from   func(uint16) float32
		maxFin uint16
	}{
		{"FP16", HalfFromFloat64, HalfToFloat32, 0x7bff},
		{"BF16", BF16FromFloat64, BF16ToFloat32, 0x7f7f},
	} {
		for h := uint16(0); h < f.maxFin; h++ {
			for _, sign := range []uint16{0, 0x8000} {
				lo, hi := h|sign, (h+1)|sign
				a, b := float64(f.from(lo)), float64(f.from(hi))
				if got := f.to(a); got != lo {
					t.Fatalf("%s: %v -> %#04x, want %#04x", f.name, a, got, lo)
				}
				mid := (a + b) / 2 // exact in float64
				even := lo
				if lo&1 == 1 {
					even = hi
				}
				if got := f.to(mid); got != even {
					t.Fatalf("%s: midpoint %v -> %#04x, want %#04x", f.name, mid, got, even)
				}
				if got := f.to(math.Nextafter(mid, a)); got != lo {
					t.Fatalf("%s: below midpoint %v -> %#04x, want %#04x", f.name, mid, got, lo)
				}
				if got := f.to(math.Nextafter(mid, b)); got != hi {
					t.Fatalf("%s: above midpoint %v -> %#04x, want %#04x", f.name, mid, got, hi)
				}
			}
		}
		inf := f.maxFin + 1
		if got := f.to(math.Inf(-1)); got != inf|0x8000 {
			t.Errorf("%s: -Inf -> %#04x", f.name, got)
		}
		if got := f.to(math.MaxFloat64); got != inf {
			t.Errorf("%s: MaxFloat64 -> %#04x", f.name, got)
		}
		if got := f.to(math.NaN()); !math.IsNaN(float64(f.from(got))) {
			t.Errorf("%s: NaN -> %#04x", f.name, got)
		}
		if got := f.to(5e-324); got != 0 {
			t.Errorf("%s: tiniest float64 -> %#04x", f.name, got)
		}
	}
}

func TestTypedConstructors(t *testing.T) {
	a, err := NewTensor("a", []int64{2, 2}, []int16{1, -2, 3, -4})
	if err != nil || a.Datatype != Int16 || hex.EncodeToString(a.Data) != "0100feff0300fcff" {
		t.Fatalf("NewTensor: %+v %v", a, err)
	}
	if v, err := Values[int16](&a); err != nil || fmt.Sprint(v) != "[1 -2 3 -4]" {
		t.Fatalf("Values: %v %v", v, err)
	}
	if _, err := Values[int32](&a); err == nil || !strings.Contains(err.Error(), "datatype is INT16, not INT32") {
		t.Fatalf("Values with the wrong type: %v", err)
	}
	if _, err := NewTensor("b", []int64{3}, []bool{true}); err == nil || !strings.Contains(err.Error(), `tensor "b": shape [3] needs 3 elements, got 1`) {
		t.Fatalf("NewTensor count: %v", err)
	}
	h, _ := NewHalfTensor("h", []int64{2}, []float32{0.1, -1})
	if v, _ := h.Float32s(); v[0] != HalfToFloat32(0x2e66) || v[1] != -1 {
		t.Fatalf("FP16 = %v", v)
	}
	bf, _ := NewBF16Tensor("bf", []int64{1}, []float32{1})
	if v, _ := bf.Float32s(); v[0] != 1 {
		t.Fatalf("BF16 = %v", v)
	}
	s, _ := NewBytesTensor("s", []int64{3}, [][]byte{nil, []byte("日本"), {0}})
	if el, err := s.BytesElements(); err != nil || len(el) != 3 || string(el[1]) != "日本" || el[2][0] != 0 {
		t.Fatalf("BytesElements = %q %v", el, err)
	}
	for _, dt := range Datatypes {
		if got, err := ParseDatatype(string(dt)); err != nil || got != dt {
			t.Errorf("ParseDatatype(%s) = %v %v", dt, got, err)
		}
	}
	if _, err := ParseDatatype("STRING"); err == nil {
		t.Error("ParseDatatype accepted STRING")
	}
}

func TestErrorBodies(t *testing.T) {
	body := AppendErrorBody(nil, `input "x": bad`)
	if string(body) != `{"error":"input \"x\": bad"}` {
		t.Fatalf("body %s", body)
	}
	if msg, ok := ParseErrorBody(body); !ok || msg != `input "x": bad` {
		t.Fatalf("parsed %q %v", msg, ok)
	}
	for _, bad := range []string{``, `{}`, `{"error":1}`, `{"error":"x"} x`, `[]`} {
		if _, ok := ParseErrorBody([]byte(bad)); ok {
			t.Errorf("ParseErrorBody(%q) accepted", bad)
		}
	}
	if s := ErrorStatus(fmt.Errorf("wrapped: %w", &Error{Status: 409, Msg: "x"})); s != 409 {
		t.Errorf("ErrorStatus = %d", s)
	}
	if s := ErrorStatus(errors.New("plain")); s != 500 {
		t.Errorf("ErrorStatus(plain) = %d", s)
	}
}

// The shapes of a request's tensors share one allocation: each must still
// be a slice of its own, which appending to or writing into leaves the
// others' untouched.
func TestDecodedShapesAreIndependent(t *testing.T) {
	body := `{"inputs":[` +
		`{"name":"A","datatype":"INT32","shape":[1,2],"data":[1,2]},` +
		`{"name":"B","datatype":"INT32","shape":[2,1,1],"data":[3,4]},` +
		`{"name":"C","datatype":"INT32","shape":[1,1,1,1,2],"data":[5,6]}]}`
	r, err := DecodeRequest([]byte(body), -1)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]int64{{1, 2}, {2, 1, 1}, {1, 1, 1, 1, 2}}
	for i, in := range r.Inputs {
		if !slices.Equal(in.Shape, want[i]) {
			t.Fatalf("input %d shape %v, want %v", i, in.Shape, want[i])
		}
	}
	r.Inputs[0].Shape = append(r.Inputs[0].Shape, 99)
	r.Inputs[1].Shape[0] = 7
	if !slices.Equal(r.Inputs[1].Shape, []int64{7, 1, 1}) || !slices.Equal(r.Inputs[2].Shape, want[2]) {
		t.Errorf("changing one shape changed another: %v %v", r.Inputs[1].Shape, r.Inputs[2].Shape)
	}

	// Shapes of rank one sit side by side in the shared allocation.
	body = `{"inputs":[{"name":"A","datatype":"INT32","shape":[2],"data":[1,2]},` +
		`{"name":"B","datatype":"INT32","shape":[2],"data":[3,4]}]}`
	if r, err = DecodeRequest([]byte(body), -1); err != nil {
		t.Fatal(err)
	}
	_ = append(r.Inputs[0].Shape, 99)
	if !slices.Equal(r.Inputs[1].Shape, []int64{2}) {
		t.Errorf("appending to A's shape changed B's to %v", r.Inputs[1].Shape)
	}
}

// Parameter names a client sends with every request are not allocated
// afresh; any other name is copied out of the body.
func TestParamNameInterns(t *testing.T) {
	for _, name := range []string{ParamBinaryData, ParamBinaryDataOutput, ParamClassification, ParamTimeout,
		ParamPriority, ParamSequenceID, ParamSequenceStart, ParamSequenceEnd, "custom", ""} {
		body := []byte(name)
		got := paramName(body)
		if got != name {
			t.Fatalf("paramName(%q) = %q", name, got)
		}
		copy(body, bytes.Repeat([]byte("x"), len(body))) // the body's buffer is reused
		if got != name {
			t.Fatalf("paramName(%q) aliases the body: now %q", name, got)
		}
	}
	key := []byte(ParamBinaryDataOutput)
	if n := testing.AllocsPerRun(100, func() { _ = paramName(key) }); n != 0 {
		t.Fatalf("paramName(%q) allocates %v times", key, n)
	}
}

// TestDecodeSharesWhatRepeats: the parameter objects of one boolean flag
// that binary clients send with every request and requested output decode
// to shared maps, any other object to a map of its own; tensor names are
// interned. Neither aliases the body, whose buffer the proxy reuses.
func TestDecodeSharesWhatRepeats(t *testing.T) {
	same := func(a, b Parameters) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	for _, tc := range []struct {
		params string
		want   Parameters
		shared Parameters // nil: a map of its own
	}{
		{`{"binary_data_output":true}`, Parameters{ParamBinaryDataOutput: true}, binaryDataOutputTrue},
		{`{"binary_data_output":false}`, Parameters{ParamBinaryDataOutput: false}, binaryDataOutputFalse},
		{`{"binary_data_output":true,"priority":2}`, Parameters{ParamBinaryDataOutput: true, ParamPriority: int64(2)}, nil},
		{`{"priority":2,"binary_data_output":true}`, Parameters{ParamBinaryDataOutput: true, ParamPriority: int64(2)}, nil},
		{`{"binary_data_output":true,"binary_data_output":false}`, Parameters{ParamBinaryDataOutput: false}, nil},
		{`{"binary_data":true}`, Parameters{ParamBinaryData: true}, binaryDataTrue}, // an output's flag, shared wherever it is
		{`{"priority":2}`, Parameters{ParamPriority: int64(2)}, nil},
		{`{}`, nil, nil},
	} {
		t.Run(tc.params, func(t *testing.T) {
			body := []byte(`{"parameters":` + tc.params + `,"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,1],"data":[1]}],` +
				`"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1","parameters":{"binary_data":false}},` +
				`{"name":"OUTPUT2","parameters":{"binary_data":true,"classification":2}}]}`)
			r, err := DecodeRequest(body, -1)
			if err != nil {
				t.Fatal(err)
			}
			for i := range body {
				body[i] = ' ' // the proxy reuses the body's buffer
			}
			if !reflect.DeepEqual(r.Parameters, tc.want) {
				t.Errorf("parameters %v, want %v", r.Parameters, tc.want)
			}
			if tc.shared != nil && !same(r.Parameters, tc.shared) {
				t.Errorf("parameters %v are a map of their own, want the shared one", r.Parameters)
			}
			if tc.shared == nil && r.Parameters != nil && slices.ContainsFunc([]Parameters{binaryDataTrue, binaryDataFalse,
				binaryDataOutputTrue, binaryDataOutputFalse}, func(p Parameters) bool { return same(r.Parameters, p) }) {
				t.Errorf("parameters %v are a shared map", r.Parameters)
			}
			if r.Inputs[0].Name != "INPUT0" || r.Outputs[0].Name != "OUTPUT0" {
				t.Errorf("names %q, %q after the body was overwritten", r.Inputs[0].Name, r.Outputs[0].Name)
			}
			if !same(r.Outputs[0].Parameters, binaryDataTrue) || !same(r.Outputs[1].Parameters, binaryDataFalse) {
				t.Errorf("requested outputs' {binary_data: bool} are not the shared maps")
			}
			if want := (Parameters{ParamBinaryData: true, ParamClassification: int64(2)}); !reflect.DeepEqual(r.Outputs[2].Parameters, want) {
				t.Errorf("OUTPUT2 parameters %v, want %v", r.Outputs[2].Parameters, want)
			}
		})
	}
}

// TestDecodeAllocations pins what decoding a typical binary request
// allocates: the request with room for its inputs and shapes, and the
// requested outputs; names, flags and the header length nothing.
func TestDecodeAllocations(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("instrumentation changes allocation counts")
	}
	in0, _ := NewTensor("INPUT0", []int64{1, 16}, make([]int32, 16))
	in1, _ := NewTensor("INPUT1", []int64{1, 16}, make([]int32, 16))
	req := &Request{Inputs: []Tensor{in0, in1}, Parameters: Parameters{ParamBinaryDataOutput: true},
		Outputs: []RequestedOutput{{Name: "OUTPUT0", Parameters: Parameters{ParamBinaryData: true}}}}
	body, hl, err := AppendRequest(nil, req, true)
	if err != nil {
		t.Fatal(err)
	}
	text := []byte(strconv.Itoa(hl))
	got := testing.AllocsPerRun(100, func() {
		n, err := ParseHeaderLength(string(text), len(body))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeRequestDeferred(body, n); err != nil {
			t.Fatal(err)
		}
	})
	if got != 2 {
		t.Errorf("decoding a binary request of two inputs and one requested output allocates %v times, want 2", got)
	}
}

// TestDecodeRequestDeferred: the data Triton reads from JSON is left as text
// until DecodeData, which then gives what DecodeRequest gives, errors
// included; data Triton does not read from JSON (FP16, BF16, BYTES), binary
// data and arrays holding strings are decoded at once.
func TestDecodeRequestDeferred(t *testing.T) {
	for _, tc := range []struct {
		name, tensor string
		deferred     bool
		err          string // from DecodeData, and from DecodeRequest
	}{
		{"flat", `"datatype":"FP32","shape":[1,3],"data":[1.5,-2,NaN]`, true, ""},
		{"nested", `"datatype":"INT32","shape":[2,2],"data":[[1,2],[3,4]]`, true, ""},
		{"data first", `"data":[true,false],"datatype":"BOOL","shape":[1,2]`, true, ""},
		{"spaces", `"datatype":"INT8","shape":[1,2],"data": [ [ 1 , 2 ] ] `, true, ""},
		{"count", `"datatype":"INT32","shape":[1,3],"data":[1,2]`, true, "shape [1,3] needs 3 elements, data has 2"},
		{"not an integer", `"datatype":"INT32","shape":[1,1],"data":[1.5]`, true, "1.5 is not an integer"},
		{"syntax", `"datatype":"INT32","shape":[1,2],"data":[1,,2]`, true, "invalid JSON"},
		{"too deep", `"datatype":"INT32","shape":[1],"data":` + strings.Repeat("[", 70) + "1" + strings.Repeat("]", 70), false, "nesting deeper than"},
		{"FP16", `"datatype":"FP16","shape":[1,2],"data":[1,2]`, false, ""},
		{"BF16 data first", `"data":[1,2],"datatype":"BF16","shape":[1,2]`, false, ""},
		{"BYTES", `"datatype":"BYTES","shape":[1,2],"data":["a]","b"]`, false, ""},
		{"string in numbers", `"datatype":"INT32","shape":[1,2],"data":[1,"]"]`, false, "data element 1"},
		{"scalar", `"datatype":"INT32","shape":[],"data":7`, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := []byte(`{"inputs":[{"name":"x",` + tc.tensor + `},{"name":"y","datatype":"INT32","shape":[1],"data":[9]}]}`)
			eager, eagerErr := DecodeRequest(body, -1)
			r, err := DecodeRequestDeferred(body, -1)
			if err != nil {
				if tc.deferred || tc.err == "" || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("DecodeRequestDeferred: %v", err)
				}
				return
			}
			if got := r.Inputs[0].Deferred(); got != tc.deferred {
				t.Fatalf("deferred %v, want %v", got, tc.deferred)
			}
			if tc.deferred && r.Inputs[0].Data != nil {
				t.Fatalf("deferred input has data %v", r.Inputs[0].Data)
			}
			if _, _, err := AppendRequest(nil, r, true); tc.deferred && !errors.Is(err, errDeferred) {
				t.Fatalf("encoding a deferred input: %v, want errDeferred", err)
			}
			err = r.DecodeData()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || eagerErr == nil || err.Error() != eagerErr.Error() {
					t.Fatalf("DecodeData error %v, DecodeRequest's %v, want both %q", err, eagerErr, tc.err)
				}
				return
			}
			if err != nil || eagerErr != nil {
				t.Fatalf("DecodeData: %v; DecodeRequest: %v", err, eagerErr)
			}
			if !reflect.DeepEqual(r, eager) {
				t.Fatalf("after DecodeData\n%+v\nwant %+v", r, eager)
			}
			if r.Inputs[0].Deferred() || r.Inputs[1].Deferred() {
				t.Fatal("DecodeData left data deferred")
			}
		})
	}
}
