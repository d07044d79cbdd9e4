package loadgen

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/kserve"
)

func TestResolveShape(t *testing.T) {
	tests := []struct {
		name  string
		shape []int64
		rows  int
		want  []int64
		err   string
	}{
		{"batch dimension takes rows", []int64{-1, 16}, 4, []int64{4, 16}, ""},
		{"other variable dimensions become 1", []int64{-1, 3, -1}, 2, []int64{2, 3, 1}, ""},
		{"fixed shape, one row", []int64{2, 16}, 1, []int64{2, 16}, ""},
		{"fixed shape refuses rows", []int64{16}, 2, nil, "no batch dimension"},
		{"scalar", []int64{}, 1, []int64{}, ""},
		{"bad dimension", []int64{-1, -3}, 1, nil, "dimension -3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolveShape(kserve.TensorMetadata{Name: "X", Shape: tt.shape}, tt.rows)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("resolveShape(%v, %d) = %v, %v; want %v", tt.shape, tt.rows, got, err, tt.want)
			}
		})
	}
}

func TestRandomDataSizes(t *testing.T) {
	for _, dt := range kserve.Datatypes {
		t.Run(string(dt), func(t *testing.T) {
			rng := newTestRand()
			b := randomData(dt, 10, rng)
			if dt == kserve.Bytes {
				for off, i := 0, 0; i < 10; i++ {
					n := int(binary.LittleEndian.Uint32(b[off:]))
					off += 4 + n
					if off > len(b) {
						t.Fatalf("element %d runs past the end", i)
					}
				}
				return
			}
			if len(b) != 10*dt.Size() {
				t.Fatalf("%d bytes for 10 %s, want %d", len(b), dt, 10*dt.Size())
			}
		})
	}
}

// Payloads are a function of the seed, distinct from one another, and
// round-trip through the codec in both wire forms.
func TestBuildPayloads(t *testing.T) {
	for _, binaryForm := range []bool{false, true} {
		t.Run(map[bool]string{false: "json", true: "binary"}[binaryForm], func(t *testing.T) {
			a, err := buildPayloads(simpleMetadata.Inputs, 3, 8, binaryForm, 9, maxPayloadBytes)
			if err != nil {
				t.Fatal(err)
			}
			b, err := buildPayloads(simpleMetadata.Inputs, 3, 8, binaryForm, 9, maxPayloadBytes)
			if err != nil {
				t.Fatal(err)
			}
			if len(a) != 8 {
				t.Fatalf("%d payloads, want 8", len(a))
			}
			for i := range a {
				if !bytes.Equal(a[i].body, b[i].body) {
					t.Fatalf("payload %d differs between two builds with one seed", i)
				}
				if i > 0 && bytes.Equal(a[i].body, a[i-1].body) {
					t.Fatalf("payloads %d and %d are equal", i-1, i)
				}
				if (a[i].headerLen >= 0) != binaryForm {
					t.Fatalf("payload %d: header length %d in %v form", i, a[i].headerLen, binaryForm)
				}
				req, err := kserve.DecodeRequest(a[i].body, a[i].headerLen)
				if err != nil {
					t.Fatalf("payload %d does not decode: %v", i, err)
				}
				if len(req.Inputs) != 2 || !reflect.DeepEqual(req.Inputs[0].Shape, []int64{3, 16}) {
					t.Fatalf("payload %d decodes to inputs %+v, want two [3,16]", i, req.Inputs)
				}
				for j, in := range req.Inputs {
					if !bytes.Equal(in.Data, a[i].inputs[j].Data) {
						t.Fatalf("payload %d input %s: data changed on the wire", i, in.Name)
					}
				}
				if bo, _ := req.Parameters.Bool(kserve.ParamBinaryDataOutput); bo != binaryForm {
					t.Fatalf("payload %d asks binary_data_output=%v in %v form", i, bo, binaryForm)
				}
			}
		})
	}
}

func TestBuildPayloadsAutomaticCount(t *testing.T) {
	ps, err := buildPayloads(simpleMetadata.Inputs, 1, 0, false, 1, maxPayloadBytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1024 {
		t.Fatalf("%d payloads of a small model, want 1024", len(ps))
	}
	big := []kserve.TensorMetadata{{Name: "IMAGE", Datatype: "FP32", Shape: []int64{-1, 3, 32, 32}}}
	const budget = 100_000 // about eight 12-KiB bodies
	ps, err = buildPayloads(big, 1, 0, true, 1, budget)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, p := range ps {
		total += len(p.body)
	}
	if total > budget || len(ps) < 6 {
		t.Fatalf("%d payloads of %d bytes in all: want about 8 within %d", len(ps), total, budget)
	}
}

func TestBuildPayloadsRejects(t *testing.T) {
	tests := []struct {
		name   string
		inputs []kserve.TensorMetadata
		rows   int
		want   string
	}{
		{"no inputs", nil, 1, "no model inputs"},
		{"unknown datatype", []kserve.TensorMetadata{{Name: "X", Datatype: "FP8", Shape: []int64{1}}}, 1, `input "X": unknown datatype`},
		{"rows on a fixed shape", []kserve.TensorMetadata{{Name: "X", Datatype: "FP32", Shape: []int64{4}}}, 2, "no batch dimension"},
		{"zero rows", simpleMetadata.Inputs, 0, "at least 1"},
		{"huge", []kserve.TensorMetadata{{Name: "X", Datatype: "FP32", Shape: []int64{-1, 1 << 40}}}, 1, "more than a load generator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := buildPayloads(tt.inputs, tt.rows, 1, false, 1, maxPayloadBytes)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestFetchMetadata(t *testing.T) {
	srv := newFakeServer(t, nil)
	md, err := FetchMetadata(context.Background(), nil, srv.URL+"/", "simple", "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(md.Inputs, simpleMetadata.Inputs) {
		t.Fatalf("inputs %+v, want %+v", md.Inputs, simpleMetadata.Inputs)
	}
	_, err = FetchMetadata(context.Background(), nil, srv.URL, "nope", "")
	if err == nil || !strings.Contains(err.Error(), "status 404") {
		t.Fatalf("unknown model: %v, want a status 404 error", err)
	}
	garbage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"name":"simple","inputs":[]}`))
	}))
	defer garbage.Close()
	_, err = FetchMetadata(context.Background(), nil, garbage.URL, "simple", "")
	if err == nil || !strings.Contains(err.Error(), "lists no inputs") {
		t.Fatalf("metadata without inputs: %v, want an error saying so", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		target, model, version string
		infer, addr, err       string
	}{
		{"http://127.0.0.1:8000", "simple", "", "http://127.0.0.1:8000/v2/models/simple/infer", "127.0.0.1:8000", ""},
		{"http://host/prefix/", "m", "2", "http://host/prefix/v2/models/m/versions/2/infer", "host:80", ""},
		{"https://host", "a b", "", "https://host/v2/models/a%20b/infer", "host:443", ""},
		{"127.0.0.1:8000", "m", "", "", "", "scheme must be http or https"},
		{"http://", "m", "", "", "", "no host"},
		{"http://h:1?x=1", "m", "", "", "", "without query"},
		{"http://h:1", "", "", "", "", "no model name"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			ep, err := parseEndpoint(tt.target, tt.model, tt.version)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil || ep.inferURI != tt.infer || ep.addr != tt.addr {
				t.Fatalf("endpoint %q %q, %v; want %q %q", ep.inferURI, ep.addr, err, tt.infer, tt.addr)
			}
		})
	}
}
