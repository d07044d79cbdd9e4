package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// testHost is the Host httptest.NewRequest gives a request for a path: a
// name, which the admin port answers only when configured.
const testHost = "example.com"

// TestAdminPolicyChangeIsLogged: a successful PUT /policy leaves a line in
// the log saying what changed and who asked; a refused one changes nothing.
func TestAdminPolicyChangeIsLogged(t *testing.T) {
	var logs bytes.Buffer
	current := "batchmonitor"
	h := New(Options{
		Gatherer: prometheus.NewRegistry(),
		Hosts:    []string{testHost},
		Status:   func() any { return map[string]string{"policy": current} },
		SetPolicy: func(_ context.Context, model, p string, _ map[string]string) ([]string, error) {
			current = p
			return []string{model}, nil
		},
		Token:  "tok",
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	put := func(token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPut, "/policy", strings.NewReader(`{"model":"simple","policy":"adhoc"}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	if w := put(""); w.Code != http.StatusUnauthorized || logs.Len() != 0 {
		t.Fatalf("no token: %d, log %q", w.Code, logs.String())
	}
	w := put("tok")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"adhoc"`) {
		t.Fatalf("good change: %d %s", w.Code, w.Body)
	}
	for _, want := range []string{"policy changed", "model=simple", "policy=adhoc"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log %q lacks %q", logs.String(), want)
		}
	}
}

// TestAdminPutPolicy: the body's keys but model and policy reach SetPolicy
// as options, spelt as written, whatever they are; the answer is what was
// set and which models it switched, and the log line names every option.
func TestAdminPutPolicy(t *testing.T) {
	type call struct {
		model, policy string
		options       map[string]string
	}
	for _, tc := range []struct {
		name, body string
		refuse     error // SetPolicy's answer
		code       int
		call       *call  // what SetPolicy got; nil: not called
		answer     string // in the answer
		log        []string
	}{
		{name: "one model", body: `{"model":"simple","policy":"adhoc"}`, code: 200,
			call:   &call{"simple", "adhoc", map[string]string{}},
			answer: `{"model":"simple","policy":"adhoc","options":{},"models":["simple"]}`,
			log:    []string{"model=simple", "policy=adhoc"}},
		{name: "every model, a budget", body: `{"policy":"budget","latency_budget":"1.10x"}`, code: 200,
			call:   &call{"", "budget", map[string]string{"latency_budget": "1.10x"}},
			answer: `{"model":"","policy":"budget","options":{"latency_budget":"1.10x"},"models":["a","b"]}`,
			log:    []string{`model="(all batched models)"`, "policy=budget", "latency_budget=1.10x"}},
		{name: "options of any kind, as written", body: `{"model":"m","policy":"smdp","w2":0.5,"batch":4,"wait_bound":"2ms","tail_budget":"1.5x","flag":true,"sla":null}`,
			code: 200, call: &call{"m", "smdp", map[string]string{"w2": "0.5", "batch": "4", "wait_bound": "2ms", "tail_budget": "1.5x", "flag": "true"}},
			answer: `"options":{"batch":"4","flag":"true","tail_budget":"1.5x","w2":"0.5","wait_bound":"2ms"}`,
			log:    []string{"batch=4 flag=true tail_budget=1.5x w2=0.5 wait_bound=2ms"}},
		{name: "refused by the registry", body: `{"model":"simple","policy":"adhoc","latency_budget":"1.2x"}`,
			refuse: errors.New("latency_budget applies to the budget policy"), code: 400,
			call:   &call{"simple", "adhoc", map[string]string{"latency_budget": "1.2x"}},
			answer: `{"error":"latency_budget applies to the budget policy"}`},
		{name: "no policy", body: `{"model":"simple"}`, code: 400, answer: `{"error":"want {\"model\": \"name or empty for all\"`},
		{name: "not JSON", body: `policy=adhoc`, code: 400, answer: `{"error":"want`},
		{name: "an object for an option", body: `{"policy":"budget","latency_budget":{"x":1}}`, code: 400,
			answer: `latency_budget: want a string, a number or true/false`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			var got *call
			h := New(Options{
				Gatherer: prometheus.NewRegistry(),
				Hosts:    []string{testHost},
				SetPolicy: func(_ context.Context, model, p string, o map[string]string) ([]string, error) {
					got = &call{model, p, maps.Clone(o)}
					if tc.refuse != nil {
						return nil, tc.refuse
					}
					if model == "" {
						return []string{"a", "b"}, nil
					}
					return []string{model}, nil
				},
				Token:  "tok",
				Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			})
			req := httptest.NewRequest(http.MethodPut, "/policy", strings.NewReader(tc.body))
			req.Header.Set("Authorization", "Bearer tok")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			var compact bytes.Buffer
			if json.Compact(&compact, w.Body.Bytes()) != nil {
				t.Fatalf("answer is not JSON: %s", w.Body)
			}
			if w.Code != tc.code || !strings.Contains(compact.String(), tc.answer) {
				t.Errorf("%d %s, want %d with %s", w.Code, compact.String(), tc.code, tc.answer)
			}
			switch {
			case tc.call == nil && got != nil:
				t.Errorf("SetPolicy called with %+v", *got)
			case tc.call != nil && (got == nil || got.model != tc.call.model || got.policy != tc.call.policy || !maps.Equal(got.options, tc.call.options)):
				t.Errorf("SetPolicy got %+v, want %+v", got, *tc.call)
			}
			for _, want := range tc.log {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("log %q lacks %q", logs.String(), want)
				}
			}
			if tc.code != 200 && logs.Len() != 0 {
				t.Errorf("a refused change is logged: %q", logs.String())
			}
		})
	}
}

