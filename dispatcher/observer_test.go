package dispatcher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/policy"
)

// recorder records every event it observes; in BatchStarted it gives the
// batch a context of its own, as a tracer would.
type recorder struct {
	mu       sync.Mutex
	arrived  []Arrival
	decided  []Decision
	started  []Batch // copies, Calls included
	callCtx  []any   // the value of ctxKey in each started call's context
	ended    []BatchEnd
	endCalls []int // len(Batch.Calls) in each BatchEnded
	answered []Answer
}

type ctxKey struct{}

func (r *recorder) Arrived(a Arrival) { r.mu.Lock(); r.arrived = append(r.arrived, a); r.mu.Unlock() }
func (r *recorder) Decided(d Decision) {
	r.mu.Lock()
	r.decided = append(r.decided, d)
	r.mu.Unlock()
}
func (r *recorder) BatchStarted(b *Batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = append(r.started, *b)
	for _, c := range b.Calls {
		r.callCtx = append(r.callCtx, c.Context().Value(ctxKey{}))
	}
	b.Ctx = context.WithValue(b.Ctx, ctxKey{}, "batch")
}
func (r *recorder) BatchEnded(b *Batch, e BatchEnd) {
	r.mu.Lock()
	r.ended = append(r.ended, e)
	r.endCalls = append(r.endCalls, len(b.Calls))
	r.mu.Unlock()
}
func (r *recorder) Answered(a Answer) { r.mu.Lock(); r.answered = append(r.answered, a); r.mu.Unlock() }

// ctxUpstream is fakeUpstream recording the ctxKey value of each call's
// context.
type ctxUpstream struct {
	fakeUpstream
	mu   sync.Mutex
	seen []any
}

func (u *ctxUpstream) Infer(ctx context.Context, model, version string, b Body, out Outgoing) (*Reply, error) {
	u.mu.Lock()
	u.seen = append(u.seen, ctx.Value(ctxKey{}))
	u.mu.Unlock()
	return u.fakeUpstream.Infer(ctx, model, version, b, out)
}

// One batch of three callers (4 rows) is told, to the model's observer and
// the dispatcher's alike: three arrivals, the rule's decisions, the batch's
// start with its callers (each with its door's context) and its end with
// rows, callers, round trip and hold, and each caller's answer once its
// door delivered it. The context an observer gives the batch is the one
// the upstream call gets.
func TestObserverSeesEveryEventOfABatch(t *testing.T) {
	up := &ctxUpstream{}
	model, all := &recorder{}, &recorder{}
	d := startModel(t, Options{Upstream: up, Observer: all}, ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Observer: model,
		Planner: newPlanner(policy.Fill{Policy: "test", Batch: 4, MaxWait: time.Hour})})
	rows := []int{1, 2, 1}
	var wg sync.WaitGroup
	for i, n := range rows {
		wg.Go(func() {
			c := call(t, int32(i), n)
			if i == 1 {
				c.Source = 5 // a named connection, not learnt yet
			}
			ctx := context.WithValue(context.Background(), ctxKey{}, i)
			r := d.Submit(ctx, "simple", c)
			d.Delivered(r)
			if err := checkAnswer(c, r); err != nil {
				t.Error(err)
			}
		})
		// One at a time, so that the arrivals and their queued rows come
		// in order: the next is submitted once both observers have seen
		// this one (the dispatcher's observer is told last).
		testpoll.Until(t, "both observers told of the arrival", func() bool { all.mu.Lock(); defer all.mu.Unlock(); return len(all.arrived) == i+1 })
	}
	wg.Wait()

	for _, r := range []*recorder{model, all} {
		r.mu.Lock()
		if len(r.arrived) != 3 {
			t.Fatalf("%d arrivals, want 3", len(r.arrived))
		}
		for i, a := range r.arrived {
			if a.Model != "simple" || a.Rows != rows[i] || a.Queued != sumRows(rows[:i+1]) || a.Call == nil {
				t.Errorf("arrival %d: %+v, want %d rows, %d queued", i, a, rows[i], sumRows(rows[:i+1]))
			}
			if want := map[bool]CallerKind{false: CallerUnnamed, true: CallerUnknown}[i == 1]; a.Caller != want {
				t.Errorf("arrival %d: caller %v, want %v", i, a.Caller, want)
			}
		}
		if len(r.decided) < 3 {
			t.Fatalf("%d decisions, want one per arrival at least", len(r.decided))
		}
		if last := r.decided[len(r.decided)-1]; last.Send != 4 || last.Rows != 4 {
			t.Errorf("last decision %+v: want 4 rows queued and sent", last)
		}
		if len(r.started) != 1 || len(r.ended) != 1 {
			t.Fatalf("%d batches started and %d ended, want 1", len(r.started), len(r.ended))
		}
		if b := r.started[0]; b.Model != "simple" || b.Rows != 4 || len(b.Calls) != 3 || b.Started.Before(b.Formed) {
			t.Errorf("batch started %+v: want 4 rows of 3 callers", b)
		}
		if b := r.started[0]; b.Rule == nil || b.Rule.Status().Policy != "test" {
			t.Errorf("batch started with rule %v, want the one that formed it (policy test)", b.Rule)
		}
		seen := map[any]bool{}
		for _, v := range r.callCtx {
			seen[v] = true
		}
		if len(r.callCtx) != 3 || !seen[0] || !seen[1] || !seen[2] {
			t.Errorf("the callers' contexts carried %v, want 0, 1 and 2", r.callCtx)
		}
		if e := r.ended[0]; e.Rows != 4 || e.Calls != 3 || !e.OK || e.Served != 4 || e.RoundTrip <= 0 || e.Hold < 0 || r.endCalls[0] != 0 {
			t.Errorf("batch ended %+v with %d calls still given: want 4 rows of 3 callers served, a round trip, none given", e, r.endCalls[0])
		}
		if len(r.answered) != 3 {
			t.Fatalf("%d answers, want 3", len(r.answered))
		}
		for _, a := range r.answered {
			if a.Model != "simple" || a.Calls != 3 || a.After < 0 || a.Latency < a.After || a.Arrived.IsZero() {
				t.Errorf("answer %+v: want 3 callers, after <= latency", a)
			}
		}
		r.mu.Unlock()
	}
	if len(up.seen) != 1 || up.seen[0] != "batch" {
		t.Fatalf("the upstream saw contexts carrying %v, want the one the observers gave the batch", up.seen)
	}
}

