package dispatcher

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// overheadObserver records the time around each batch its dispatcher
// reports.
type overheadObserver struct {
	NopObserver
	mu    sync.Mutex
	holds []int // calls per batch of each BatchEnded
	after []int // calls per batch of each Answered
	// lived is each Answered's latency, late the calls reported with an
	// arrival after their report.
	lived []time.Duration
	late  int
	neg   int // negative durations reported
}

func (p *overheadObserver) Answered(a Answer) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lived = append(p.lived, a.Latency)
	p.after = append(p.after, a.Calls)
	if a.Arrived.After(time.Now()) {
		p.late++
	}
	if a.Latency < 0 || a.After < 0 {
		p.neg++
	}
}

func (p *overheadObserver) BatchEnded(_ *Batch, e BatchEnd) {
	if !e.OK {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holds = append(p.holds, e.Calls)
	if e.Hold < 0 {
		p.neg++
	}
}

// Every batch reports its hold and every caller its wait after the batch,
// with the batch's number of callers, so that a planner can price lone and
// merged batches apart (the budget policy's plan counts both); every
// caller its latency, once its door delivered its answer (the budget's
// live trim checks the plan by it).
func TestPlannerLearnsTheTimeAroundABatch(t *testing.T) {
	up := &fakeUpstream{}
	pl := &overheadObserver{}
	d := startModel(t, Options{Upstream: up, Retries: 1}, ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 1024, Observer: pl,
		Planner: newPlanner(policy.Fill{Policy: "test", Batch: 4, MaxWait: 20 * time.Millisecond})})
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := call(t, int32(i*100), 1)
			r := d.Submit(context.Background(), "simple", c)
			d.Delivered(r)
			if err := checkAnswer(c, r); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// A lone call at the end: a batch of one caller.
	c := call(t, 9000, 1)
	r := d.Submit(context.Background(), "simple", c)
	d.Delivered(r)
	if err := checkAnswer(c, r); err != nil {
		t.Fatal(err)
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	batches := up.seen()
	if len(pl.holds) != len(batches) {
		t.Fatalf("%d holds reported for %d batches", len(pl.holds), len(batches))
	}
	calls, merged := 0, 0
	for _, k := range pl.holds {
		calls += k
		if k > 1 {
			merged++
		}
	}
	if calls != n+1 || len(pl.after) != n+1 {
		t.Fatalf("holds cover %d calls and %d callers reported their wait, want %d each", calls, len(pl.after), n+1)
	}
	if len(pl.lived) != n+1 || pl.late > 0 {
		t.Fatalf("%d callers reported their latency (%d arriving after it), want %d", len(pl.lived), pl.late, n+1)
	}
	if merged == 0 || pl.holds[len(pl.holds)-1] != 1 || pl.after[len(pl.after)-1] != 1 {
		t.Fatalf("want merged batches and a lone last one: holds %v, after %v", pl.holds, pl.after)
	}
	if pl.neg > 0 {
		t.Fatalf("%d negative durations reported", pl.neg)
	}
}
