package emulator

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// BenchmarkInfer measures the emulator's own cost per request at tau = 0
// (TimeScale 0), handler only, no network: what the emulator adds to an
// overhead benchmark of the proxy.
func BenchmarkInfer(b *testing.B) {
	s, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	a8, b8 := simpleInputs(8, []int64{8, 16}, 1)
	binBody, binLen := binaryBody(b, map[string]any{"binary_data_output": true}, nil, a8, b8)
	img := input{name: "INPUT__0", datatype: "FP32", shape: []int64{1, 3, 224, 224}, f32: make([]float32, 3*224*224)}
	imgBody, imgLen := binaryBody(b, map[string]any{"binary_data_output": true}, nil, img)
	// 32 rows, 19 MB: a body past the small-buffer pool (the image model's largest batch).
	img32 := input{name: "INPUT__0", datatype: "FP32", shape: []int64{32, 3, 224, 224}, f32: make([]float32, 32*3*224*224)}
	img32Body, img32Len := binaryBody(b, map[string]any{"binary_data_output": true}, nil, img32)
	cases := []struct {
		name, model string
		body        []byte
		headerLen   int
	}{
		{"simple/json/8rows", SimpleModel, jsonBody(b, nil, nil, a8, b8), -1},
		{"simple/binary/8rows", SimpleModel, binBody, binLen},
		{"image/binary/1row", ImageModel, imgBody, imgLen},
		{"image/binary/32rows", ImageModel, img32Body, img32Len},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			url := "/v2/models/" + c.model + "/infer"
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			rd := bytes.NewReader(c.body)
			for b.Loop() {
				rd.Reset(c.body)
				req := httptest.NewRequest(http.MethodPost, url, rd)
				if c.headerLen >= 0 {
					req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(c.headerLen))
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// BenchmarkFoldSum is the image model's math for one 3x224x224 row.
func BenchmarkFoldSum(b *testing.B) {
	in := [][]byte{make([]byte, 4*3*224*224)}
	out := [][]byte{make([]byte, 4*imageClasses)}
	b.SetBytes(int64(len(in[0])))
	for b.Loop() {
		foldSum(1, in, out)
	}
}
