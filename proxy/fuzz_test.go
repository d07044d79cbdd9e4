package proxy_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/proxy"
)

// echoBatcher batches the model "simple" (max batch 8) and answers each call
// from its own decoded request: every input comes back as an output of the
// same name, in binary form when the caller asked for binary outputs, as a
// decoded response or (for bodies of even length) as an upstream's answer
// passed on as it came. It checks what the front door hands it, so a
// request that reaches a queue half-decoded fails the fuzz target.
type echoBatcher struct {
	// bad, when set, is returned instead of the echo.
	bad *kserve.Response
}

func (echoBatcher) Model(name string) (int, bool) { return 8, name == "simple" }
func (echoBatcher) Delivered(dispatcher.Result)   {}

func (b echoBatcher) Submit(_ context.Context, model string, c *dispatcher.Call) dispatcher.Result {
	if model != "simple" {
		return dispatcher.Result{Err: fmt.Errorf("%w: %s", dispatcher.ErrUnknownModel, model)}
	}
	if c.Req == nil || c.Rows < 1 || c.Key == "" || c.Wire.Body == nil {
		panic(fmt.Sprintf("front door queued an incomplete call: rows %d, key %q, request %v, wire of %d bytes", c.Rows, c.Key, c.Req, len(c.Wire.Body)))
	}
	if _, err := kserve.DecodeRequestDeferred(c.Wire.Body, c.Wire.HeaderLen); err != nil {
		panic(fmt.Sprintf("front door queued a wire body that does not decode: %v", err))
	}
	// The front door leaves JSON data undecoded; the dispatcher decodes it
	// as a batch needs it, and a call whose data is bad fails alone.
	if err := c.Req.DecodeData(); err != nil {
		return dispatcher.Result{Err: err}
	}
	if c.Rows > 8 {
		return dispatcher.Result{Err: kserve.BadRequest("inference request batch-size must be <= 8 for 'simple'")}
	}
	if b.bad != nil {
		return dispatcher.Result{Resp: b.bad}
	}
	bin, _ := c.Req.Parameters.Bool(kserve.ParamBinaryDataOutput)
	resp := &kserve.Response{ModelName: model, ModelVersion: "1", ID: c.Req.ID}
	for _, in := range c.Req.Inputs {
		out := in
		out.Parameters = nil
		out.Binary = bin
		resp.Outputs = append(resp.Outputs, out)
	}
	if len(c.Wire.Body)%2 == 0 {
		// Answer as an upstream's answer passed on as it came, the way a
		// lone caller is answered.
		body, hl, err := kserve.AppendResponse(nil, resp)
		if err != nil {
			return dispatcher.Result{Err: err}
		}
		return dispatcher.Result{Wire: &dispatcher.Wire{Body: body, HeaderLen: hl}}
	}
	return dispatcher.Result{Resp: resp}
}

// fakeUpstream answers every passthrough request with Triton's 404 after
// reading the body, so the front door's body limit applies to passthrough
// too. No network is involved.
type fakeUpstream struct{}

func (fakeUpstream) DoDeadline(req *fasthttp.Request, resp *fasthttp.Response, _ time.Time) error {
	if st := req.BodyStream(); st != nil {
		if _, err := io.Copy(io.Discard, st); err != nil {
			return err
		}
	}
	resp.SetStatusCode(http.StatusNotFound)
	resp.Header.SetContentType("application/json")
	resp.SetBody(kserve.AppendErrorBody(nil, "Request for unknown model: '"+string(req.URI().Path())+"' is not found"))
	return nil
}

const fuzzBodyLimit = 4 << 10

func newFuzzServer(tb testing.TB, b door.Batcher) string {
	return startFront(tb, proxy.Options{Backend: door.Backend{Batcher: b}, Upstream: mustURL("http://triton.invalid:8000"),
		MaxBodyBytes: fuzzBodyLimit, Forward: fakeUpstream{}, ReadTimeout: 5 * time.Second})
}

// fuzzTargets are the paths the fuzzer picks from: both infer routes of the
// batched model, a model that is not batched (passthrough) and a
// non-inference endpoint.
var fuzzTargets = []string{
	"/v2/models/simple/infer",
	"/v2/models/simple/versions/1/infer",
	"/v2/models/other/infer",
	"/v2/models/simple",
}

