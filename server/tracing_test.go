package server_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/server/servertest"
	"github.com/ratebatch/ratebatch/tracing"
	"github.com/ratebatch/ratebatch/tracing/tracingtest"
)

// upstreamHeaders stands in front of the emulator and records the
// traceparent of every inference request that reaches it.
type upstreamHeaders struct {
	mu  sync.Mutex
	got []string
}

func (u *upstreamHeaders) start(t *testing.T, emulator string) string {
	target, _ := url.Parse("http://" + emulator)
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/infer") {
			u.mu.Lock()
			u.got = append(u.got, r.Header.Get("traceparent"))
			u.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestTracingFollowsRequestsThroughTheirBatch: concurrent clients, each in
// its own trace, batched together: each request's span is its client's
// span's child, one batch span links them all, each links its batch, and
// the upstream gets the batch's context as traceparent.
func TestTracingFollowsRequestsThroughTheirBatch(t *testing.T) {
	for _, k := range tracing.EndpointEnv {
		t.Setenv(k, "")
	}
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	rcv := tracingtest.Start(t)
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	var up upstreamHeaders
	p := servertest.Start(t, up.start(t, em.Addr()), nil, func(c *config.Config) {
		c.Tracing.OTLPEndpoint = rcv.URL
		c.Policy.Name = "maxbatch"
		c.Policy.Options = c.Policy.Options.With(policy.MaxBatchOptions{MaxQueueDelay: 2 * time.Second})
	})

	const callers = 4 // maxbatch's full batch: the emulator's simple has max_batch_size 8, so the delay sends it
	type client struct{ trace, span string }
	clients := make([]client, callers)
	var wg sync.WaitGroup
	for i := range clients {
		clients[i] = client{randomHex(16), randomHex(8)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, p.Base+"/v2/models/simple/infer", bytes.NewReader(simpleBody("t", i, 1)))
			req.Header.Set("traceparent", "00-"+clients[i].trace+"-"+clients[i].span+"-01")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("client %d: status %d", i, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	p.Stop() // exports what is buffered

	spans := rcv.Spans()
	byTrace := map[string]tracingtest.Span{}
	var batches []tracingtest.Span
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "batch ") {
			batches = append(batches, s)
			continue
		}
		byTrace[s.Trace] = s
	}
	if len(batches) != 1 {
		t.Fatalf("%d batch spans, want 1 (all %d callers in one batch): %+v", len(batches), callers, spans)
	}
	batch := batches[0]
	links := map[[2]string]bool{}
	for _, l := range batch.Links {
		links[l] = true
	}
	for i, c := range clients {
		r, ok := byTrace[c.trace]
		if !ok {
			t.Errorf("client %d: no span in its trace", i)
			continue
		}
		if r.Parent != c.span || r.Name != "ModelInfer" {
			t.Errorf("client %d: span %q with parent %s, want ModelInfer under the client's %s", i, r.Name, r.Parent, c.span)
		}
		if !links[[2]string{r.Trace, r.ID}] {
			t.Errorf("client %d: the batch does not link its span", i)
		}
		if len(r.Links) != 1 || r.Links[0] != [2]string{batch.Trace, batch.ID} {
			t.Errorf("client %d: links %v, want its batch", i, r.Links)
		}
		for k, want := range map[string]any{"ratebatch.batch.rows": int64(callers), "ratebatch.batch.calls": int64(callers),
			"ratebatch.rows": int64(1), "ratebatch.policy": "maxbatch", "ratebatch.model": "simple", "http.response.status_code": int64(200)} {
			if got := r.Attrs[k]; got != want {
				t.Errorf("client %d: %s = %v, want %v", i, k, got, want)
			}
		}
		if w, _ := r.Attrs["ratebatch.queue_wait_ms"].(float64); w <= 0 {
			t.Errorf("client %d: queue wait %v ms, want > 0", i, r.Attrs["ratebatch.queue_wait_ms"])
		}
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	want := "00-" + batch.Trace + "-" + batch.ID + "-01"
	if len(up.got) != 1 || up.got[0] != want {
		t.Errorf("upstream traceparents %q, want one batch with %q", up.got, want)
	}
}

// TestTracingOffForwardsTheCallersTraceparent: without an endpoint the
// proxy makes no span of its own; a caller whose request goes to Triton
// alone carries its traceparent there, as it would straight to Triton; a
// batch merged from several callers carries no caller's.
func TestTracingOffForwardsTheCallersTraceparent(t *testing.T) {
	for _, k := range tracing.EndpointEnv {
		t.Setenv(k, "")
	}
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	for _, tc := range []struct {
		name    string
		callers int
	}{{"alone", 1}, {"merged", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			var up upstreamHeaders
			p := servertest.Start(t, up.start(t, em.Addr()), nil, func(c *config.Config) {
				c.Policy.Name = "static"
				c.Policy.Options = c.Policy.Options.With(policy.StaticOptions{Batch: tc.callers, HoldOptions: policy.HoldOptions{MaxWait: time.Hour}})
			})
			sent := make([]string, tc.callers)
			var wg sync.WaitGroup
			for i := range sent {
				sent[i] = "00-" + randomHex(16) + "-" + randomHex(8) + "-01"
				wg.Go(func() {
					req, _ := http.NewRequest(http.MethodPost, p.Base+"/v2/models/simple/infer", bytes.NewReader(simpleBody(fmt.Sprint("t", i), i, 1)))
					req.Header.Set("traceparent", sent[i])
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					resp.Body.Close()
				})
			}
			wg.Wait()
			want := ""
			if tc.callers == 1 {
				want = sent[0]
			}
			up.mu.Lock()
			defer up.mu.Unlock()
			if len(up.got) != 1 || up.got[0] != want {
				t.Errorf("upstream traceparents %q, want one batch with %q", up.got, want)
			}
		})
	}
}
