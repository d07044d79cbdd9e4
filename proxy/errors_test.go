package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/proxy"
)

// failBatcher batches the model "simple" and answers every call with err.
type failBatcher struct{ err error }

func (failBatcher) Model(name string) (int, bool) { return 8, name == "simple" }
func (failBatcher) Delivered(dispatcher.Result)   {}
func (b failBatcher) Submit(context.Context, string, *dispatcher.Call) dispatcher.Result {
	return dispatcher.Result{Err: b.err}
}

// TestErrorContentTypeAsTriton: an error answer has the Content-Type
// Triton gives an error of its kind (tritonserver 2.51): application/json
// for a request that cannot be read as it is, text/plain for the others
// (an inference's error, a queue timeout, an unknown model, a malformed
// header), and Triton's own for Triton's answer passed back. The body is
// a KServe v2 error whatever the type.
func TestErrorContentTypeAsTriton(t *testing.T) {
	good := `{"inputs":[{"name":"IN","datatype":"INT32","shape":[1,1],"data":[1]}]}`
	tests := []struct {
		name       string
		body       string
		header     map[string]string
		err        error // the batcher's answer
		wantStatus int
		wantType   string
	}{
		{"JSON the proxy cannot read", `{not json`, nil, nil, 400, "application/json"},
		{"a bad Inference-Header-Content-Length", good, map[string]string{kserve.HeaderContentLength: "999"}, nil, 400, "text/plain"},
		{"a request the dispatcher refuses", good, nil, kserve.BadRequest("inference request batch-size must be <= 8 for 'simple'"), 400, "application/json"},
		{"Triton's 500 passed back", good, nil, &kserve.Error{Status: 500, Msg: "IN holds the sentinel -1", ContentType: "text/plain"}, 500, "text/plain"},
		{"Triton's 400 passed back", good, nil, &kserve.Error{Status: 400, Msg: "unexpected shape", ContentType: "application/json"}, 400, "application/json"},
		{"a queue timeout", good, nil, &kserve.Error{Status: 503, Msg: "Request timeout expired"}, 503, "text/plain"},
		{"an unknown model", good, nil, fmt.Errorf("%w: simple", dispatcher.ErrUnknownModel), 404, "text/plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := startFront(t, proxy.Options{Backend: door.Backend{Batcher: failBatcher{tt.err}},
				Upstream: mustURL("http://triton.invalid:8000"), Forward: fakeUpstream{}, MaxBodyBytes: 1 << 20})
			req, _ := http.NewRequest(http.MethodPost, base+"/v2/models/simple/infer", strings.NewReader(tt.body))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			msg, ok := kserve.ParseErrorBody(body)
			got := fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			if want := fmt.Sprintf("%d %s", tt.wantStatus, tt.wantType); got != want || !ok || msg == "" {
				t.Errorf("answered %s %q; want %s with a KServe v2 error body", got, body, want)
			}
		})
	}
}
