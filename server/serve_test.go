package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// queueStatus is model's queue as the admin /status endpoint reports it.
func queueStatus(t *testing.T, admin, model string) dispatcher.Snapshot {
	t.Helper()
	code, body := getText(t, admin+"/status")
	var st struct {
		Queues []dispatcher.Snapshot `json:"queues"`
	}
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("GET /status: %d %.200s", code, body)
	}
	for _, q := range st.Queues {
		if q.Model == model {
			return q
		}
	}
	return dispatcher.Snapshot{Model: model}
}

// startProxy runs `ratebatch serve` in-process against upstream and waits
// until it has discovered the upstream's models (see startLive).
func startProxy(t *testing.T, upstream string, edit func(*config.Config)) (base, admin string, stop func()) {
	t.Helper()
	lt := servertest.Start(t, upstream, nil, edit)
	return lt.Base, lt.Admin, lt.Stop
}

// simpleBody is a JSON request for `simple` whose INPUT0 row r is base+r.
func simpleBody(id string, base, rows int) []byte {
	a, b := make([]string, rows*16), make([]string, rows*16)
	for i := range a {
		a[i] = fmt.Sprint(base + i/16)
		b[i] = fmt.Sprint(i % 16)
	}
	return fmt.Appendf(nil, `{"id":%q,"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[%d,16],"data":[%s]},`+
		`{"name":"INPUT1","datatype":"INT32","shape":[%d,16],"data":[%s]}]}`,
		id, rows, strings.Join(a, ","), rows, strings.Join(b, ","))
}

type inferReply struct {
	ID      string `json:"id"`
	Outputs []struct {
		Name  string  `json:"name"`
		Shape []int64 `json:"shape"`
		Data  []int64 `json:"data"`
	} `json:"outputs"`
	Error string `json:"error"`
}

func post(t *testing.T, url string, body []byte) (int, inferReply, http.Header) {
	t.Helper()
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("POST %s: %v", url, err)
		return 0, inferReply{}, nil
	}
	defer resp.Body.Close()
	var r inferReply
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &r); err != nil {
		t.Errorf("POST %s: %d %q is not JSON: %v", url, resp.StatusCode, data, err)
	}
	return resp.StatusCode, r, resp.Header
}

// checkSimple verifies that r answers the request simpleBody(id, base, rows).
func checkSimple(r inferReply, id string, base, rows int) error {
	if r.ID != id {
		return fmt.Errorf("id %q, want %q", r.ID, id)
	}
	if len(r.Outputs) != 2 {
		return fmt.Errorf("%d outputs, want 2", len(r.Outputs))
	}
	for _, o := range r.Outputs {
		if len(o.Shape) != 2 || o.Shape[0] != int64(rows) || len(o.Data) != rows*16 {
			return fmt.Errorf("%s shape %v with %d values, want [%d,16]", o.Name, o.Shape, len(o.Data), rows)
		}
		for i, v := range o.Data {
			a, b := int64(base+i/16), int64(i%16)
			want := a + b
			if o.Name == "OUTPUT1" {
				want = a - b
			}
			if v != want {
				return fmt.Errorf("%s[%d] = %d, want %d: not this caller's answer", o.Name, i, v, want)
			}
		}
	}
	return nil
}

