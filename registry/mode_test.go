package registry

import (
	"context"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/kserve"
)

// modeUpstream serves one model of each kind Triton batches otherwise
// than by concatenating rows, beside plain batchable ones.
func modeUpstream() *fakeUpstream {
	cached := &triton.ModelConfig{Name: "cached", MaxBatchSize: 8}
	cached.ResponseCache.Enable = true
	cachedToo := *cached
	cachedToo.Name = "cached_batched"
	dec := &triton.ModelConfig{Name: "dec", MaxBatchSize: 8}
	dec.ModelTransactionPolicy.Decoupled = true
	return &fakeUpstream{
		index: []triton.IndexEntry{{Name: "plain", State: "READY"}, {Name: "ragged", State: "READY"}, {Name: "count", State: "READY"},
			{Name: "shape", State: "READY"}, {Name: "cached", State: "READY"}, {Name: "cached_batched", State: "READY"},
			{Name: "dec", State: "READY"}, {Name: "seq", State: "READY"}, {Name: "nobatch", State: "READY"},
			{Name: "quiet", State: "READY"}, {Name: "gone", State: "UNAVAILABLE", Reason: "unloaded"}, {Name: "noconfig", State: "READY"}},
		configs: map[string]*triton.ModelConfig{
			"plain":  {Name: "plain", MaxBatchSize: 8},
			"ragged": {Name: "ragged", MaxBatchSize: 8, Input: []kserve.ConfigInput{{Name: "X"}, {Name: "INPUT0", AllowRaggedBatch: true}}},
			"count": {Name: "count", MaxBatchSize: 8, BatchInput: []kserve.BatchInput{{Kind: "BATCH_ELEMENT_COUNT", TargetName: []string{"N"},
				SourceInput: []string{"X"}}}},
			"shape":          {Name: "shape", MaxBatchSize: 8, Input: []kserve.ConfigInput{{Name: "S", IsShapeTensor: true}}},
			"cached":         cached,
			"cached_batched": &cachedToo,
			"dec":            dec,
			"seq":            {Name: "seq", MaxBatchSize: 8, SequenceBatching: []byte(`{}`)},
			"nobatch":        {Name: "nobatch"},
			"quiet":          {Name: "quiet", MaxBatchSize: 8},
		},
		noStats: true,
	}
}

func modeConfig() config.Config {
	cfg := config.Default()
	cfg.Upstream = "http://u"
	cfg.Models = map[string]config.Model{"quiet": {Policy: config.Passthrough}, "cached_batched": {BatchCached: true}}
	return cfg
}

// wantModes is what the proxy does with each model of modeUpstream, and
// a word of why.
var wantModes = map[string]struct{ mode, why string }{
	"plain":          {ModeBatched, ""},
	"ragged":         {ModePassthrough, "ragged input INPUT0"},
	"count":          {ModePassthrough, "batch_input BATCH_ELEMENT_COUNT"},
	"shape":          {ModePassthrough, "shape tensor input S"},
	"cached":         {ModePassthrough, "response cache"},
	"cached_batched": {ModeBatched, ""},
	"dec":            {ModePassthrough, "decoupled"},
	"seq":            {ModePassthrough, "sequence batching"},
	"nobatch":        {ModePassthrough, "max_batch_size is 0"},
	"quiet":          {ModePassthrough, "policy passthrough"},
	"gone":           {ModeNotServed, "UNAVAILABLE (unloaded)"},
	"noconfig":       {ModeNotServed, "configuration unreadable"},
}

func checkModes(t *testing.T, got []Status, skip ...string) {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range got {
		seen[s.Model] = true
		want, ok := wantModes[s.Model]
		if !ok {
			t.Errorf("unexpected model %q", s.Model)
			continue
		}
		if s.Mode != want.mode || s.Batched != (want.mode == ModeBatched) || !strings.Contains(s.Reason, want.why) ||
			(want.mode != ModeBatched && s.Reason == "") {
			t.Errorf("%s: mode %q batched %v reason %q; want %q with a reason naming %q", s.Model, s.Mode, s.Batched, s.Reason, want.mode, want.why)
		}
	}
	for name := range wantModes {
		if !seen[name] && !strings.Contains(strings.Join(skip, " "), name) {
			t.Errorf("model %s not listed", name)
		}
	}
}

// TestModes: ratebatch models' reading of an upstream says, per model,
// what serve would do with it and why, without starting anything.
func TestModes(t *testing.T) {
	cfg := modeConfig()
	got, err := Modes(context.Background(), modeUpstream(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkModes(t, got)
	if _, err := Modes(context.Background(), &fakeUpstream{down: true}, &cfg); err == nil {
		t.Error("Modes of an unreachable upstream: no error")
	}
}

// TestRefreshBatchesOnlyWhatTritonBatchesAlike: discovery queues only the
// models Triton batches by concatenating rows; the others are listed,
// passed through, each with its reason.
func TestRefreshBatchesOnlyWhatTritonBatchesAlike(t *testing.T) {
	cfg := modeConfig()
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	r := New(modeUpstream(), q, &cfg, nil)
	r.Refresh(context.Background()) // noconfig fails: its error is expected
	q.mu.Lock()
	for name := range q.specs {
		if wantModes[name].mode != ModeBatched {
			t.Errorf("%s queued for batching", name)
		}
	}
	q.mu.Unlock()
	// Statuses lists what discovery read: the models it could not read
	// (gone, noconfig) are not known to it.
	checkModes(t, r.Statuses(), "gone", "noconfig")
}
