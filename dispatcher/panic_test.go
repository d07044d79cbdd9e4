package dispatcher

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/policy"
)

// setSendHook installs testHookSend for the test.
func setSendHook(t *testing.T, f func(model string, calls []*Call)) {
	testHookSend.Store(&f)
	t.Cleanup(func() { testHookSend.Store(nil) })
}

// A panic while a batch is sent fails that batch's callers with a 500 and
// no one else; the queue goes on forming and sending batches, and every
// accepted call is answered.
func TestBatchPanicFailsOnlyItsCallers(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 4, MaxWait: 5 * time.Millisecond}, ModelSpec{}, up)
	var mu sync.Mutex
	doomed := map[*Call]bool{}
	panics := 0 // 7 and 23 may share a batch: one panic, or two
	setSendHook(t, func(_ string, calls []*Call) {
		for _, c := range calls {
			if c.Req.ID == "7" || c.Req.ID == "23" {
				mu.Lock()
				for _, c := range calls {
					doomed[c] = true
				}
				panics++
				mu.Unlock()
				panic("injected batch panic")
			}
		}
	})
	before := guard.Count("batch")
	const n = 48
	calls := make([]*Call, n)
	results := make([]Result, n)
	var wg sync.WaitGroup
	for i := range n {
		calls[i] = call(t, int32(i), 1)
		wg.Go(func() { results[i] = h.d.Submit(context.Background(), "simple", calls[i]) })
	}
	wg.Wait()
	failed := 0
	for i, c := range calls {
		mu.Lock()
		d := doomed[c]
		mu.Unlock()
		if d {
			failed++
			if status(results[i].Err) != http.StatusInternalServerError || !strings.Contains(results[i].Err.Error(), "injected batch panic") {
				t.Fatalf("call %d of a panicking batch: %v, want a 500 naming the panic", i, results[i].Err)
			}
			continue
		}
		if err := checkAnswer(c, results[i]); err != nil {
			t.Fatalf("call %d beside the panics: %v", i, err)
		}
	}
	if failed == 0 || failed > 8 {
		t.Fatalf("%d calls failed; want those of the two panicking batches (1 to 8)", failed)
	}
	mu.Lock()
	want := panics
	mu.Unlock()
	if got := guard.Count("batch") - before; got != want || want < 1 || want > 2 {
		t.Fatalf("counted %d batch panics, want the %d injected (1 or 2)", got, want)
	}
	assertAccounting(t, h.m, n)
	if s := firstSnapshot(h.d); s.InFlight != 0 || s.QueuedRows != 0 {
		t.Fatalf("left behind: %+v", s)
	}
	// The queue still serves.
	c := call(t, 100, 1)
	if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
		t.Fatal(err)
	}
}

// panickyRule panics at every decision while armed, else fills batches.
type panickyRule struct {
	policy.Fill
	armed bool
}

func (r panickyRule) Decide(q policy.Queue) policy.Decision {
	if r.armed {
		panic("injected rule panic")
	}
	return r.Fill.Decide(q)
}

// A rule that panics loses no caller: the queue is decided as when
// draining until a new rule comes, and the decision loop lives on.
func TestRulePanicLosesNoCaller(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, panickyRule{Fill: policy.Fill{Policy: "test", Batch: 4, MaxWait: time.Millisecond}, armed: true}, ModelSpec{}, up)
	before := guard.Count("decision")
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			c := call(t, int32(i), 1)
			errs <- checkAnswer(c, h.d.Submit(context.Background(), "simple", c))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if guard.Count("decision") == before {
		t.Fatal("no rule panic counted")
	}
	assertAccounting(t, h.m, n)
}

// panickyObserver's BatchEnded panics: the batch's callers are answered
// anyway.
type panickyObserver struct{ *fixedPlanner }

func (panickyObserver) BatchEnded(*Batch, BatchEnd) { panic("injected observe panic") }

func TestObservePanicAnswersTheBatch(t *testing.T) {
	up := &fakeUpstream{}
	h := newHarness(t, policy.Fill{Policy: "test", Batch: 1}, ModelSpec{}, up)
	spec := ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 1024, Planner: h.pl, Observer: panickyObserver{h.pl}}
	if err := h.d.SetModel(spec); err != nil {
		t.Fatal(err)
	}
	before := guard.Count("observe")
	for i := range 3 {
		c := call(t, int32(i), 1)
		if err := checkAnswer(c, h.d.Submit(context.Background(), "simple", c)); err != nil {
			t.Fatal(err)
		}
	}
	if got := guard.Count("observe") - before; got != 3 {
		t.Fatalf("counted %d observe panics, want 3", got)
	}
	assertAccounting(t, h.m, 3)
}