func sumRows(rows []int) (n int) {
	for _, r := range rows {
		n += r
	}
	return n
}

// A failed batch is told as not OK, with no round trip, and its callers'
// errors are no answers to learn from.
func TestObserverSeesAFailedBatch(t *testing.T) {
	up := &fakeUpstream{}
	up.status.Store(500)
	rec := &recorder{}
	d := New(Options{Upstream: up, Observer: rec})
	if err := d.SetModel(ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: newPlanner(policy.Fill{Policy: "test", Batch: 1})}); err != nil {
		t.Fatal(err)
	}
	c := call(t, 1, 2)
	r := d.Submit(context.Background(), "simple", c)
	d.Delivered(r)
	if r.Err == nil {
		t.Fatal("a 500 upstream answered the call")
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.ended) != 1 || rec.ended[0].OK || rec.ended[0].RoundTrip != 0 || rec.ended[0].Served != 0 || rec.ended[0].Rows != 2 {
		t.Fatalf("ended %+v: want one batch of 2 rows, not OK, nothing served", rec.ended)
	}
	if len(rec.answered) != 0 {
		t.Fatalf("answers %+v learnt from an error", rec.answered)
	}
}

// A batch that leaves without its rule's decision (the rule panicked: the
// queue goes out as when draining) carries no rule, so that no policy is
// named for it.
func TestBatchWithoutDecisionHasNoRule(t *testing.T) {
	rec := &recorder{}
	d := startModel(t, Options{Upstream: &fakeUpstream{}, Observer: rec}, ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64,
		Planner: newPlanner(panickyRule{Fill: policy.Fill{Policy: "test", Batch: 4, MaxWait: time.Millisecond}, armed: true})})
	c := call(t, 1, 1)
	if err := checkAnswer(c, d.Submit(context.Background(), "simple", c)); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.started) != 1 || rec.started[0].Rule != nil {
		t.Fatalf("batches started %+v: want one, with no rule", rec.started)
	}
}

// Telling observers costs no allocation: the events are values, and
// Observers passes them on.
func TestObserversDoNotAllocate(t *testing.T) {
	obs := join(&fixedPlanner{}, NopObserver{}, nil)
	b := &Batch{Model: "m", Rows: 1}
	allocs := testing.AllocsPerRun(100, func() {
		obs.Arrived(Arrival{Model: "m", Rows: 1})
		obs.Decided(Decision{Model: "m", Rows: 1})
		obs.BatchStarted(b)
		obs.BatchEnded(b, BatchEnd{Rows: 1, Calls: 1, OK: true})
		obs.Answered(Answer{Model: "m", Calls: 1})
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per round of events, want 0", allocs)
	}
	if join(nil, nil) != nil {
		t.Fatal("no observers joined into one")
	}
}