// TestAdminGetPolicy: GET /policy answers what Policies gives, without a
// token (it changes nothing, as /status); without Policies it is not
// served.
func TestAdminGetPolicy(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies func() any
		code     int
		body     string
	}{
		{"served", func() any {
			return map[string]any{"models": []map[string]any{{"model": "simple", "policy": "budget", "options": map[string]any{"latency_budget": "1.25x"}}}}
		}, 200, `{"models":[{"model":"simple","options":{"latency_budget":"1.25x"},"policy":"budget"}]}`},
		{"not configured", nil, 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(Options{Gatherer: prometheus.NewRegistry(), Policies: tc.policies, Token: "tok", Hosts: []string{testHost}})
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/policy", nil))
			if w.Code != tc.code {
				t.Fatalf("GET /policy: %d, want %d", w.Code, tc.code)
			}
			var compact bytes.Buffer
			json.Compact(&compact, w.Body.Bytes())
			if tc.body != "" && compact.String() != tc.body {
				t.Errorf("GET /policy: %s, want %s", compact.String(), tc.body)
			}
		})
	}
}

// TestAuthorizedBearer: the Authorization header is read as RFC 6750
// says: the scheme in any case, then one or more spaces and the token;
// anything else, or no token configured, is refused.
func TestAuthorizedBearer(t *testing.T) {
	for _, tc := range []struct {
		token, header string
		ok            bool
	}{
		{"tok", "Bearer tok", true},
		{"tok", "bearer tok", true},
		{"tok", "BEARER tok", true},
		{"tok", "Bearer   tok", true},
		{"tok", "Bearer tok2", false},
		{"tok", "Bearer to", false},
		{"tok", "Bearertok", false},
		{"tok", "Basic tok", false},
		{"tok", "tok", false},
		{"tok", "", false},
		{"", "Bearer ", false},
		{"", "", false},
	} {
		if got := authorized(tc.token, tc.header); got != tc.ok {
			t.Errorf("token %q, Authorization %q: authorized %v, want %v", tc.token, tc.header, got, tc.ok)
		}
	}
}

// TestAdminPprofNeedsToken: with admin_pprof the profiler's every route
// asks for the bearer token, as PUT /policy does, and cmdline answers the
// masked command line it was given, never os.Args.
func TestAdminPprofNeedsToken(t *testing.T) {
	cmdline := []string{"ratebatch", "serve", "--admin-token", "REDACTED"}
	h := New(Options{Gatherer: prometheus.NewRegistry(), Token: "tok", Pprof: true, Cmdline: cmdline, Hosts: []string{testHost}})
	get := func(path, auth string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1",
		"/debug/pprof/symbol", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
		for _, auth := range []string{"", "Bearer wrong", "Basic tok"} {
			if w := get(path, auth); w.Code != http.StatusUnauthorized {
				t.Errorf("GET %s, Authorization %q: %d, want 401", path, auth, w.Code)
			}
		}
	}
	if w := get("/debug/pprof/heap", "Bearer tok"); w.Code != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap with the token: %d", w.Code)
	}
	w := get("/debug/pprof/cmdline", "Bearer tok")
	if got := strings.Split(w.Body.String(), "\x00"); w.Code != http.StatusOK || !slices.Equal(got, cmdline) {
		t.Errorf("cmdline with the token: %d %q, want %q", w.Code, got, cmdline)
	}
	// Without a masked command line to show, none.
	h = New(Options{Gatherer: prometheus.NewRegistry(), Token: "tok", Pprof: true, Hosts: []string{testHost}})
	if w := get("/debug/pprof/cmdline", "Bearer tok"); w.Code != http.StatusNotFound {
		t.Errorf("cmdline without Options.Cmdline: %d %q, want 404", w.Code, w.Body)
	}
}

