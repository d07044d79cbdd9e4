package kserve

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestWriteResponse(t *testing.T) {
	bin, _ := NewTensor("B", []int64{2}, []float32{1, 2})
	bin.Binary = true
	js, _ := NewTensor("J", []int64{1}, []int8{-3})
	for _, tc := range []struct {
		name      string
		outs      []Tensor
		ctype     string
		hasHeader bool
	}{
		{"binary", []Tensor{js, bin}, "application/octet-stream", true},
		{"json", []Tensor{js}, "application/json", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &Response{ModelName: "m", ModelVersion: "1", ID: "x", Outputs: tc.outs}
			rec := httptest.NewRecorder()
			if err := WriteResponse(rec, resp); err != nil {
				t.Fatal(err)
			}
			want, hl, err := AppendResponse(nil, resp)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), want) {
				t.Fatalf("status %d body %q, want %q", rec.Code, rec.Body.Bytes(), want)
			}
			h := rec.Header()
			if h.Get("Content-Type") != tc.ctype || h.Get("Content-Length") != strconv.Itoa(len(want)) {
				t.Fatalf("headers %v", h)
			}
			if got := h.Get(HeaderContentLength); (got != "") != tc.hasHeader || tc.hasHeader && got != strconv.Itoa(hl) {
				t.Fatalf("%s = %q, want %d", HeaderContentLength, got, hl)
			}
		})
	}
}

func TestWriteError(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set(HeaderContentLength, "12")
	WriteErr(rec, BadRequest(`input %q: bad`, "x"))
	if rec.Code != http.StatusBadRequest || rec.Body.String() != `{"error":"input \"x\": bad"}` ||
		rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get(HeaderContentLength) != "" {
		t.Fatalf("got %d %q %v", rec.Code, rec.Body.String(), rec.Header())
	}
}

func TestBatchWriteTo(t *testing.T) {
	a := decodeJSON(t, `{"id":"a","inputs":[{"name":"X","datatype":"INT32","shape":[1,2],"data":[1,2]},{"name":"E","datatype":"INT8","shape":[1,0],"data":[[]]}]}`)
	b := decodeJSON(t, `{"id":"b","inputs":[{"name":"X","datatype":"INT32","shape":[2,2],"data":[3,4,5,6]},{"name":"E","datatype":"INT8","shape":[2,0],"data":[]}]}`)
	batch, err := Merge([]*Request{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want, hl := batch.AppendBody([]byte("prefix"))
	var buf bytes.Buffer
	n, err := batch.WriteTo(&buf)
	if err != nil || n != int64(batch.BodyLen()) || !bytes.Equal(buf.Bytes(), want[len("prefix"):]) {
		t.Fatalf("WriteTo wrote %d %v\n%q\nwant\n%q", n, err, buf.Bytes(), want)
	}
	for _, chunk := range []int{1, 3, 64, 1 << 20} {
		got, err := io.ReadAll(&onlyReader{batch.Reader(), chunk})
		if err != nil || !bytes.Equal(got, buf.Bytes()) {
			t.Fatalf("Reader in chunks of %d: %q %v", chunk, got, err)
		}
	}
	var viaCopy bytes.Buffer
	if _, err := io.Copy(&viaCopy, batch.Reader()); err != nil || !bytes.Equal(viaCopy.Bytes(), buf.Bytes()) {
		t.Fatalf("io.Copy(Reader): %q %v", viaCopy.Bytes(), err)
	}
	if hl != batch.HeaderLen() {
		t.Fatalf("header length %d vs %d", hl, batch.HeaderLen())
	}
}

// onlyReader hides WriteTo and reads at most max bytes at a time.
type onlyReader struct {
	r   io.Reader
	max int
}

func (o *onlyReader) Read(p []byte) (int, error) { return o.r.Read(p[:min(len(p), o.max)]) }
