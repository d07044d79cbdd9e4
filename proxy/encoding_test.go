package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/kserve"
)

func TestAcceptedEncoding(t *testing.T) {
	tests := []struct{ header, want string }{
		{"", ""},
		{"gzip", "gzip"},
		{"GZIP", "gzip"},
		{"deflate", "deflate"},
		{"br", ""},
		{"identity", ""},
		{"br, gzip", "gzip"},
		{"gzip, deflate", "gzip"},
		{"deflate, gzip", "deflate"},
		{"gzip;q=0", ""},
		{"gzip; q=0", ""},
		{"gzip;q=0.0", ""},
		{"gzip;q=0.000", ""},
		{"gzip;Q=0", ""},
		{"gzip;q=0, deflate", "deflate"},
		{"gzip;q=0.5", "gzip"},
		{"gzip;q=0.5, deflate", "deflate"},       // the higher q wins
		{"gzip;q=0.8, deflate;q=0.9", "deflate"}, // likewise
		{"gzip;q=1, deflate;q=1", "gzip"},        // ties go to the first listed
		{"gzip;q=bogus", ""},                     // an unreadable q is not an acceptance
		{"gzip;level=1", "gzip"},                 // other parameters are ignored
	}
	for _, tt := range tests {
		t.Run(tt.header, func(t *testing.T) {
			if got := acceptedEncoding(tt.header); got != tt.want {
				t.Fatalf("acceptedEncoding(%q) = %q, want %q", tt.header, got, tt.want)
			}
		})
	}
}

// fourKB is an answer of about 4 KB, the size the pooled compressor is for.
func fourKB() *kserve.Response {
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i * 7)
	}
	return &kserve.Response{ModelName: "simple", Outputs: []kserve.Tensor{{Name: "OUT", Datatype: "UINT8", Shape: []int64{1, 4096}, Data: data}}}
}

func TestWriteResponseCompresses(t *testing.T) {
	plain, _, err := kserve.AppendResponse(nil, fourKB())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		accept, enc string
		open        func(io.Reader) (io.Reader, error)
	}{
		{"gzip", "gzip", func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }},
		{"deflate", "deflate", func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) }},
		{"gzip;q=0", "", nil},
		{"", "", nil},
	} {
		t.Run(tt.accept, func(t *testing.T) {
			for range 3 { // the pooled writer is reused and must start clean
				var ctx fasthttp.RequestCtx
				ctx.Request.Header.Set("Accept-Encoding", tt.accept)
				if err := writeResponse(&ctx, fourKB()); err != nil {
					t.Fatal(err)
				}
				if got := string(ctx.Response.Header.Peek("Content-Encoding")); got != tt.enc {
					t.Fatalf("Content-Encoding %q, want %q", got, tt.enc)
				}
				body := ctx.Response.Body()
				if tt.open != nil {
					r, err := tt.open(bytes.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					if body, err = io.ReadAll(r); err != nil {
						t.Fatal(err)
					}
				}
				if !bytes.Equal(body, plain) {
					t.Fatalf("body differs from the plain encoding (%d vs %d bytes)", len(body), len(plain))
				}
			}
		})
	}
}

// BenchmarkWriteResponseGzip is one 4 KB answer compressed for a client
// that accepts gzip: what a pooled compressor saves per reply.
func BenchmarkWriteResponseGzip(b *testing.B) {
	resp := fourKB()
	var ctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		ctx.Request.Header.Set("Accept-Encoding", "gzip")
		if err := writeResponse(&ctx, resp); err != nil {
			b.Fatal(err)
		}
		ctx.Response.Header.Del("Content-Encoding")
	}
}
