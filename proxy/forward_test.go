package proxy_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/proxy"
)

// headerBatcher is echoBatcher recording what each call carries to key
// its batch and to go upstream with it.
type headerBatcher struct {
	echoBatcher
	mu    sync.Mutex
	calls []seenCall
}

// seenCall is what a call carried to key its batch and go upstream.
type seenCall struct{ Header, Trace, Key string }

func (b *headerBatcher) Submit(ctx context.Context, model string, c *dispatcher.Call) dispatcher.Result {
	b.mu.Lock()
	b.calls = append(b.calls, seenCall{c.Header, c.Trace, c.Key})
	b.mu.Unlock()
	return b.echoBatcher.Submit(ctx, model, c)
}

// The HTTP door gives a batched call the headers that decide who may call
// (Authorization, the names configured, those the pattern matches), which
// key its batch, and its traceparent when the proxy does not trace.
func TestHTTPDoorForwardsWhoMayCall(t *testing.T) {
	fw, err := door.NewForwarding(nil, []string{"api-key"}, "^x-meta-")
	if err != nil {
		t.Fatal(err)
	}
	b := &headerBatcher{}
	base := startFront(t, proxy.Options{Backend: door.Backend{Batcher: b, Forward: fw}, Upstream: mustURL("http://triton.invalid:8000"), MaxBodyBytes: 1 << 20})
	post := func(h map[string]string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/v2/models/simple/infer", strings.NewReader(`{"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1]}]}`))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	post(map[string]string{"Authorization": "Bearer a", "Api-Key": "k", "X-Meta-Tenant": "t1", "X-Other": "o", "Traceparent": "00-a"})
	post(map[string]string{"Authorization": "Bearer b"})
	post(nil)
	b.mu.Lock()
	defer b.mu.Unlock()
	want := []struct{ header, trace string }{
		{"authorization\x00Bearer a\x00api-key\x00k\x00x-meta-tenant\x00t1\x00", "00-a"},
		{"authorization\x00Bearer b\x00", ""},
		{"", ""},
	}
	for i, w := range want {
		if c := b.calls[i]; c.Header != w.header || c.Trace != w.trace {
			t.Errorf("call %d carried %q and traceparent %q, want %q and %q", i, c.Header, c.Trace, w.header, w.trace)
		}
	}
	if b.calls[0].Key == b.calls[1].Key || b.calls[1].Key == b.calls[2].Key {
		t.Fatalf("callers with different credentials share a key: %q", []string{b.calls[0].Key, b.calls[1].Key, b.calls[2].Key})
	}
}
