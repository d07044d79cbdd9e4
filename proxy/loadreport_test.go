package proxy_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ratebatch/ratebatch/proxy"
)

// Every answer carries the endpoint-load-metrics header in the form the
// request asks for: a batched answer, a batched error, a pass-through
// answer, a refused body.
func TestLoadReportOnEveryAnswer(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("endpoint-load-metrics", "TEXT from=triton") // replaced, not doubled
		io.WriteString(w, `{"live":true}`)
	})
	var mu sync.Mutex
	var formats []string
	front, _ := passFrontWith(t, up, func(o *proxy.Options) {
		o.MaxBodyBytes = 1 << 10
		o.LoadReport = func(format []byte) string {
			mu.Lock()
			formats = append(formats, string(format))
			mu.Unlock()
			if strings.EqualFold(string(format), "json") {
				return `JSON {"rpsFractional":1}`
			}
			return "TEXT rps_fractional=1"
		}
	})
	infer := `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,1],"data":[1]}]}`
	for _, c := range []struct {
		name, method, path, format, body string
		status                           int
		want                             string
	}{
		{"batched", "POST", "/v2/models/simple/infer", "", infer, 200, "TEXT rps_fractional=1"},
		{"batched json", "POST", "/v2/models/simple/infer", "JSON", infer, 200, `JSON {"rpsFractional":1}`},
		{"too many rows", "POST", "/v2/models/simple/infer", "text", strings.Replace(infer, "[1,1]", "[9,1]", 1), 400, "TEXT rps_fractional=1"},
		{"bad body", "POST", "/v2/models/simple/infer", "", "{", 400, "TEXT rps_fractional=1"},
		{"too large", "POST", "/v2/models/simple/infer", "", strings.Repeat(" ", 2<<10), 413, "TEXT rps_fractional=1"},
		{"pass-through", "GET", "/v2/health/live", "", "", 200, "TEXT rps_fractional=1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, front+c.path, strings.NewReader(c.body))
			if c.format != "" {
				req.Header.Set("endpoint-load-metrics-format", c.format)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.status {
				t.Errorf("status %d, want %d", resp.StatusCode, c.status)
			}
			if got := resp.Header.Values("endpoint-load-metrics"); len(got) != 1 || got[0] != c.want {
				t.Errorf("endpoint-load-metrics %q, want [%q]", got, c.want)
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if formats[1] != "JSON" || formats[2] != "text" {
		t.Errorf("formats handed to LoadReport %q", formats)
	}
}
