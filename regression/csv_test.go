package regression

import (
	"bytes"
	"strings"
	"testing"
)

func TestCSVRoundTrip(t *testing.T) {
	in := []Sample{{Batch: 1, LatencyMs: 1.3571}, {Batch: 8, LatencyMs: 3.4928}, {Batch: 32, LatencyMs: 10.8152}}
	var buf bytes.Buffer
	if err := WriteCSV(&buf, in); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "batch_size,latency_ms\n") {
		t.Fatalf("header missing: %q", buf.String())
	}
	out, err := ReadCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("read %d samples, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i] != in[i] {
			t.Fatalf("sample %d = %+v, want %+v", i, out[i], in[i])
		}
	}
}

func TestReadCSV(t *testing.T) {
	tests := []struct {
		name, in string
		n        int
		err      string
	}{
		{"reordered columns, extras, comments", "# profile\nnote,latency_ms,batch_size\nx,1.5,1\ny, 2.5, 2\n", 2, ""},
		{"BOM and case", "\ufeffBatch_Size,Latency_MS\n1,1\n", 1, ""},
		{"empty", "", 0, "empty"},
		{"missing column", "batch_size,ms\n1,2\n", 0, "must name columns"},
		{"bad batch", "batch_size,latency_ms\n1,2\nx,3\n", 0, "line 3: batch_size \"x\""},
		{"bad latency", "batch_size,latency_ms\n1,fast\n", 0, "line 2: latency_ms"},
		{"zero batch", "batch_size,latency_ms\n0,1\n", 0, "line 2: batch size must be >= 1"},
		{"negative latency", "batch_size,latency_ms\n1,-1\n", 0, "latency must be"},
		{"short row", "batch_size,note,latency_ms\n1,2\n", 0, "line 2: 2 fields"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadCSV(strings.NewReader(tt.in))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want it to mention %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.n {
				t.Fatalf("read %d samples, want %d", len(got), tt.n)
			}
		})
	}
}

// FuzzReadCSV: any input is read or rejected with an error, never a panic,
// and every sample read is valid.
func FuzzReadCSV(f *testing.F) {
	f.Add("batch_size,latency_ms\n1,2\n4,3.5\n")
	f.Add("latency_ms,batch_size\n\"1\",2\n")
	f.Fuzz(func(t *testing.T, in string) {
		samples, err := ReadCSV(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, s := range samples {
			if err := s.validate(); err != nil {
				t.Fatalf("ReadCSV returned an invalid sample %+v: %v", s, err)
			}
		}
	})
}
