package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// GET /policy shows what is in force: the options the policy takes, with
// the defaults their zero values stand for (the budget's 1.10x and 1.20x,
// not ""), and none of another policy's (no w1 or row_cap for budget, no
// latency_budget for maxbatch).
func TestGetPolicyShowsTheOptionsInForce(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	lt := servertest.Start(t, em.Addr(), nil, nil)
	read := func() map[string]any {
		t.Helper()
		var doc struct {
			Models []struct {
				Model   string         `json:"model"`
				Options map[string]any `json:"options"`
			} `json:"models"`
		}
		_, body := getText(t, lt.Admin+"/policy")
		if err := json.Unmarshal([]byte(body), &doc); err != nil {
			t.Fatal(err)
		}
		for _, m := range doc.Models {
			if m.Model == "simple" {
				return m.Options
			}
		}
		t.Fatalf("simple not in %s", body)
		return nil
	}
	check := func(policy string, want map[string]any, absent ...string) {
		t.Helper()
		got := read()
		for k, v := range want {
			if fmt.Sprint(got[k]) != fmt.Sprint(v) {
				t.Errorf("%s: %s = %v, want %v (options %v)", policy, k, got[k], v, got)
			}
		}
		for _, k := range absent {
			if _, ok := got[k]; ok {
				t.Errorf("%s: lists %s, an option it does not take (options %v)", policy, k, got)
			}
		}
	}
	check("budget", map[string]any{"latency_budget": "1.10x", "tail_budget": "1.20x"}, "w1", "w2", "batch", "row_cap", "max_queue_delay")
	req, _ := http.NewRequest(http.MethodPut, lt.Admin+"/policy", strings.NewReader(`{"model":"simple","policy":"maxbatch"}`))
	req.Header.Set("Authorization", "Bearer test-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /policy maxbatch: %d", resp.StatusCode)
	}
	check("maxbatch", map[string]any{"max_queue_delay": "5ms"}, "latency_budget", "tail_budget", "w1", "wait_bound")
}