func getText(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServeEachCallerGetsItsOwnAnswer(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	base, admin, _ := startProxy(t, em.Addr(), func(c *config.Config) { c.Policy.Name = "adhoc" })

	const callers = 48
	var wg sync.WaitGroup
	var failures atomic.Int32
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rows := 1 + i%3
			id := fmt.Sprintf("req-%d", i)
			code, r, _ := post(t, base+"/v2/models/simple/infer", simpleBody(id, i*1000, rows))
			if code != 200 {
				t.Errorf("%s: status %d: %s", id, code, r.Error)
				failures.Add(1)
				return
			}
			if err := checkSimple(r, id, i*1000, rows); err != nil {
				t.Errorf("%s: %v", id, err)
				failures.Add(1)
			}
		}()
	}
	wg.Wait()
	if failures.Load() > 0 {
		t.FailNow()
	}

	// Batches larger than 1 formed, and the proxy's count agrees with the
	// emulator's statistics.
	st, ok := em.Stats("simple")
	if !ok {
		t.Fatal("no emulator stats")
	}
	rows, executions, biggest := uint64(0), uint64(0), uint64(0)
	for _, b := range st.BatchStats {
		rows += b.BatchSize * b.ComputeInfer.Count
		executions += b.ComputeInfer.Count
		if b.ComputeInfer.Count > 0 {
			biggest = max(biggest, b.BatchSize)
		}
	}
	if want := uint64(callers + callers/3*3); rows != want {
		t.Fatalf("emulator executed %d rows, want %d", rows, want)
	}
	if biggest < 2 {
		t.Fatalf("no batch larger than 1 reached the emulator: %+v", st.BatchStats)
	}
	_, metrics := getText(t, admin+"/metrics")
	want := fmt.Sprintf(`ratebatch_batch_size_count{model="simple"} %d`, executions)
	if !strings.Contains(metrics, want) {
		t.Fatalf("proxy metrics lack %q (emulator ran %d batches)", want, executions)
	}
	if !strings.Contains(metrics, fmt.Sprintf(`ratebatch_requests_accepted_total{model="simple"} %d`, callers)) ||
		!strings.Contains(metrics, fmt.Sprintf(`ratebatch_requests_answered_total{model="simple",outcome="ok"} %d`, callers)) {
		t.Fatalf("accounting metrics do not show %d accepted and answered", callers)
	}
}

