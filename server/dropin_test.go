package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/registry"
	"github.com/ratebatch/ratebatch/server/servertest"
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
	seen   infers
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
		u.seen.count(r)
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

// infers counts the inference requests the upstream receives: merged by
// the proxy (binary, Inference-Header-Content-Length) or as a client sent
// them (JSON).
type infers struct{ merged, asSent atomic.Int64 }

func (c *infers) count(r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/infer") {
		if r.Header.Get(kserve.HeaderContentLength) != "" {
			c.merged.Add(1)
		} else {
			c.asSent.Add(1)
		}
	}
}

// callers keep n clients calling simple through the proxy until stop, and
// count their answers: every call must get its own 200.
type callers struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	ok, fail atomic.Int64
	lastErr  atomic.Pointer[string]
}

func startCallers(t *testing.T, url string, n int) *callers {
	c := &callers{stop: make(chan struct{})}
	for i := range n {
		c.wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-c.stop:
					return
				default:
				}
				id := fmt.Sprintf("c%d-%d", i, j)
				resp, err := http.Post(url, "application/json", bytes.NewReader(simpleBody(id, i, 1)))
				if err != nil {
					msg := err.Error()
					c.lastErr.Store(&msg)
					c.fail.Add(1)
					continue
				}
				var r inferReply
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if json.Unmarshal(data, &r); resp.StatusCode != 200 || r.ID != id {
					msg := fmt.Sprintf("%s: %d %s", id, resp.StatusCode, data)
					c.lastErr.Store(&msg)
					c.fail.Add(1)
					continue
				}
				c.ok.Add(1)
			}
		})
	}
	return c
}

// end stops the callers and fails the test if any call failed.
func (c *callers) end(t *testing.T) {
	t.Helper()
	close(c.stop)
	c.wg.Wait()
	if n := c.fail.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed across the change, the last: %s", n, n+c.ok.Load(), *c.lastErr.Load())
	}
	if c.ok.Load() == 0 {
		t.Fatal("no call answered")
	}
}

// TestModelModeFollowsTriton: a batched model reloaded as decoupled, by a
// repository load through the proxy or beside it, is passed through from
// then on without a restart, and no call of concurrent callers is lost
// across the change; an upstream that says it no longer serves the model
// (unloaded beside the proxy) makes the proxy pass its calls through too.
func TestModelModeFollowsTriton(t *testing.T) {
	decoupled := map[string]any{"model_transaction_policy": map[string]any{"decoupled": true}}
	for _, tc := range []struct {
		name      string
		discovery time.Duration
		change    func(t *testing.T, up *configUpstream, base, emulator string)
	}{
		{"load through the proxy", time.Hour, func(t *testing.T, up *configUpstream, base, _ string) {
			up.mu.Lock()
			up.onLoad = func(model string, load bool) {
				if model == "simple" && load {
					up.edits["simple"] = decoupled
				}
			}
			up.mu.Unlock()
			resp, err := http.Post(base+"/v2/repository/models/simple/load", "application/json", nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("load through the proxy: %v %v", resp, err)
			}
			resp.Body.Close()
		}},
		{"reload beside the proxy", 50 * time.Millisecond, func(t *testing.T, up *configUpstream, _, _ string) {
			up.set("simple", decoupled)
		}},
		{"unload beside the proxy", time.Hour, func(t *testing.T, _ *configUpstream, _, emulator string) {
			resp, err := http.Post("http://"+emulator+"/v2/repository/models/simple/unload", "application/json", nil)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("unload: %v %v", resp, err)
			}
			resp.Body.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
			up := newConfigUpstream(t, em.Addr())
			seen := &up.seen
			p := servertest.Start(t, up.addr(), nil, func(c *config.Config) {
				c.Policy.Name = "maxbatch" // merges concurrent callers
				c.Policy.Options = c.Policy.Options.With(policy.MaxBatchOptions{MaxQueueDelay: 20 * time.Millisecond})
				c.Discovery = tc.discovery
			})
			url := p.Base + "/v2/models/simple/infer"
			calls := startCallers(t, url, 8)
			testpoll.Until(t, "merged batches", func() bool { return seen.merged.Load() > 3 })
			tc.change(t, up, p.Base, em.Addr())
			testpoll.Until(t, "simple passed through", func() bool { _, ok := p.Dispatcher().Model("simple"); return !ok })
			if tc.name == "unload beside the proxy" {
				// Triton answers the calls of a model it does not serve:
				// through the proxy as straight, and nothing else to see.
				close(calls.stop)
				calls.wg.Wait()
				code, r, _ := post(t, url, simpleBody("after", 0, 1))
				if code != http.StatusNotFound || !strings.Contains(r.Error, "unknown model") {
					t.Fatalf("a call after the unload: %d %q, want the upstream's own answer", code, r.Error)
				}
				return
			}
			since := seen.asSent.Load()
			testpoll.Until(t, "calls sent as they came", func() bool { return seen.asSent.Load() > since+20 })
			merged := seen.merged.Load()
			testpoll.Until(t, "more calls sent as they came", func() bool { return seen.asSent.Load() > since+60 })
			calls.end(t)
			if got := seen.merged.Load(); got != merged {
				t.Errorf("%d merged batches after the model was passed through", got-merged)
			}
			var st struct{ Models []registry.Status }
			if code, body := getText(t, p.Admin+"/status"); code != 200 || json.Unmarshal([]byte(body), &st) != nil {
				t.Fatalf("status: %d %s", code, body)
			}
			for _, s := range st.Models {
				if s.Model == "simple" && (s.Mode != registry.ModePassthrough || !strings.Contains(s.Reason, "decoupled")) {
					t.Errorf("/status says %+v, want simple passed through as decoupled", s)
				}
			}
		})
	}
}
