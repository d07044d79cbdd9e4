package dispatcher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/policy"
)

// forwarded is a Call.Header of name and value pairs.
func forwarded(pairs ...string) string {
	var b []byte
	for i := 0; i < len(pairs); i += 2 {
		b = EndHeader(append(AppendHeaderName(b, pairs[i]), pairs[i+1]...))
	}
	return string(b)
}

// Callers with different credentials never share a batch, however the
// rule would fill it; each batch carries its callers' headers upstream.
// A lone caller's traceparent goes with it; a merged batch carries none.
func TestCredentialsKeyTheBatch(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 2, MaxWait: time.Hour}, ModelSpec{Instances: 2}, up)
	alice, bob := forwarded("authorization", "Bearer alice"), forwarded("authorization", "Bearer bob", "api-key", "k")
	calls := []*Call{call(t, 10, 1), call(t, 20, 1), call(t, 30, 1), call(t, 40, 1)}
	for i, c := range calls {
		c.Forward(map[bool]string{true: alice, false: bob}[i%2 == 0], "00-trace-"+c.Req.ID)
	}
	results := make([]Result, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls { // in turn: alice, bob, alice, bob
		wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", c) })
		testpoll.Until(t, "the call queued", func() bool { return h.pl.arrived.Load() == int64(i+1) })
	}
	testpoll.Until(t, "two batches at the upstream", func() bool { return up.calls.Load() == 2 })
	close(up.gate)
	wg.Wait()
	for i, c := range calls {
		if err := checkAnswer(c, results[i]); err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
		if results[i].BatchRows != 2 {
			t.Fatalf("caller %d went in a batch of %d rows, want 2", i, results[i].BatchRows)
		}
	}
	up.mu.Lock()
	outs := append([]Outgoing(nil), up.outs...)
	up.mu.Unlock()
	seen := map[string]bool{}
	for _, o := range outs {
		seen[o.Header] = true
		if o.Trace != "" {
			t.Errorf("a merged batch carried the traceparent %q", o.Trace)
		}
	}
	if len(outs) != 2 || !seen[alice] || !seen[bob] {
		t.Fatalf("batches carried %q, want one with each caller's credentials", outs)
	}

	// Alone, a caller goes with its traceparent, as straight to Triton.
	c := call(t, 50, 1)
	c.Forward(alice, "00-lone")
	h2 := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, &fakeUpstream{})
	if err := checkAnswer(c, h2.d.Submit(context.Background(), "simple", c)); err != nil {
		t.Fatal(err)
	}
	if o := h2.up.outs[0]; o.Header != alice || o.Trace != "00-lone" {
		t.Fatalf("a lone caller's request carried %+v, want its headers and traceparent", o)
	}
}