func TestServePassthroughMatchesUpstream(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	base, _, _ := startProxy(t, em.Addr(), nil)
	direct := "http://" + em.Addr()
	for _, path := range []string{"/v2", "/v2/health/ready", "/v2/health/live", "/v2/models/simple",
		"/v2/models/simple/config", "/v2/models/simple/ready", "/v2/models/nope", "/v2/models/nope/config"} {
		wantCode, wantBody := getText(t, direct+path)
		gotCode, gotBody := getText(t, base+path)
		if gotCode != wantCode || gotBody != wantBody {
			t.Errorf("GET %s through the proxy: %d %q, direct: %d %q", path, gotCode, gotBody, wantCode, wantBody)
		}
	}
	resp, err := http.Post(base+"/v2/repository/index", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"simple"`) {
		t.Fatalf("repository index through the proxy: %d %s", resp.StatusCode, b)
	}
}

func TestServeErrors(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(emulator.BatchInfo) emulator.Fault {
		return emulator.Fault{Delay: 50 * time.Millisecond}
	}})
	base, admin, _ := startProxy(t, em.Addr(), func(c *config.Config) {
		c.Policy.Name = "adhoc"
		c.Limits.QueueRows = 8
		c.Limits.MaxBodyBytes = 64 << 10
	})
	url := base + "/v2/models/simple/infer"
	tests := []struct {
		name   string
		body   string
		status int
		msg    string
	}{
		{"not JSON", `{"inputs": [`, 400, ""},
		{"wrong element count", `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[1,2]},{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1,2]}]}`, 400, "INPUT0"},
		{"unknown datatype", `{"inputs":[{"name":"INPUT0","datatype":"INT33","shape":[1,1],"data":[1]}]}`, 400, "INT33"},
		{"over max batch", string(simpleBody("x", 0, 9)), 400, "batch-size must be <= 8"},
		{"oversize body", `{"inputs":[` + strings.Repeat(" ", 70<<10) + `]}`, 413, "exceeds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, r, _ := post(t, url, []byte(tt.body))
			if code != tt.status || r.Error == "" || !strings.Contains(r.Error, tt.msg) {
				t.Fatalf("status %d error %q, want %d mentioning %q", code, r.Error, tt.status, tt.msg)
			}
		})
	}

	// Overload: 8 rows fit the queue while a batch runs; a burst beyond gets 503.
	var wg sync.WaitGroup
	var ok, overloaded atomic.Int32
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, r, h := post(t, url, simpleBody(fmt.Sprint(i), i, 1))
			switch code {
			case 200:
				ok.Add(1)
			case 503:
				if h.Get("Retry-After") == "" || r.Error == "" {
					t.Errorf("503 without Retry-After or error body")
				}
				overloaded.Add(1)
			default:
				t.Errorf("status %d: %s", code, r.Error)
			}
		}()
	}
	wg.Wait()
	if overloaded.Load() == 0 || ok.Load() == 0 {
		t.Fatalf("burst of 40: %d ok, %d 503; want both", ok.Load(), overloaded.Load())
	}
	_, m := getText(t, admin+"/metrics")
	if !strings.Contains(m, `ratebatch_requests_rejected_total{model="simple",reason="queue_full"}`) {
		t.Fatal("queue_full rejections not in metrics")
	}
}

func TestServeUpstreamRestartLosesNothing(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	addr := em.Addr()
	base, admin, _ := startProxy(t, addr, func(c *config.Config) { c.Policy.Name = "adhoc" })
	url := base + "/v2/models/simple/infer"

	var answered, okCount atomic.Int32
	stop := keepSending(t, 4, func(w, i int) {
		id := fmt.Sprintf("w%d-%d", w, i)
		code, r, _ := post(t, url, simpleBody(id, i, 1))
		answered.Add(1)
		switch {
		case code == 200:
			if err := checkSimple(r, id, i, 1); err != nil {
				t.Errorf("%s: %v", id, err)
			}
			okCount.Add(1)
		case code >= 500 && r.Error != "":
		default:
			t.Errorf("%s: status %d without a v2 error body", id, code)
		}
	})
	testpoll.Until(t, "traffic flowing", func() bool { return okCount.Load() > 0 })
	em.Close() // killed mid-traffic
	testpoll.Until(t, "the proxy to mark the upstream down", func() bool {
		_, m := getText(t, admin+"/metrics")
		return metricValue(m, `ratebatch_upstream_errors_total{kind="marked_down",model="simple"}`) > 0
	})
	if err := em.Start(addr, ""); err != nil {
		t.Fatalf("restarting the emulator: %v", err)
	}
	before := okCount.Load()
	testpoll.Until(t, "a request to succeed after the restart", func() bool { return okCount.Load() > before })
	stop()
	if okCount.Load() <= before {
		t.Fatal("no request succeeded after the upstream came back")
	}
	_, m := getText(t, admin+"/metrics")
	acc := metricValue(m, `ratebatch_requests_accepted_total{model="simple"}`)
	ans := metricValue(m, `ratebatch_requests_answered_total{model="simple",outcome="ok"}`) +
		metricValue(m, `ratebatch_requests_answered_total{model="simple",outcome="error"}`)
	if acc == 0 || acc != ans {
		t.Fatalf("accepted %v != answered %v", acc, ans)
	}
}

func metricValue(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func TestServeAdminPolicyChangeNeedsToken(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	_, admin, _ := startProxy(t, em.Addr(), nil)
	var answer []byte
	put := func(token, body string) int {
		req, _ := http.NewRequest(http.MethodPut, admin+"/policy", strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := put("", `{"policy":"adhoc"}`); c != 401 {
		t.Fatalf("no token: %d, want 401", c)
	}
	if c := put("wrong", `{"policy":"adhoc"}`); c != 401 {
		t.Fatalf("wrong token: %d, want 401", c)
	}
	if c := put("test-token", `{"policy":"fastest"}`); c != 400 {
		t.Fatalf("unknown policy: %d, want 400", c)
	}
	if c := put("test-token", `{"model":"simple","policy":"adhoc"}`); c != 200 {
		t.Fatalf("good change: %d, want 200", c)
	}
	// The answer is what was set, short; the change is in force by then.
	var changed struct {
		Model  string   `json:"model"`
		Policy string   `json:"policy"`
		Models []string `json:"models"`
	}
	if err := json.Unmarshal(answer, &changed); err != nil {
		t.Fatalf("PUT /policy answer is not JSON: %v: %s", err, answer)
	}
	if changed.Model != "simple" || changed.Policy != "adhoc" || len(changed.Models) != 1 || changed.Models[0] != "simple" || len(answer) > 200 {
		t.Errorf("PUT /policy answered %s", answer)
	}
	// /status and GET /policy show the policy in force.
	type status struct {
		Models []struct {
			Model   string         `json:"model"`
			Policy  string         `json:"policy"`
			Options map[string]any `json:"options"`
			Rule    struct {
				Policy string `json:"policy"`
			} `json:"rule"`
		} `json:"models"`
		Config struct {
			Policy struct {
				Name          string `json:"name"`
				Window        string `json:"window"`
				LatencyBudget string `json:"latency_budget"`
			} `json:"policy"`
		} `json:"config"`
	}
	read := func(path string, v any) string {
		t.Helper()
		code, body := getText(t, admin+path)
		if code != 200 || json.Unmarshal([]byte(body), v) != nil {
			t.Fatalf("GET %s: %d %s", path, code, body)
		}
		return body
	}
	var st status
	body := read("/status", &st)
	if strings.Contains(body, "test-token") {
		t.Fatal("status leaks the admin token")
	}
	if st.Config.Policy.Window == "" {
		t.Errorf("status config lacks policy.window in YAML spelling: %s", body)
	}
	for _, m := range st.Models {
		if m.Model == "simple" && (m.Policy != "adhoc" || m.Rule.Policy != "adhoc") {
			t.Errorf("status: simple runs %q (rule %q), want adhoc", m.Policy, m.Rule.Policy)
		}
	}
	// The budget policy with its latency budget, at run time: one model,
	// then every one.
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"model":"simple","policy":"budget","latency_budget":"0.5x"}`, 400},
		{`{"model":"simple","policy":"adhoc","latency_budget":"1.2x"}`, 400},
		{`{"model":"simple","policy":"budget","latency_budget":"1.25x"}`, 200},
	} {
		if c := put("test-token", tc.body); c != tc.want {
			t.Fatalf("%s: %d, want %d", tc.body, c, tc.want)
		}
	}
	var pols struct {
		Models []struct {
			Model   string         `json:"model"`
			Policy  string         `json:"policy"`
			Options map[string]any `json:"options"`
		} `json:"models"`
	}
	body = read("/policy", &pols)
	found := false
	for _, m := range pols.Models {
		if m.Model == "simple" {
			found = m.Policy == "budget" && m.Options["latency_budget"] == "1.25x"
		}
	}
	if !found {
		t.Errorf("GET /policy does not show simple's budget of 1.25x: %s", body)
	}
	if c := put("test-token", `{"policy":"budget","latency_budget":"1.2x"}`); c != 200 {
		t.Fatalf("every model's budget: %d %s", c, answer)
	}
	st = status{}
	body = read("/status", &st)
	if st.Config.Policy.Name != "budget" || st.Config.Policy.LatencyBudget != "1.2x" {
		t.Errorf("status config.policy after a change for every model: %+v in %s", st.Config.Policy, body)
	}
	for _, m := range st.Models {
		if m.Model == "simple" && (m.Policy != "budget" || m.Options["latency_budget"] != "1.2x") {
			t.Errorf("status: simple runs %q with %v, want budget 1.2x", m.Policy, m.Options["latency_budget"])
		}
	}
}

