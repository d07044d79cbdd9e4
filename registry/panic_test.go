package registry

import (
	"context"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/triton"
)

// panicIndex panics at its first repository reads.
type panicIndex struct {
	*fakeUpstream
	panics int
}

func (p *panicIndex) RepositoryIndex(ctx context.Context) ([]triton.IndexEntry, error) {
	p.mu.Lock()
	n := p.panics
	p.panics--
	p.mu.Unlock()
	if n > 0 {
		panic("injected discovery panic")
	}
	return p.fakeUpstream.RepositoryIndex(ctx)
}

// Discovery that panics is restarted after a pause and finds the models.
func TestDiscoverRecoversFromAPanic(t *testing.T) {
	up := &panicIndex{fakeUpstream: &fakeUpstream{
		index:   []triton.IndexEntry{{Name: "simple", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"simple": {Name: "simple", MaxBatchSize: 8}},
		stats:   map[string][]triton.BatchStat{},
	}, panics: 2}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	r := New(up, q, &cfg, nil)
	before := guard.Count("discovery")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Discover(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for !r.Discovered() {
		if time.Now().After(deadline) {
			t.Fatal("not discovered after the panics")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := guard.Count("discovery") - before; got != 2 {
		t.Fatalf("counted %d discovery panics, want 2", got)
	}
	if len(r.Statuses()) != 1 {
		t.Fatalf("statuses %+v, want the one model", r.Statuses())
	}
}

// failingQueues is fakeQueues with an outlier verdict.
type failingQueues struct {
	fakeQueues
	failing bool
}

func (q *failingQueues) Unready() string {
	if q.failing {
		return "every batched model is failing upstream"
	}
	return ""
}

// Ready needs the models read and an upstream that is not failing.
func TestReadyFollowsDiscoveryAndTheOutlierVerdict(t *testing.T) {
	q := &failingQueues{fakeQueues: fakeQueues{specs: map[string]dispatcher.ModelSpec{}}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	r := New(&fakeUpstream{}, q, &cfg, nil)
	if r.Ready() {
		t.Fatal("ready before discovery")
	}
	r.discovered.Store(true)
	if !r.Ready() {
		t.Fatal("not ready once discovered")
	}
	q.failing = true
	if r.Ready() {
		t.Fatal("ready while the upstream fails")
	}
}
