package server_test

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	v3 "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// serve's answers carry the ORCA header, and its /metrics the pod-level
// gauges, once the model's line is learnt.
func TestServeLoadReport(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
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
	testpoll.Until(t, "a learnt line in the load report", func() bool {
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

// With orca.haproxy_agent_listen, serve answers HAProxy's agent check with
// its capacity as a percentage of orca.haproxy_agent_full_rps.
func TestServeHAProxyAgent(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	lt := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Policy.Name = "adhoc"
		c.ORCA.HAProxyAgentListen, c.ORCA.HAProxyAgentFullRPS = "127.0.0.1:0", 1000
	})
	agent := func() string {
		c, err := net.Dial("tcp", lt.AgentAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// The agent's N% is 100 * capacity_rps / 1000 of a report at most
	// 100 ms old: compare with the header of an answer just before.
	capacity := func() float64 {
		req, _ := http.NewRequest(http.MethodPost, lt.Base+"/v2/models/simple/infer", bytes.NewReader(simpleBody("a", 1, 2)))
		req.Header.Set("endpoint-load-metrics-format", "JSON")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		var rep v3.OrcaLoadReport
		if err := protojson.Unmarshal([]byte(strings.TrimPrefix(resp.Header.Get("endpoint-load-metrics"), "JSON ")), &rep); err != nil {
			t.Fatal(err)
		}
		return rep.NamedMetrics["capacity_rps"]
	}
	var last string
	testpoll.Until(t, "the agent's weight to follow the learnt capacity", func() bool {
		c := capacity()
		last = agent()
		var pct float64
		if _, err := fmt.Sscanf(last, "up %g%%\n", &pct); err != nil || c <= 0 {
			return false
		}
		return math.Abs(pct-c/10) <= math.Max(1, 0.05*c/10)
	})
}