func TestServeAdminPprofOnlyWhenEnabled(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	for _, on := range []bool{false, true} {
		_, admin, _ := startProxy(t, em.Addr(), func(c *config.Config) { c.AdminPprof = on })
		if code, _ := getText(t, admin+"/debug/pprof/goroutine?debug=1"); code != map[bool]int{false: 404, true: 401}[on] {
			t.Fatalf("admin_pprof %v: GET /debug/pprof/goroutine without the token = %d", on, code)
		}
		req, _ := http.NewRequest(http.MethodGet, admin+"/debug/pprof/goroutine?debug=1", nil)
		req.Header.Set("Authorization", "Bearer test-token") // servertest's
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body := resp.StatusCode, string(b)
		if want := map[bool]int{false: 404, true: 200}[on]; code != want {
			t.Fatalf("admin_pprof %v: GET /debug/pprof/goroutine with the token = %d, want %d", on, code, want)
		}
		if on && !strings.Contains(body, "goroutine profile") {
			t.Fatalf("admin_pprof on: not a goroutine profile: %.200s", body)
		}
	}
}

func TestServeCompressionAndBinary(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	base, _, _ := startProxy(t, em.Addr(), nil)
	url := base + "/v2/models/simple/infer"

	// A gzip-encoded request, and a gzip-encoded answer because we accept it.
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write(simpleBody("gz", 7, 2))
	zw.Close()
	req, _ := http.NewRequest(http.MethodPost, url, &zbuf)
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := http.DefaultTransport.RoundTrip(req) // no transparent decompression
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("status %d, Content-Encoding %q; want 200 gzip", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var r inferReply
	if err := json.NewDecoder(zr).Decode(&r); err != nil {
		t.Fatal(err)
	}
	if err := checkSimple(r, "gz", 7, 2); err != nil {
		t.Fatal(err)
	}

	// The binary tensor extension both ways: binary inputs, binary outputs.
	a, b := make([]int32, 16), make([]int32, 16)
	for i := range a {
		a[i], b[i] = int32(100+i), int32(i)
	}
	in0, _ := kserve.NewTensor("INPUT0", []int64{1, 16}, a)
	in1, _ := kserve.NewTensor("INPUT1", []int64{1, 16}, b)
	kreq := &kserve.Request{ID: "bin", Inputs: []kserve.Tensor{in0, in1},
		Outputs: []kserve.RequestedOutput{{Name: "OUTPUT1", Parameters: kserve.Parameters{"binary_data": true}}}}
	body, hl, err := kserve.AppendRequest(nil, kreq, true)
	if err != nil {
		t.Fatal(err)
	}
	hreq, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	hreq.Header.Set(kserve.HeaderContentLength, fmt.Sprint(hl))
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	rhl, err := kserve.ParseHeaderLength(hresp.Header.Get(kserve.HeaderContentLength), len(data))
	if err != nil || hresp.StatusCode != 200 {
		t.Fatalf("status %d, header length %v: %s", hresp.StatusCode, err, data)
	}
	kresp, err := kserve.DecodeResponse(data, rhl)
	if err != nil {
		t.Fatal(err)
	}
	if len(kresp.Outputs) != 1 || kresp.Outputs[0].Name != "OUTPUT1" || !kresp.Outputs[0].Binary {
		t.Fatalf("want only OUTPUT1 in binary form, got %+v", kresp.Outputs)
	}
	diff, _ := kresp.Outputs[0].Int32s()
	for i := range diff {
		if diff[i] != 100 {
			t.Fatalf("OUTPUT1[%d] = %d, want 100", i, diff[i])
		}
	}
}

// TestServeTimeoutParameter: a request's timeout is Triton's, read by the
// model's queue policy: a model whose policy lets a request shorten its
// default timeout refuses a request past its own with Triton's 503
// "Request timeout expired" and does not keep it waiting for the busy
// batch; a model without a queue policy ignores the timeout, as Triton
// does, even the largest. priority is Triton's uint64.
func TestServeTimeoutParameter(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Fault: func(emulator.BatchInfo) emulator.Fault {
		return emulator.Fault{Delay: 300 * time.Millisecond}
	}})
	up := newConfigUpstream(t, em.Addr())
	up.set("simple", map[string]any{"dynamic_batching": map[string]any{"max_queue_delay_microseconds": "0",
		"default_queue_policy": map[string]any{"timeout_action": "REJECT", "default_timeout_microseconds": "10000000", "allow_timeout_override": true}}})
	base, admin, _ := startProxy(t, up.addr(), func(c *config.Config) { c.Policy.Name, c.Discovery = "adhoc", 100*time.Millisecond })
	url := base + "/v2/models/simple/infer"
	withParams := func(id, params string) []byte {
		return bytes.Replace(simpleBody(id, 0, 1), []byte(`{"id":"`+id+`",`), []byte(`{"id":"`+id+`","parameters":`+params+`,`), 1)
	}
	go post(t, url, simpleBody("busy", 0, 1)) // occupies the only instance
	testpoll.Until(t, "the busy batch in flight", func() bool { return queueStatus(t, admin, "simple").InFlight == 1 })
	start := time.Now()
	code, r, _ := post(t, url, withParams("late", `{"timeout":20000}`))
	if code != 503 || r.Error != "Request timeout expired" {
		t.Fatalf("status %d %q, want 503 Request timeout expired", code, r.Error)
	}
	if waited := time.Since(start); waited > 200*time.Millisecond {
		t.Fatalf("timed-out request answered after %v; it should not wait for the busy batch", waited)
	}
	for _, tc := range []struct{ id, params string }{
		{"huge", `{"timeout":9223372036854775807}`}, // 2^63-1 µs: no wrap to a timeout already past
		{"top", `{"priority":18446744073709551615}`},
	} {
		if code, r, _ := post(t, url, withParams(tc.id, tc.params)); code != 200 || r.ID != tc.id {
			t.Errorf("%s: %d %q, want 200", tc.params, code, r.Error)
		}
	}
	if code, r, _ := post(t, url, withParams("bad", `{"priority":-1}`)); code != 400 || !strings.Contains(r.Error, "priority") {
		t.Fatalf("negative priority: %d %q, want 400", code, r.Error)
	}

	// Without a queue policy Triton ignores the timeout: so does the proxy.
	up.set("simple", nil)
	testpoll.Until(t, "the proxy to read the config without a queue policy", func() bool {
		go post(t, url, simpleBody("busy", 0, 1))
		testpoll.Until(t, "the busy batch in flight", func() bool { return queueStatus(t, admin, "simple").InFlight == 1 })
		code, _, _ := post(t, url, withParams("patient", `{"timeout":20000}`))
		return code == 200
	})
}

