package server_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	v3 "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
)

// serve's answers carry the ORCA header, and its /metrics the pod-level
// gauges, once the model's line is learnt.
func TestServeLoadReport(t *testing.T) {
	em := startEmulator(t, emulator.Options{TimeScale: 1})
	base, admin, _ := startProxy(t, em.Addr(), func(c *config.Config) { c.Policy.Name = "adhoc" })
	ask := func(path string, body []byte, format string) *v3.OrcaLoadReport {
		t.Helper()
		method := http.MethodPost
		if body == nil {
			method = http.MethodGet
		}
		req, _ := http.NewRequest(method, base+path, bytes.NewReader(body))
		req.Header.Set("endpoint-load-metrics-format", format)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		v := resp.Header.Get("endpoint-load-metrics")
		if format != "JSON" {
			if !strings.HasPrefix(v, "TEXT ") || !strings.Contains(v, "named_metrics.queue_rows=") {
				t.Fatalf("%s %s: endpoint-load-metrics %q", method, path, v)
			}
			return nil
		}
		var rep v3.OrcaLoadReport
		if err := protojson.Unmarshal([]byte(strings.TrimPrefix(v, "JSON ")), &rep); err != nil {
			t.Fatalf("%s %s: endpoint-load-metrics %q: %v", method, path, v, err)
		}
		return &rep
	}
	ask("/v2/health/ready", nil, "")
	ask("/v2/models/simple/infer", simpleBody("a", 1, 1), "")
	waitUntil(t, "a learnt line in the load report", func() bool {
		ask("/v2/models/simple/infer", simpleBody("b", 1, 2), "")
		_, ok := ask("/v2/models/simple/infer", simpleBody("c", 1, 1), "JSON").NamedMetrics["capacity_rps"]
		return ok
	})
	_, text := getText(t, admin+"/metrics")
	for _, g := range []string{"ratebatch_waiting_rows ", "ratebatch_running_rows ", "ratebatch_capacity_rows_per_second "} {
		if !strings.Contains(text, "\n"+g) {
			t.Errorf("/metrics has no %s", g)
		}
	}
}