// FuzzProxyInfer drives the HTTP entry point with any method, path choice,
// encoding, declared lengths and body. Whatever comes in, the front door
// must not panic, must answer with a real HTTP status, and every error must
// be a KServe v2 {"error": "..."} body; a 200 from the batched model must be
// a decodable inference response carrying the caller's own inputs.
func FuzzProxyInfer(f *testing.F) {
	simple := `{"id":"a","inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]},` +
		`{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}`
	binHeader := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,2],"parameters":{"binary_data_size":8}}],"parameters":{"binary_data_output":true}}`
	seeds := []struct {
		method  string
		target  uint8
		enc     string
		ihcl    string
		clDelta int8
		gz      bool
		body    string
	}{
		{"POST", 0, "", "", 0, false, simple},
		{"POST", 1, "", "", 0, false, simple},
		{"POST", 0, "gzip", "", 0, true, simple},
		{"POST", 0, "", strconv.Itoa(len(binHeader)), 0, false, binHeader + "\x01\x00\x00\x00\x02\x00\x00\x00"},
		{"POST", 0, "", "999", 0, false, binHeader},
		{"POST", 0, "", "-1", 0, false, simple},
		{"POST", 0, "", "", 5, false, simple},
		{"POST", 0, "", "", -5, false, simple},
		{"POST", 0, "br", "", 0, false, simple},
		{"POST", 0, "gzip", "", 0, false, simple},
		{"POST", 0, "deflate", "", 0, false, "\x00\x01"},
		{"POST", 0, "", "", 0, false, `{"inputs":[{"name":"x","datatype":"INT32","shape":[4611686018427387904,16],"data":[1]}]}`},
		{"POST", 0, "", "", 0, false, `{"inputs":[{"name":"x","datatype":"INT32","shape":[-1,16],"data":[1]}]}`},
		{"POST", 0, "", "", 0, false, `{"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":` + strings.Repeat("[", 5000) + `]}]}`},
		{"POST", 0, "", "", 0, false, "{\"inputs\":[{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[1],\"data\":[\"\xc3(\"]}]}"},
		{"POST", 0, "", "", 0, false, `{"inputs":[{"name":"x","datatype":"INT32","shape":[9],"data":[1,2,3,4,5,6,7,8,9]}]}`},
		{"POST", 0, "", "", 0, false, `{"parameters":{"priority":-1},"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1]}]}`},
		{"POST", 0, "", "", 0, false, `{"parameters":{"sequence_id":7},"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1]}]}`},
		{"POST", 2, "", "", 0, false, simple},
		{"GET", 3, "", "", 0, false, ""},
		{"PUT", 0, "", "", 0, false, simple},
		{"POST", 0, "", "", 0, false, strings.Repeat(" ", fuzzBodyLimit+1)},
	}
	for _, s := range seeds {
		f.Add(s.method, s.target, s.enc, s.ihcl, s.clDelta, s.gz, []byte(s.body))
	}
	base := newFuzzServer(f, echoBatcher{})
	f.Fuzz(func(t *testing.T, method string, target uint8, enc, ihcl string, clDelta int8, gz bool, body []byte) {
		if !validMethod(method) || !validHeaderValue(enc) || !validHeaderValue(ihcl) {
			t.Skip("not expressible on the wire")
		}
		path := fuzzTargets[int(target)%len(fuzzTargets)]
		sent := body
		if gz {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			zw.Write(body)
			zw.Close()
			sent = zb.Bytes()
		}
		declared := max(len(sent)+int(clDelta), 0)
		raw := fmt.Appendf(nil, "%s %s HTTP/1.1\r\nHost: proxy\r\nContent-Length: %d\r\n", method, path, declared)
		if enc != "" {
			raw = fmt.Appendf(raw, "Content-Encoding: %s\r\n", enc)
		}
		if ihcl != "" {
			raw = fmt.Appendf(raw, "%s: %s\r\n", kserve.HeaderContentLength, ihcl)
		}
		raw = append(append(raw, "\r\n"...), sent...)
		ans := exchange(t, base, raw, declared > len(sent))
		checkAnswer(t, method, path, ihcl, ans, body)
	})
}