func TestServeGracefulShutdownDrains(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	base, admin, stop := startProxy(t, em.Addr(), func(c *config.Config) {
		// A rule that would hold these requests for an hour: only the drain sends them.
		c.Policy.Name = "static"
		c.Policy.Options = c.Policy.Options.With(policy.StaticOptions{Batch: 8, HoldOptions: policy.HoldOptions{MaxWait: time.Hour}})
	})
	url := base + "/v2/models/simple/infer"
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r inferReply
			codes[i], r, _ = post(t, url, simpleBody(fmt.Sprint(i), i, 1))
			if codes[i] == 200 {
				if err := checkSimple(r, fmt.Sprint(i), i, 1); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	testpoll.Until(t, "all three queued, waiting for a batch of 8", func() bool { return queueStatus(t, admin, "simple").QueuedRows == 3 })
	// /status knows the three callers: three connections, each busy with
	// its call, none able to send a partner.
	if st := queueStatus(t, admin, "simple").Sources; !st.Known || st.Population != 3 || st.Busy != 3 || st.Idle != 0 || st.Partners != 0 || st.Unknown != 3 {
		t.Errorf("/status sources %+v: want 3 connections, all busy, not learnt yet", st)
	}
	stop() // SIGTERM
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("request %d queued at shutdown got %d, want 200 (drained)", i, c)
		}
	}
	if _, err := http.Get(base + "/v2/health/ready"); err == nil {
		t.Fatal("proxy still accepts connections after shutdown")
	}
}