// TestAdminHostCheck: the admin port answers a Host that is an address,
// localhost or a configured name, and 421 to any other name, whatever the
// route and whatever the token: a page at evil.example resolving to
// 127.0.0.1 (DNS rebinding) gets nothing from it.
func TestAdminHostCheck(t *testing.T) {
	h := New(Options{
		Gatherer: prometheus.NewRegistry(), Token: "tok", Hosts: []string{"ratebatch", "admin.example."}, Logger: slog.New(slog.DiscardHandler),
		Status:    func() any { return map[string]string{"secret": "state"} },
		SetPolicy: func(context.Context, string, string, map[string]string) ([]string, error) { return nil, nil },
	})
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"127.0.0.1:9002", true}, {"127.0.0.1", true}, {"10.1.2.3:9002", true}, {"[::1]:9002", true}, {"[fe80::1%25eth0]:9002", true},
		{"localhost:9002", true}, {"LOCALHOST", true}, {"grafana.localhost:9002", true}, {"localhost.:9002", true},
		{"ratebatch:9002", true}, {"RateBatch", true}, {"admin.example:9002", true}, {"admin.example.", true},
		{"evil.example", false}, {"evil.example:9002", false}, {"ratebatch.evil.example:9002", false},
		{"localhost.evil.example", false}, {"127.0.0.1.nip.io:9002", false}, {"0x7f000001:9002", false},
	} {
		for _, r := range []struct{ method, path, body string }{
			{http.MethodGet, "/status", ""}, {http.MethodGet, "/metrics", ""}, {http.MethodGet, "/healthz", ""},
			{http.MethodPut, "/policy", `{"policy":"adhoc"}`},
		} {
			req := httptest.NewRequest(r.method, r.path, strings.NewReader(r.body))
			req.Host = tc.host
			req.Header.Set("Authorization", "Bearer tok")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if got := w.Code != http.StatusMisdirectedRequest; got != tc.ok {
				t.Errorf("%s %s, Host %q: %d %.80q, want allowed %v", r.method, r.path, tc.host, w.Code, w.Body, tc.ok)
			}
			if !tc.ok && strings.Contains(w.Body.String(), "state") {
				t.Errorf("%s %s, Host %q: the answer carries the status", r.method, r.path, tc.host)
			}
		}
	}
}

// GET /whatif is read-only, as /status; GET /arrivals reveals the traffic's
// shape, so it needs the bearer token. Neither is served when not given.
func TestAdminWhatIfAndArrivals(t *testing.T) {
	served := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(name)) })
	}
	h := New(Options{Gatherer: prometheus.NewRegistry(), Status: func() any { return nil }, Token: "tok",
		WhatIf: served("whatif"), Arrivals: served("arrivals"), Hosts: []string{testHost}})
	get := func(h http.Handler, path, token string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	for _, tc := range []struct {
		path, token string
		code        int
		body        string
	}{
		{"/whatif?model=m", "", http.StatusOK, "whatif"},
		{"/arrivals?model=m", "", http.StatusUnauthorized, `"error"`},
		{"/arrivals?model=m", "wrong", http.StatusUnauthorized, `"error"`},
		{"/arrivals?model=m", "tok", http.StatusOK, "arrivals"},
	} {
		if w := get(h, tc.path, tc.token); tc.code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("GET %s refused without WWW-Authenticate", tc.path)
		}
		if w := get(h, tc.path, tc.token); w.Code != tc.code || !strings.Contains(w.Body.String(), tc.body) {
			t.Errorf("GET %s with token %q: %d %s, want %d %s", tc.path, tc.token, w.Code, w.Body, tc.code, tc.body)
		}
	}
	off := New(Options{Gatherer: prometheus.NewRegistry(), Status: func() any { return nil }, Token: "tok", Hosts: []string{testHost}})
	for _, path := range []string{"/whatif", "/arrivals"} {
		if w := get(off, path, "tok"); w.Code != http.StatusNotFound {
			t.Errorf("GET %s without the what-if: %d, want 404", path, w.Code)
		}
	}
}
