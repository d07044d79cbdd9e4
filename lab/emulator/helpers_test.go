package emulator

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeClock is a virtual clock: Sleep advances it by the full duration at
// once, so execution times are exact and tests never wait.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
}

// newTestServer builds an emulator and serves its API over httptest.
func newTestServer(t testing.TB, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.Close() // ends hanging batches first, so that ts.Close does not wait on them
		ts.Close()
	})
	return s, ts
}

// input is a request input for the test encoders.
type input struct {
	name     string
	datatype string
	shape    []int64
	i32      []int32
	f32      []float32
}

func (in input) raw() []byte {
	var b []byte
	for _, v := range in.i32 {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	for _, v := range in.f32 {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// jsonBody encodes an inference request with every input as a JSON array,
// written by hand with encoding/json so that it does not depend on kserve.
func jsonBody(t testing.TB, params map[string]any, outputs []map[string]any, ins ...input) []byte {
	t.Helper()
	req := map[string]any{"id": "req-1"}
	if params != nil {
		req["parameters"] = params
	}
	if outputs != nil {
		req["outputs"] = outputs
	}
	var inputs []map[string]any
	for _, in := range ins {
		m := map[string]any{"name": in.name, "datatype": in.datatype, "shape": in.shape}
		if in.i32 != nil {
			m["data"] = in.i32
		} else {
			m["data"] = in.f32
		}
		inputs = append(inputs, m)
	}
	req["inputs"] = inputs
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// binaryBody encodes a request with every input in the binary section and
// returns the body and the JSON header length.
func binaryBody(t testing.TB, params map[string]any, outputs []map[string]any, ins ...input) ([]byte, int) {
	t.Helper()
	req := map[string]any{}
	if params != nil {
		req["parameters"] = params
	}
	if outputs != nil {
		req["outputs"] = outputs
	}
	var inputs []map[string]any
	var data []byte
	for _, in := range ins {
		raw := in.raw()
		inputs = append(inputs, map[string]any{
			"name": in.name, "datatype": in.datatype, "shape": in.shape,
			"parameters": map[string]any{"binary_data_size": len(raw)},
		})
		data = append(data, raw...)
	}
	req["inputs"] = inputs
	header, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return append(header, data...), len(header)
}

// output is a decoded response output.
type output struct {
	Datatype string
	Shape    []int64
	Binary   bool
	I32      []int32
	F32      []float32
	Strs     []string
}

type inferResult struct {
	status int
	header http.Header
	errMsg string
	model  string
	id     string
	outs   map[string]output
}

// post sends an inference request; headerLen < 0 means a JSON-only body.
func post(t testing.TB, url string, body []byte, headerLen int) inferResult {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if headerLen >= 0 {
		req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(headerLen))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	return parseResponse(t, resp)
}

// parseResponse decodes an inference response by hand (encoding/json and
// the binary section), independently of package kserve.
func parseResponse(t testing.TB, resp *http.Response) inferResult {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	r := inferResult{status: resp.StatusCode, header: resp.Header}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("status %d with a body that is not a KServe error: %q", resp.StatusCode, body)
		}
		r.errMsg = e.Error
		return r
	}
	header, bin := body, []byte(nil)
	if h := resp.Header.Get("Inference-Header-Content-Length"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n > len(body) {
			t.Fatalf("bad Inference-Header-Content-Length %q for a body of %d bytes", h, len(body))
		}
		header, bin = body[:n], body[n:]
	}
	var j struct {
		ModelName    string `json:"model_name"`
		ModelVersion string `json:"model_version"`
		ID           string `json:"id"`
		Outputs      []struct {
			Name       string          `json:"name"`
			Datatype   string          `json:"datatype"`
			Shape      []int64         `json:"shape"`
			Parameters map[string]any  `json:"parameters"`
			Data       json.RawMessage `json:"data"`
		} `json:"outputs"`
	}
	if err := json.Unmarshal(header, &j); err != nil {
		t.Fatalf("response header is not JSON: %v: %q", err, header)
	}
	r.model, r.id, r.outs = j.ModelName, j.ID, map[string]output{}
	for _, o := range j.Outputs {
		out := output{Datatype: o.Datatype, Shape: o.Shape}
		if size, ok := o.Parameters["binary_data_size"].(float64); ok {
			n := int(size)
			if n > len(bin) {
				t.Fatalf("output %s: binary_data_size %d exceeds the %d bytes left", o.Name, n, len(bin))
			}
			raw := bin[:n]
			bin = bin[n:]
			out.Binary = true
			switch o.Datatype {
			case "INT32":
				for i := 0; i+4 <= len(raw); i += 4 {
					out.I32 = append(out.I32, int32(binary.LittleEndian.Uint32(raw[i:])))
				}
			case "FP32":
				for i := 0; i+4 <= len(raw); i += 4 {
					out.F32 = append(out.F32, math.Float32frombits(binary.LittleEndian.Uint32(raw[i:])))
				}
			case "BYTES":
				for len(raw) >= 4 {
					l := int(binary.LittleEndian.Uint32(raw))
					out.Strs = append(out.Strs, string(raw[4:4+l]))
					raw = raw[4+l:]
				}
			}
		} else {
			var err error
			switch o.Datatype {
			case "INT32":
				err = json.Unmarshal(o.Data, &out.I32)
			case "FP32":
				err = json.Unmarshal(o.Data, &out.F32)
			case "BYTES":
				err = json.Unmarshal(o.Data, &out.Strs)
			}
			if err != nil {
				t.Fatalf("output %s data: %v", o.Name, err)
			}
		}
		r.outs[o.Name] = out
	}
	if len(bin) != 0 {
		t.Fatalf("%d bytes of the binary section belong to no output", len(bin))
	}
	return r
}

// getJSON fetches url and decodes a 200 JSON body into v.
func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
}

// simpleInputs returns rows of INPUT0 and INPUT1 for the simple models.
func simpleInputs(rows int, shape []int64, seed int32) (input, input) {
	a := input{name: "INPUT0", datatype: "INT32", shape: shape}
	b := input{name: "INPUT1", datatype: "INT32", shape: shape}
	for i := range int32(rows * 16) {
		a.i32 = append(a.i32, seed*1000+i)
		b.i32 = append(b.i32, 3*i-seed)
	}
	return a, b
}
