package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// fakeTriton answers the repository index and the model configurations
// of a few models, as Triton prints them.
func fakeTriton(t *testing.T) string {
	t.Helper()
	configs := map[string]string{
		"simple":  `{"name":"simple","max_batch_size":8,"input":[{"name":"INPUT0","data_type":"TYPE_INT32","dims":["16"]}]}`,
		"ragged":  `{"name":"ragged","max_batch_size":8,"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":["-1"],"allow_ragged_batch":true}]}`,
		"stream":  `{"name":"stream","max_batch_size":8,"model_transaction_policy":{"decoupled":true}}`,
		"cached":  `{"name":"cached","max_batch_size":8,"response_cache":{"enable":true}}`,
		"nobatch": `{"name":"nobatch","max_batch_size":0}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v2/repository/index" {
			w.Write([]byte(`[{"name":"cached","version":"1","state":"READY"},{"name":"nobatch","version":"1","state":"READY"},
				{"name":"ragged","version":"1","state":"READY"},{"name":"simple","version":"1","state":"READY"},
				{"name":"stream","version":"1","state":"READY"},{"name":"old","state":"UNAVAILABLE","reason":"unloaded"}]`))
			return
		}
		name, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/v2/models/"), "/config")
		if c, found := configs[name]; ok && found {
			w.Write([]byte(c))
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":"Request for unknown model: '` + name + `' is not found"}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestModelsCommand: `ratebatch models --upstream URL` lists each model
// with what serve would do with it and why, as text and as JSON; a
// configuration's models: section applies as in serve.
func TestModelsCommand(t *testing.T) {
	url := fakeTriton(t)
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"models", "--upstream", url}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	want := map[string]string{ // each model's line holds these words
		"simple":  "batched",
		"ragged":  "passed through  ragged input INPUT0",
		"stream":  "passed through  decoupled",
		"cached":  "passed through  response cache",
		"nobatch": "passed through  max_batch_size is 0",
		"old":     "not served      the upstream lists it as UNAVAILABLE (unloaded)",
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(want)+1 || !strings.HasPrefix(lines[0], "MODEL") {
		t.Fatalf("output:\n%s\nwant a header and %d models", out.String(), len(want))
	}
	for _, l := range lines[1:] {
		name := strings.Fields(l)[0]
		if w, ok := want[name]; !ok || !strings.Contains(l, w) {
			t.Errorf("line %q, want it to say %q", l, w)
		}
	}

	out.Reset()
	if code := run(context.Background(), []string{"models", "--upstream", url, "--json", "--policy", "passthrough"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var modes []struct{ Model, Mode, Reason string }
	if err := json.Unmarshal(out.Bytes(), &modes); err != nil {
		t.Fatalf("--json: %v\n%s", err, out.String())
	}
	for _, m := range modes {
		if m.Model == "simple" && (m.Mode != "passed through" || !strings.Contains(m.Reason, "policy passthrough")) {
			t.Errorf("simple under --policy passthrough: %+v", m)
		}
	}
	if len(modes) != len(want) {
		t.Errorf("--json listed %d models, want %d", len(modes), len(want))
	}
}

// TestModelsCommandMistakes: a mistyped flag is named with the flag
// meant; an unreachable upstream is an error, not an empty list.
func TestModelsCommandMistakes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"models", "--upstreem", "http://x"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "did you mean --upstream?") {
		t.Fatalf("exit %d, stderr %q; want 2 and the flag meant", code, errb.String())
	}
	errb.Reset()
	if code := run(context.Background(), []string{"models", "--upstream", "http://127.0.0.1:1"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "repository index") {
		t.Fatalf("exit %d, stderr %q; want 1 and the upstream's failure", code, errb.String())
	}
}
