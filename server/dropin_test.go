package server_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// configUpstream stands between the proxy and an emulator, passing
// everything through but the model configurations, which it edits as
// the test says: the emulator's models grow the config fields Triton's
// have (dynamic_batching, decoupled, ...), and may change while the proxy
// runs, as a model reloaded in Triton does.
type configUpstream struct {
	*httptest.Server
	mu    sync.Mutex
	edits map[string]map[string]any // by model: the fields set in its config
	// onLoad, when set, runs as a POST /v2/repository/models/M/load or
	// /unload reaches the upstream, before it is answered.
	onLoad func(model string, load bool)
}

func newConfigUpstream(t *testing.T, emulator string) *configUpstream {
	t.Helper()
	target, _ := url.Parse("http://" + emulator)
	u := &configUpstream{edits: map[string]map[string]any{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(resp *http.Response) error {
		model, ok := strings.CutSuffix(strings.TrimPrefix(resp.Request.URL.Path, "/v2/models/"), "/config")
		if !ok || resp.StatusCode != http.StatusOK {
			return nil
		}
		u.mu.Lock()
		edit := u.edits[model]
		u.mu.Unlock()
		if edit == nil {
			return nil
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var cfg map[string]any
		if err := json.Unmarshal(data, &cfg); err != nil {
			return err
		}
		for k, v := range edit {
			cfg[k] = v
		}
		data, _ = json.Marshal(cfg)
		resp.Body = io.NopCloser(bytes.NewReader(data))
		resp.ContentLength = int64(len(data))
		resp.Header.Set("Content-Length", strconv.Itoa(len(data)))
		return nil
	}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/v2/repository/models/"); ok && r.Method == http.MethodPost {
			model, action, _ := strings.Cut(rest, "/")
			u.mu.Lock()
			on := u.onLoad
			u.mu.Unlock()
			if on != nil {
				on(model, action == "load")
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(u.Close)
	return u
}

// set makes the model's config carry fields (nil: as the emulator has it).
func (u *configUpstream) set(model string, fields map[string]any) {
	u.mu.Lock()
	u.edits[model] = fields
	u.mu.Unlock()
}

// addr is the upstream's host:port, as servertest takes it.
func (u *configUpstream) addr() string { return strings.TrimPrefix(u.URL, "http://") }
