package dispatcher

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// seenRule is the work-conserving rule that records the sources each
// decision saw.
type seenRule struct {
	mu   sync.Mutex
	seen []policy.Queue
}

func (r *seenRule) Decide(q policy.Queue) policy.Decision {
	r.mu.Lock()
	r.seen = append(r.seen, q)
	r.mu.Unlock()
	return policy.Fill{Policy: "test"}.Decide(q)
}
func (r *seenRule) Status() policy.Status { return policy.Status{Policy: "test"} }
func (r *seenRule) last() policy.Queue {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[len(r.seen)-1]
}

// A decision knows how many of the recent callers could still send: a
// lone connection whose call waits has no partner; once answered it is
// one for the next caller's call; a call without a source (gRPC) makes
// the count unknown for SourceIdleFor.
func TestDecisionsKnowTheIdleSources(t *testing.T) {
	clock := struct {
		sync.Mutex
		t time.Time
	}{t: time.Unix(1000, 0)}
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.t }
	advance := func(d time.Duration) { clock.Lock(); clock.t = clock.t.Add(d); clock.Unlock() }
	rule := &seenRule{}
	d := New(Options{Upstream: &fakeUpstream{}, Now: now})
	if err := d.SetModel(ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: newPlanner(rule)}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := d.Drain(ctx); err != nil {
			t.Error(err)
		}
	}()
	submit := func(src uint64) policy.Queue {
		t.Helper()
		c := call(t, 1, 1)
		c.Source = src
		if err := checkAnswer(c, d.Submit(context.Background(), "simple", c)); err != nil {
			t.Fatal(err)
		}
		return rule.last()
	}
	// The decision on a call is the caller's own, right after its arrival.
	if q := submit(1); !q.SourcesKnown || q.IdleSources != 0 {
		t.Fatalf("a lone connection: known %v, idle %d; want known, 0", q.SourcesKnown, q.IdleSources)
	}
	if q := submit(2); !q.SourcesKnown || q.IdleSources != 1 {
		t.Fatalf("a second connection with the first answered: known %v, idle %d; want known, 1", q.SourcesKnown, q.IdleSources)
	}
	advance(2 * SourceIdleFor)
	if q := submit(2); !q.SourcesKnown || q.IdleSources != 0 {
		t.Fatalf("the first connection gone quiet: known %v, idle %d; want known, 0", q.SourcesKnown, q.IdleSources)
	}
	if sn := d.Snapshots()[0]; !sn.SourcesKnown || sn.Sources != 1 || sn.SourcesBusy != 0 {
		t.Fatalf("snapshot %+v: want one known source, idle", sn)
	}
	if q := submit(0); q.SourcesKnown {
		t.Fatal("a call without a source leaves the count known")
	}
	if q := submit(2); q.SourcesKnown {
		t.Fatal("the count is known again right after a call without a source")
	}
}

// The decision trace has a line per arrival, decision, batch start and
// end, in the documented form.
func TestDecisionTrace(t *testing.T) {
	var buf syncBuffer
	d := New(Options{Upstream: &fakeUpstream{}, Trace: &buf})
	if err := d.SetModel(ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: newPlanner(policy.Fill{Policy: "test"})}); err != nil {
		t.Fatal(err)
	}
	c := call(t, 1, 1)
	c.Source = 7
	if err := checkAnswer(c, d.Submit(context.Background(), "simple", c)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	kinds := ""
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "simple" {
			t.Fatalf("trace line %q", line)
		}
		kinds += f[1]
	}
	if !strings.HasPrefix(kinds, "ADSE") || !strings.Contains(buf.String(), "idle=0 send=1") {
		t.Fatalf("trace %q: want an arrival, a decision to send it with no idle source, its start and end", buf.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