func TestServeEnergyFromTritonMetrics(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, IdleWatts: 25})
	base, admin, _ := startProxy(t, em.Addr(), func(c *config.Config) {
		c.Power.Source = "triton"
		c.Power.MetricsURL = "http://" + em.MetricsAddr() + "/metrics"
		c.Power.Interval = 20 * time.Millisecond
	})
	type energyStatus struct {
		Energy struct {
			Available bool       `json:"available"`
			Time      *time.Time `json:"time"`
			Windows   map[string]struct {
				Requests         int64    `json:"requests"`
				RequestsPerJoule *float64 `json:"requests_per_joule"`
				EnergyJ          *float64 `json:"energy_joules"`
			} `json:"windows"`
		} `json:"energy"`
	}
	read := func() (energyStatus, string) {
		var st energyStatus
		_, body := getText(t, admin+"/status")
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st, body
	}
	// Requests count from the meter's first poll: wait for it, send, then
	// wait for the polls that follow the last batch.
	waitFor := func(what string, ok func(energyStatus) bool) (energyStatus, string) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			st, body := read()
			if ok(st) {
				return st, body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s", what, body)
			}
		}
	}
	waitFor("the meter never polled", func(st energyStatus) bool { return st.Energy.Time != nil })
	for i := range 30 {
		if code, r, _ := post(t, base+"/v2/models/simple/infer", simpleBody(fmt.Sprint(i), i, 2)); code != 200 {
			t.Fatalf("status %d: %s", code, r.Error)
		}
	}
	status, body := waitFor("energy window never counted the 60 rows", func(st energyStatus) bool {
		return st.Energy.Windows["total"].Requests == 60
	})
	total := status.Energy.Windows["total"]
	if !status.Energy.Available || total.RequestsPerJoule == nil || total.EnergyJ == nil {
		t.Fatalf("energy figures missing with the triton source: %s", body)
	}
	if total.Requests != 60 {
		t.Fatalf("energy window counts %d requests, want 60 rows served", total.Requests)
	}
	emJ, _ := em.EnergyJoules()
	if *total.EnergyJ <= 0 || *total.EnergyJ > emJ {
		t.Fatalf("proxy measured %v J, emulator consumed %v J in all", *total.EnergyJ, emJ)
	}
	_, m := getText(t, admin+"/metrics")
	if !strings.Contains(m, "ratebatch_requests_per_joule") {
		t.Fatal("requests per joule not exported")
	}
}

