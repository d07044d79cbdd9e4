package proxy

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"strconv"
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

// Both ways of answering, encoding a response and passing on the
// upstream's answer as it came, compress alike and set the headers of the
// body's form.
func TestWriteResponseCompresses(t *testing.T) {
	for _, binary := range []bool{false, true} {
		resp := fourKB()
		resp.Outputs[0].Binary = binary
		plain, plainLen, err := kserve.AppendResponse(nil, resp)
		if err != nil {
			t.Fatal(err)
		}
		wantType, wantLen := "application/json", ""
		if binary {
			wantType, wantLen = "application/octet-stream", strconv.Itoa(plainLen)
		}
		writers := []struct {
			name  string
			write func(*fasthttp.RequestCtx) error
		}{
			{"encoded", func(ctx *fasthttp.RequestCtx) error { return writeResponse(ctx, resp) }},
			{"as it came", func(ctx *fasthttp.RequestCtx) error { writeWire(ctx, plain, plainLen); return nil }},
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
			for _, w := range writers {
				t.Run(fmt.Sprintf("binary=%v/%s/%s", binary, w.name, tt.accept), func(t *testing.T) {
					for range 3 { // the pooled writer is reused and must start clean
						var ctx fasthttp.RequestCtx
						ctx.Request.Header.Set("Accept-Encoding", tt.accept)
						if err := w.write(&ctx); err != nil {
							t.Fatal(err)
						}
						if got := string(ctx.Response.Header.Peek("Content-Encoding")); got != tt.enc {
							t.Fatalf("Content-Encoding %q, want %q", got, tt.enc)
						}
						ct, hl := string(ctx.Response.Header.ContentType()), string(ctx.Response.Header.Peek(kserve.HeaderContentLength))
						if ct != wantType || hl != wantLen {
							t.Fatalf("Content-Type %q, header length %q; want %q, %q", ct, hl, wantType, wantLen)
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