// checkAnswer asserts the front door's contract for one exchange; plain is
// the request body before any compression.
func checkAnswer(t *testing.T, method, path, ihcl string, ans wireAnswer, plain []byte) {
	t.Helper()
	code, got := ans.status, ans.body
	if code < 200 || code > 599 {
		t.Fatalf("%s %s: status %d", method, path, code)
	}
	if code >= 500 {
		// The fake batcher and upstream never fail; a 5xx is the front
		// door's own fault.
		t.Fatalf("%s %s: status %d %q from a front door whose backends cannot fail", method, path, code, got)
	}
	if code >= 400 {
		msg, ok := kserve.ParseErrorBody(got)
		if ct := ans.header.Get("Content-Type"); !ok || msg == "" || (ct != kserve.ContentTypeJSON && ct != kserve.ContentTypeText) {
			t.Fatalf("%s %s: status %d with %q (%s), not a KServe v2 error body", method, path, code, got, ans.header.Get("Content-Type"))
		}
		return
	}
	if !strings.HasSuffix(path, "/infer") || !strings.Contains(path, "/simple/") {
		return
	}
	// A 200 from the batched model answers this very request.
	hl, err := kserve.ParseHeaderLength(ans.header.Get(kserve.HeaderContentLength), len(got))
	if err != nil {
		t.Fatalf("200 with a bad %s: %v", kserve.HeaderContentLength, err)
	}
	resp, err := kserve.DecodeResponse(got, hl)
	if err != nil {
		t.Fatalf("200 whose body does not decode: %v\n%q", err, got)
	}
	want, err := kserve.DecodeRequest(plain, mustHeaderLen(ihcl, len(plain)))
	if err != nil {
		t.Fatalf("200 for a request that does not decode (%v)", err)
	}
	if resp.ID != want.ID || len(resp.Outputs) != len(want.Inputs) {
		t.Fatalf("200 answers id %q with %d outputs; the request had id %q and %d inputs", resp.ID, len(resp.Outputs), want.ID, len(want.Inputs))
	}
	for i, o := range resp.Outputs {
		in := want.Inputs[i]
		if o.Name != in.Name || o.Datatype != in.Datatype || !bytes.Equal(o.Data, in.Data) {
			t.Fatalf("output %d (%s %s, %d bytes) is not the caller's input %s %s (%d bytes)", i, o.Name, o.Datatype, len(o.Data), in.Name, in.Datatype, len(in.Data))
		}
	}
}

func mustHeaderLen(ihcl string, n int) int {
	hl, err := kserve.ParseHeaderLength(ihcl, n)
	if err != nil {
		return -2 // DecodeRequest refuses it, which the caller reports
	}
	return hl
}

// validMethod reports whether m is an HTTP token, as a client could send.
func validMethod(m string) bool {
	if m == "" || len(m) > 16 {
		return false
	}
	for _, c := range []byte(m) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}

func validHeaderValue(v string) bool {
	for _, c := range []byte(v) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// A response the codec cannot encode must still be answered: a 500 with a
// KServe error body, never an empty 200. Both the plain and the compressed
// writer are checked.
func TestInferAnswersWhenTheResponseCannotBeEncoded(t *testing.T) {
	bad := &kserve.Response{ModelName: "simple", Outputs: []kserve.Tensor{{Name: "OUT", Datatype: "INT33", Shape: []int64{1}, Data: []byte{1}}}}
	base := newFuzzServer(t, echoBatcher{bad: bad})
	body := `{"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1]}]}`
	for _, accept := range []string{"", "gzip"} {
		t.Run("accept-encoding="+accept, func(t *testing.T) {
			ans := exchange(t, base, fmt.Appendf(nil, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\nAccept-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s", accept, len(body), body), false)
			msg, ok := kserve.ParseErrorBody(ans.body)
			if ans.status != http.StatusInternalServerError || !ok || !strings.Contains(msg, "INT33") {
				t.Fatalf("status %d body %q; want 500 with an error naming the bad datatype", ans.status, ans.body)
			}
		})
	}
}

// The passthrough's body limit answers 413 in the KServe form too.
func TestPassthroughBodyLimit(t *testing.T) {
	base := newFuzzServer(t, echoBatcher{})
	for _, framing := range []string{"sized", "chunked"} {
		body := strings.Repeat("x", fuzzBodyLimit+1)
		raw := fmt.Sprintf("POST /v2/models/other/infer HTTP/1.1\r\nHost: p\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if framing == "chunked" {
			raw = fmt.Sprintf("POST /v2/models/other/infer HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		}
		ans := exchange(t, base, []byte(raw), false)
		if msg, ok := kserve.ParseErrorBody(ans.body); ans.status != http.StatusRequestEntityTooLarge || !ok || !strings.Contains(msg, "exceeds") {
			t.Fatalf("%s: status %d body %q; want 413 with a KServe error", framing, ans.status, ans.body)
		}
	}
}
