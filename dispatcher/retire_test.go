package dispatcher

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/policy"
)

// TestRetireModelAnswersEveryCall: a model retired while calls wait for a
// batch that would take an hour to fill is no longer batched (the doors
// pass its calls through), and every call in its queue, or reaching it
// after (a door that looked the model up just before), is sent at once,
// alone, and answered. A later SetModel batches it again in the same
// queue.
func TestRetireModelAnswersEveryCall(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 8, MaxWait: time.Hour}, ModelSpec{Instances: 2}, up)
	var wg sync.WaitGroup
	results := make([]Result, 5)
	calls := make([]*Call, len(results))
	for i := range 4 {
		calls[i] = call(t, int32(i+1), 1)
		wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", calls[i]) })
	}
	testpoll.Until(t, "four calls queued", func() bool { return h.d.Snapshots()[0].QueuedRows == 4 })
	h.d.RetireModel("simple")
	if _, ok := h.d.Model("simple"); ok {
		t.Fatal("a retired model is still reported batched")
	}
	calls[4] = call(t, 5, 3) // a late caller, of more rows than the model batched
	results[4] = h.d.Submit(context.Background(), "simple", calls[4])
	wg.Wait()
	for i, r := range results {
		if err := checkAnswer(calls[i], r); err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	for _, rows := range up.seen() {
		if rows != 1 && rows != 3 {
			t.Fatalf("upstream saw batches %v, want each call alone", up.seen())
		}
	}
	if len(up.seen()) != 5 {
		t.Fatalf("upstream saw %d batches, want 5", len(up.seen()))
	}
	for _, s := range h.d.Snapshots() {
		t.Fatalf("a retired model's queue in the snapshots: %+v", s)
	}

	if err := h.d.SetModel(ModelSpec{Name: "simple", Planner: newPlanner(policy.Fill{Policy: "test", Batch: 2, MaxWait: time.Hour}), MaxBatch: 8, QueueRows: 64}); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.d.Model("simple"); !ok {
		t.Fatal("set again, the model is not batched")
	}
	a, b := call(t, 10, 1), call(t, 11, 1)
	wg.Go(func() { results[0] = h.d.Submit(context.Background(), "simple", a) })
	wg.Go(func() { results[1] = h.d.Submit(context.Background(), "simple", b) })
	wg.Wait()
	if err := checkAnswer(a, results[0]); err != nil {
		t.Fatal(err)
	}
	if got := up.seen(); got[len(got)-1] != 2 {
		t.Errorf("batches after the model was set again %v, want the last one merged of 2", got)
	}
}

// TestRetireModelAtDrain: a retired queue's calls are answered before
// Drain returns, as a batched one's.
func TestRetireModelAtDrain(t *testing.T) {
	up := &fakeUpstream{gate: make(chan struct{})}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up)
	done := h.occupy(t, call(t, 1, 1))
	h.d.RetireModel("simple")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	drained := make(chan error, 1)
	go func() { drained <- h.d.Drain(ctx) }()
	select {
	case err := <-drained:
		t.Fatalf("Drain returned (%v) while the retired model's batch was in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	up.gate <- struct{}{}
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
}

// TestUnknownModelTellsModelChanged: an upstream answering a batched call
// as for a model it does not serve (unloaded or reloaded beside the
// proxy) makes the dispatcher tell Options.ModelChanged; another error
// does not.
func TestUnknownModelTellsModelChanged(t *testing.T) {
	up := &fakeUpstream{}
	changed := make(chan string, 4)
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up, func(d *Dispatcher) {
		d.o.ModelChanged = func(m string) { changed <- m }
	})
	up.status.Store(http.StatusBadRequest)
	if r := h.d.Submit(context.Background(), "simple", call(t, 1, 1)); status(r.Err) != 400 {
		t.Fatalf("answer %v, want the upstream's 400", r.Err)
	}
	if len(changed) != 0 {
		t.Fatalf("told of a change on %q for an error that is not about the model", <-changed)
	}
	msg := "Request for unknown model: 'simple' version 2 is not found"
	up.errMsg.Store(&msg)
	if r := h.d.Submit(context.Background(), "simple", call(t, 2, 1)); status(r.Err) != 400 || r.Err.Error() != msg {
		t.Fatalf("answer %v, want the upstream's 400 with its text", r.Err)
	}
	select {
	case m := <-changed:
		if m != "simple" {
			t.Fatalf("told of %q, want simple", m)
		}
	default:
		t.Fatal("not told of the model the upstream does not serve")
	}
}