func TestServeEnergyAbsentWithoutSource(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	_, admin, _ := startProxy(t, em.Addr(), nil) // power.source none
	_, body := getText(t, admin+"/status")
	if !strings.Contains(body, `"requests_per_joule": null`) && strings.Contains(body, `"requests_per_joule"`) {
		t.Fatalf("energy figures must be null without a source: %s", body)
	}
	_, m := getText(t, admin+"/metrics")
	if strings.Contains(m, "ratebatch_requests_per_joule") || strings.Contains(m, "ratebatch_gpu_energy") {
		t.Fatal("energy series exported without an energy source (must be absent, not zero)")
	}
}

// Image-sized binary requests take the streaming path to the upstream; each
// caller must still get the fold of its own input.
func TestServeImageModelBinary(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	base, admin, _ := startProxy(t, em.Addr(), func(c *config.Config) { c.Policy.Name = "adhoc" })
	const callers, elems = 6, 3 * 224 * 224
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in := make([]float32, elems)
			for i := range in {
				in[i] = float32((i*7+c*13)%97) / 8
			}
			x, _ := kserve.NewTensor("INPUT__0", []int64{1, 3, 224, 224}, in)
			req := &kserve.Request{ID: fmt.Sprint("img", c), Inputs: []kserve.Tensor{x},
				Outputs: []kserve.RequestedOutput{{Name: "OUTPUT__0", Parameters: kserve.Parameters{"binary_data": true}}}}
			body, hl, err := kserve.AppendRequest(nil, req, true)
			if err != nil {
				t.Error(err)
				return
			}
			hreq, _ := http.NewRequest(http.MethodPost, base+"/v2/models/image/infer", bytes.NewReader(body))
			hreq.Header.Set(kserve.HeaderContentLength, fmt.Sprint(hl))
			resp, err := http.DefaultClient.Do(hreq)
			if err != nil {
				t.Error(err)
				return
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("caller %d: %d %s", c, resp.StatusCode, data)
				return
			}
			rhl, _ := kserve.ParseHeaderLength(resp.Header.Get(kserve.HeaderContentLength), len(data))
			out, err := kserve.DecodeResponse(data, rhl)
			if err != nil {
				t.Error(err)
				return
			}
			got, _ := out.Outputs[0].Float32s()
			want := make([]float64, 1000)
			for i, v := range in {
				want[i%1000] += float64(v)
			}
			for k := range want {
				if d := float64(got[k]) - want[k]; d > 1e-2*max(1, want[k]) || d < -1e-2*max(1, want[k]) {
					t.Errorf("caller %d: OUTPUT__0[%d] = %v, want %v: not its own answer", c, k, got[k], want[k])
					return
				}
			}
		}()
	}
	wg.Wait()
	_, m := getText(t, admin+"/metrics")
	if metricValue(m, `ratebatch_requests_answered_total{model="image",outcome="ok"}`) != callers {
		t.Fatalf("image requests were not batched by the proxy")
	}
}

func TestServeReadyOnlyAfterDiscovery(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	addr := em.Addr()
	em.Close() // the upstream is down when the proxy starts
	admin := servertest.Run(t, addr, nil, nil).Admin
	// Not ready, and saying why: the first discovery's error, once it has
	// tried.
	testpoll.Until(t, "readyz names the refused connection", func() bool {
		code, body := getText(t, admin+"/readyz")
		if code != 503 {
			t.Fatalf("readyz %d %s before the upstream answered, want 503", code, body)
		}
		return strings.Contains(body, "not read yet") && strings.Contains(body, "connection refused")
	})
	if err := em.Start(addr, ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _ := getText(t, admin+"/readyz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz never turned 200 after the upstream came up")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _ := getText(t, admin+"/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
}

// keepSending runs n clients, client c calling send(c, i) for i = 0, 1,
// ... until stop is called; stop waits for them, and the test's end calls it.
func keepSending(t *testing.T, n int, send func(c, i int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				send(c, i)
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}
