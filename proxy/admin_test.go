package proxy

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestAdminPolicyChangeIsLogged: a successful PUT /policy leaves a line in
// the log saying what changed and who asked; a refused one changes nothing.
func TestAdminPolicyChangeIsLogged(t *testing.T) {
	var logs bytes.Buffer
	current := "batchmonitor"
	h := NewAdmin(AdminOptions{
		Gatherer: prometheus.NewRegistry(),
		Status:   func() any { return map[string]string{"policy": current} },
		SetPolicy: func(_ context.Context, model, p string) error {
			current = p
			return nil
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
