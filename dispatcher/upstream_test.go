package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/kserve"
)

// A port nothing listens on refuses the connection: a ConnError with Dial
// set, which marks the upstream down.
func TestHTTPUpstreamRefusedIsDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	u, err := NewHTTPUpstream("http://"+addr, 4, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = u.Infer(context.Background(), "m", "", oneRow(t), Outgoing{})
	var ce *ConnError
	if !errors.As(err, &ce) || !ce.Dial {
		t.Fatalf("Infer to a closed port: %v, want a *ConnError with Dial set", err)
	}
}

// oneRow is a batch of one row of one INT32 input.
func oneRow(t *testing.T) *kserve.Batch {
	t.Helper()
	in, _ := kserve.NewTensor("X", []int64{1}, []int32{1})
	b, err := kserve.Merge([]*kserve.Request{{Inputs: []kserve.Tensor{in}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// An error answer keeps the Content-Type Triton gave it, which its callers
// get (Reply.ContentType); a 200's is not copied.
func TestHTTPUpstreamKeepsAnErrorsContentType(t *testing.T) {
	for _, tt := range []struct {
		status    int
		ctype     string
		wantCtype string
	}{
		{500, "text/plain", "text/plain"},
		{400, "application/json", "application/json"},
		{200, "application/json", ""},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", tt.ctype)
			w.WriteHeader(tt.status)
			w.Write(kserve.AppendErrorBody(nil, "x"))
		}))
		u, err := NewHTTPUpstream(srv.URL, 4, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		in, _ := kserve.NewTensor("X", []int64{1}, []int32{1})
		b, _ := kserve.Merge([]*kserve.Request{{Inputs: []kserve.Tensor{in}}})
		reply, err := u.Infer(context.Background(), "m", "", b, Outgoing{})
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		if reply.Status != tt.status || reply.ContentType != tt.wantCtype {
			t.Errorf("answer %d %s: reply %d with Content-Type %q, want %q", tt.status, tt.ctype, reply.Status, reply.ContentType, tt.wantCtype)
		}
		reply.Free()
	}
}

// seenRequest is what a test server saw of one request.
type seenRequest struct {
	path, host, ctype, headerLen string
	body                         []byte
}

// Every body reaches Triton whole, at the model's path under the upstream
// URL's, with the headers its form needs: a binary body its
// Inference-Header-Content-Length, a JSON one (a lone caller's request as
// it came) none and a JSON content type.
func TestHTTPUpstreamSendsEachForm(t *testing.T) {
	got := make(chan seenRequest, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seenRequest{r.URL.EscapedPath(), r.Host, r.Header.Get("Content-Type"), r.Header.Get(kserve.HeaderContentLength), body}
		w.Header().Set(kserve.HeaderContentLength, "2")
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	for _, prefix := range []string{"", "/triton"} {
		t.Run("prefix="+prefix, func(t *testing.T) { sendEachForm(t, srv.URL, prefix, got) })
	}
}

// sendEachForm sends every form of body through an upstream at base+prefix
// and checks what the server saw.
func sendEachForm(t *testing.T, base, prefix string, got <-chan seenRequest) {
	u, err := NewHTTPUpstream(base+prefix+"/", 4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in, _ := kserve.NewTensor("X", []int64{1}, []int32{7})
	req := &kserve.Request{ID: "a", Inputs: []kserve.Tensor{in}}
	merged, err := kserve.Merge([]*kserve.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	mergedBody, mergedLen := merged.AppendBody(nil)
	big := make([]int32, streamAbove) // streamed, not assembled
	bigIn, _ := kserve.NewTensor("X", []int64{1, streamAbove}, big)
	bigBatch, err := kserve.Merge([]*kserve.Request{{Inputs: []kserve.Tensor{bigIn}}})
	if err != nil {
		t.Fatal(err)
	}
	bigBody, bigLen := bigBatch.AppendBody(nil)
	jsonBody, _, _ := kserve.AppendRequest(nil, req, false)
	binBody, binLen, _ := kserve.AppendRequest(nil, req, true)
	for _, tt := range []struct {
		name                string
		body                Body
		model, version      string
		wantBody            []byte
		wantCtype, wantHLen string
	}{
		{"merged", merged, "m", "", mergedBody, "application/octet-stream", strconv.Itoa(mergedLen)},
		{"merged again", merged, "m", "", mergedBody, "application/octet-stream", strconv.Itoa(mergedLen)}, // path cached
		{"merged streamed", bigBatch, "a b", "", bigBody, "application/octet-stream", strconv.Itoa(bigLen)},
		{"wire binary", wireBody{&Wire{Body: binBody, HeaderLen: binLen}}, "m", "2", binBody, "application/octet-stream", strconv.Itoa(binLen)},
		{"wire json", wireBody{&Wire{Body: jsonBody, HeaderLen: -1}}, "m", "", jsonBody, "application/json", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reply, err := u.Infer(context.Background(), tt.model, tt.version, tt.body, Outgoing{})
			if err != nil {
				t.Fatal(err)
			}
			defer reply.Free()
			s := <-got
			if want := prefix + InferPath(tt.model, tt.version); s.path != want {
				t.Errorf("path %q, want %q", s.path, want)
			}
			if want := strings.TrimPrefix(base, "http://"); s.host != want {
				t.Errorf("Host %q, want %q", s.host, want)
			}
			if s.ctype != tt.wantCtype || s.headerLen != tt.wantHLen {
				t.Errorf("Content-Type %q, header length %q; want %q, %q", s.ctype, s.headerLen, tt.wantCtype, tt.wantHLen)
			}
			if !bytes.Equal(s.body, tt.wantBody) {
				t.Errorf("body of %d bytes differs from the %d sent", len(s.body), len(tt.wantBody))
			}
			if reply.Status != http.StatusOK || reply.HeaderLen != 2 || string(reply.Body) != "{}" {
				t.Errorf("reply %d %q (header length %d)", reply.Status, reply.Body, reply.HeaderLen)
			}
		})
	}
}

func TestIsDialError(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Err: errors.New("connect: connection refused")}, false}, // text alone does not count
		{&net.OpError{Op: "dial", Err: syscallErr("ECONNREFUSED")}, true},
		{&net.OpError{Op: "dial", Err: syscallErr("EHOSTUNREACH")}, true},
		{&net.OpError{Op: "dial", Err: syscallErr("ETIMEDOUT")}, false}, // busy, not down
		{&net.OpError{Op: "read", Err: syscallErr("ECONNRESET")}, false},
	} {
		if got := IsRefused(tt.err); got != tt.want {
			t.Errorf("IsRefused(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func syscallErr(name string) error {
	switch name {
	case "ECONNREFUSED":
		return syscall.ECONNREFUSED
	case "EHOSTUNREACH":
		return syscall.EHOSTUNREACH
	case "ETIMEDOUT":
		return syscall.ETIMEDOUT
	}
	return syscall.ECONNRESET
}

// What a request carries besides its body reaches Triton: the callers'
// forwarded headers and a lone caller's traceparent on a batch's request
// (a tracer's traceparent wins over the caller's), the proxy's own
// headers on its probes and never on a batch.
func TestHTTPUpstreamSendsTheHeaders(t *testing.T) {
	got := make(chan http.Header, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	u, err := NewHTTPUpstream(srv.URL, 4, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	u.OwnHeader = map[string]string{"X-Proxy-Key": "p"}
	body := wireBody{&Wire{Body: []byte(`{"inputs":[]}`), HeaderLen: -1}}
	send := func(out Outgoing) http.Header {
		t.Helper()
		reply, err := u.Infer(context.Background(), "m", "", body, out)
		if err != nil {
			t.Fatal(err)
		}
		reply.Free()
		return <-got
	}
	h := send(Outgoing{Header: forwarded("authorization", "Bearer a", "x-tenant", "t1"), Trace: "00-caller"})
	if h.Get("Authorization") != "Bearer a" || h.Get("X-Tenant") != "t1" || h.Get("Traceparent") != "00-caller" || h.Get("X-Proxy-Key") != "" {
		t.Fatalf("a batch's request carried %v, want its callers' headers and traceparent, not the proxy's own", h)
	}
	u.Header = func(_ context.Context, h *fasthttp.RequestHeader) { h.Set("traceparent", "00-batch-span") }
	if h := send(Outgoing{Trace: "00-caller"}); h.Get("Traceparent") != "00-batch-span" {
		t.Fatalf("traceparent %q with the proxy tracing, want its batch span's", h.Get("Traceparent"))
	}
	reply, err := u.InferWithin("m", "", body, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	reply.Free()
	if h := <-got; h.Get("X-Proxy-Key") != "p" || h.Get("Authorization") != "" {
		t.Fatalf("a probe carried %v, want the proxy's own headers", h)
	}
}

// The request line sent upstream is exactly the path InferPath built:
// escaped, never decoded or normalised. A model or version holding a
// slash or a dot segment (the doors refuse those, door.CheckModel and
// door.Version, but this client must not depend on it) reaches the path
// it names and no other.
func TestHTTPUpstreamSendsThePathItBuilt(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.RequestURI // the request line's target as sent
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"outputs":[]}`)
	}))
	defer srv.Close()
	for _, prefix := range []string{"", "/triton"} {
		u, err := NewHTTPUpstream(srv.URL+prefix, 4, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b := oneRow(t)
		for _, c := range []struct{ model, version string }{
			{"simple", "../../image"},
			{"simple", "..%2F..%2Fimage"},
			{"../image", ""},
			{"simple/../image", "1"},
			{"a b", "./1"},
		} {
			want := prefix + InferPath(c.model, c.version)
			reply, err := u.Infer(context.Background(), c.model, c.version, b, Outgoing{})
			if err != nil {
				t.Fatalf("Infer(%q, %q): %v", c.model, c.version, err)
			}
			reply.Free()
			if line := <-got; line != want {
				t.Errorf("Infer(%q, %q) sent %q upstream, want the path built, %q", c.model, c.version, line, want)
			}
		}
	}
}
