package proxy_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/proxy"
)

// A panic in the handler costs its own request a 500 with a KServe error,
// and nothing else: requests around it, before and after, are answered.
func TestHandlerPanicFailsOnlyItsRequest(t *testing.T) {
	defer proxy.SetTestHookInfer(func(_ string, body []byte) {
		if bytes.Contains(body, []byte(`"panic-me"`)) {
			panic("injected handler panic")
		}
	})()
	base := newFuzzServer(t, echoBatcher{})
	before := guard.Count("http")
	request := func(id string) wireAnswer {
		body := fmt.Sprintf(`{"id":%q,"inputs":[{"name":"x","datatype":"INT32","shape":[1],"data":[1]}]}`, id)
		return exchange(t, base, fmt.Appendf(nil, "POST /v2/models/simple/infer HTTP/1.1\r\nHost: p\r\nContent-Length: %d\r\n\r\n%s", len(body), body), false)
	}
	var wg sync.WaitGroup
	answers := make([]wireAnswer, 40)
	for i := range answers {
		wg.Go(func() {
			id := fmt.Sprintf("ok-%d", i)
			if i%4 == 0 {
				id = "panic-me"
			}
			answers[i] = request(id)
		})
	}
	wg.Wait()
	for i, a := range answers {
		if i%4 == 0 {
			msg, ok := kserve.ParseErrorBody(a.body)
			if a.status != http.StatusInternalServerError || !ok || !strings.Contains(msg, "injected handler panic") {
				t.Fatalf("panicking request: status %d body %q; want 500 with a KServe error", a.status, a.body)
			}
			continue
		}
		if a.status != http.StatusOK || !bytes.Contains(a.body, fmt.Appendf(nil, `"ok-%d"`, i)) {
			t.Fatalf("request %d beside the panics: status %d body %q", i, a.status, a.body)
		}
	}
	if got := guard.Count("http") - before; got != 10 {
		t.Fatalf("counted %d handler panics, want 10", got)
	}
	if a := request("after"); a.status != http.StatusOK {
		t.Fatalf("after the panics: status %d body %q", a.status, a.body)
	}
}
