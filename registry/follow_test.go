package registry

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/internal/triton"
)

func followRegistry(up *fakeUpstream) (*Models, *fakeQueues) {
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	return New(up, q, &cfg, nil), q
}

func (f *fakeUpstream) setConfig(name string, c *triton.ModelConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c == nil {
		delete(f.configs, name)
		return
	}
	f.configs[name] = c
}

func (f *fakeUpstream) setIndex(idx ...triton.IndexEntry) {
	f.mu.Lock()
	f.index = idx
	f.mu.Unlock()
}

func statusOf(r *Models, name string) (Status, bool) {
	for _, s := range r.Statuses() {
		if s.Model == name {
			return s, true
		}
	}
	return Status{}, false
}

func decoupled(name string) *triton.ModelConfig {
	c := &triton.ModelConfig{Name: name, MaxBatchSize: 8}
	c.ModelTransactionPolicy.Decoupled = true
	return c
}

// TestModeFollowsConfig: a batched model reloaded as decoupled is passed
// through at the next discovery, its queue retired and its monitor gone;
// reloaded batchable again, it is batched again; a discovery that finds
// nothing changed changes nothing.
func TestModeFollowsConfig(t *testing.T) {
	up := &fakeUpstream{index: []triton.IndexEntry{{Name: "m", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"m": {Name: "m", MaxBatchSize: 8}}, noStats: true}
	r, q := followRegistry(up)
	ctx := context.Background()
	if err := r.Refresh(ctx); err != nil || !q.batched("m") {
		t.Fatalf("m not batched at first: %v", err)
	}
	up.setConfig("m", decoupled("m"))
	for range 2 {
		if err := r.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := statusOf(r, "m")
	if q.batched("m") || q.retired["m"] != 1 || s.Mode != ModePassthrough || !strings.Contains(s.Reason, "decoupled") || len(r.Monitors()) != 0 {
		t.Fatalf("after the reload as decoupled: batched %v, retired %d times, status %+v, %d monitors; want passed through, retired once",
			q.batched("m"), q.retired["m"], s, len(r.Monitors()))
	}
	up.setConfig("m", &triton.ModelConfig{Name: "m", MaxBatchSize: 4})
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	s, _ = statusOf(r, "m")
	if !q.batched("m") || q.specs["m"].MaxBatch != 4 || s.Mode != ModeBatched || len(r.Monitors()) != 1 {
		t.Fatalf("after the reload as batchable: batched %v, status %+v; want batched again with max batch 4", q.batched("m"), s)
	}
}

// TestUnservedModelsForgotten: a model the index lists as not ready
// (unloaded), or a model found by a request whose configuration the
// upstream no longer has, is forgotten at the next discovery, its queue
// retired: the list of models stays the upstream's.
func TestUnservedModelsForgotten(t *testing.T) {
	up := &fakeUpstream{index: []triton.IndexEntry{{Name: "m", State: "READY"}, {Name: "p", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"m": {Name: "m", MaxBatchSize: 8}, "p": decoupled("p"),
			"found": {Name: "found", MaxBatchSize: 8}}, noStats: true}
	r, q := followRegistry(up)
	ctx := context.Background()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	r.Ensure(ctx, "found") // not in the index: a request named it
	if !q.batched("found") {
		t.Fatal("found not batched on demand")
	}
	up.setIndex(triton.IndexEntry{Name: "m", State: "UNAVAILABLE", Reason: "unloaded"}, triton.IndexEntry{Name: "p", State: "UNAVAILABLE"})
	up.setConfig("found", nil)
	r.Refresh(ctx) // found's read fails: the upstream does not serve it
	for _, name := range []string{"m", "p", "found"} {
		if s, ok := statusOf(r, name); ok {
			t.Errorf("%s still listed: %+v", name, s)
		}
	}
	if q.batched("m") || q.batched("found") || q.retired["m"] != 1 || q.retired["found"] != 1 || q.retired["p"] != 0 {
		t.Errorf("retired %v, want m and found once each, p never (it was not batched)", q.retired)
	}
}

// TestChangedRereads: told that a model changed (a load or unload through
// a door, an upstream's "unknown model"), the registry re-decides it
// without waiting for the next discovery: a reload as decoupled passes it
// through, an unload forgets it, a load of a new model batches it.
func TestChangedRereads(t *testing.T) {
	up := &fakeUpstream{index: []triton.IndexEntry{{Name: "m", State: "READY"}, {Name: "u", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"m": {Name: "m", MaxBatchSize: 8}, "u": {Name: "u", MaxBatchSize: 8}}, noStats: true}
	r, q := followRegistry(up)
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	up.setConfig("m", decoupled("m"))
	r.Changed("m")
	testpoll.Until(t, "m passed through", func() bool { s, _ := statusOf(r, "m"); return s.Mode == ModePassthrough && !q.batched("m") })

	up.setIndex(triton.IndexEntry{Name: "m", State: "READY"}, triton.IndexEntry{Name: "u", State: "UNAVAILABLE"},
		triton.IndexEntry{Name: "new", State: "READY"})
	up.setConfig("new", &triton.ModelConfig{Name: "new", MaxBatchSize: 2})
	r.Changed("u")
	r.Changed("new")
	testpoll.Until(t, "u forgotten and new batched", func() bool {
		_, listed := statusOf(r, "u")
		return !listed && !q.batched("u") && q.batched("new")
	})
}

// TestChangedCoalescesAndIsBounded: a burst of changes of one model costs
// one read while one runs and one after it; made-up names in a flood of
// loads cost at most MaxOnDemandLookups reads in flight.
func TestChangedCoalescesAndIsBounded(t *testing.T) {
	up := &fakeUpstream{index: []triton.IndexEntry{{Name: "m", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"m": {Name: "m", MaxBatchSize: 8}}, noStats: true, gate: make(chan struct{})}
	r, _ := followRegistry(up)
	for range 20 {
		r.Changed("m")
	}
	for i := range MaxOnDemandLookups + 100 {
		r.Changed(fmt.Sprint("made-up-", i))
	}
	r.mu.Lock()
	inFlight := len(r.changing)
	r.mu.Unlock()
	if inFlight > MaxOnDemandLookups {
		t.Errorf("%d models being read again, want at most %d", inFlight, MaxOnDemandLookups)
	}
	close(up.gate)
	testpoll.Until(t, "every re-read done", func() bool { r.mu.Lock(); defer r.mu.Unlock(); return len(r.changing) == 0 })
	up.mu.Lock()
	defer up.mu.Unlock()
	if reads := up.lookups - (inFlight - 1); reads > 2 {
		t.Errorf("%d reads of m for 20 changes told while one ran, want at most 2", reads)
	}
}
