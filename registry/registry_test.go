package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
)

type fakeUpstream struct {
	mu      sync.Mutex
	index   []triton.IndexEntry
	configs map[string]*triton.ModelConfig
	stats   map[string][]triton.BatchStat
	down    bool
	noStats bool // ModelStats fails, as on a server without statistics
	reads   int  // ModelStats calls
	indexes int  // RepositoryIndex calls
	lookups int  // ModelConfig calls
	// gate, when set, holds every ModelConfig call until it is closed.
	gate chan struct{}
}

func (f *fakeUpstream) RepositoryIndex(context.Context) ([]triton.IndexEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.indexes++
	if f.down {
		return nil, errors.New("connection refused")
	}
	return f.index, nil
}

func (f *fakeUpstream) ModelConfig(_ context.Context, m string) (*triton.ModelConfig, error) {
	f.mu.Lock()
	f.lookups++
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.configs[m]
	if !ok {
		return nil, &triton.StatusError{Status: 404, Msg: "unknown model"}
	}
	cp := *c
	return &cp, nil
}

func (f *fakeUpstream) ModelStats(_ context.Context, m string) ([]triton.BatchStat, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.noStats {
		return nil, &triton.StatusError{Status: 404, Msg: "no statistics"}
	}
	return f.stats[m], nil
}

func (f *fakeUpstream) setStats(m string, s []triton.BatchStat) {
	f.mu.Lock()
	f.stats[m] = s
	f.mu.Unlock()
}

func (f *fakeUpstream) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.indexes
}

func (f *fakeUpstream) statReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

type fakeQueues struct {
	mu      sync.Mutex
	specs   map[string]dispatcher.ModelSpec // the batched models'
	retired map[string]int                  // RetireModel calls by model
}

func (q *fakeQueues) Unready() string { return "" }

func (q *fakeQueues) SetModel(s dispatcher.ModelSpec) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.specs[s.Name] = s
	return nil
}

func (q *fakeQueues) RetireModel(name string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.retired == nil {
		q.retired = map[string]int{}
	}
	q.retired[name]++
	delete(q.specs, name)
}

func (q *fakeQueues) batched(name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.specs[name]
	return ok
}

func stat(b int, ms float64) triton.BatchStat {
	var s triton.BatchStat
	s.BatchSize = b
	s.ComputeInfer.Count = 10
	s.ComputeInfer.Ns = int64(ms * 1e6 * 10)
	return s
}

func TestRefreshReconciles(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "resnet.csv")
	os.WriteFile(csv, []byte("batch_size,latency_ms\n1,3\n2,5\n4,9\n8,17\n"), 0o644)

	up := &fakeUpstream{
		index: []triton.IndexEntry{{Name: "simple", State: "READY"}, {Name: "resnet", State: "READY"},
			{Name: "nobatch", State: "READY"}, {Name: "loading", State: "LOADING"}, {Name: "quiet", State: "READY"}},
		configs: map[string]*triton.ModelConfig{
			"simple":  {Name: "simple", MaxBatchSize: 8, InstanceGroup: []triton.InstanceGroup{{Kind: "KIND_GPU", Count: 2}}, DynamicBatching: []byte(`{"max_queue_delay_microseconds":"100"}`)},
			"resnet":  {Name: "resnet", MaxBatchSize: 32},
			"nobatch": {Name: "nobatch", MaxBatchSize: 0},
			"quiet":   {Name: "quiet", MaxBatchSize: 4},
		},
		stats: map[string][]triton.BatchStat{"simple": {stat(1, 1.5), stat(4, 3), stat(8, 5)}},
	}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	cfg.Models = map[string]config.Model{
		"resnet": {ProfileCSV: csv, MaxBatchSize: 16},
		"quiet":  {Policy: "passthrough"},
	}
	r := New(up, q, &cfg, nil)
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}

	byName := map[string]Status{}
	for _, s := range r.Statuses() {
		byName[s.Model] = s
	}
	tests := []struct {
		model     string
		batched   bool
		maxBatch  int
		instances int
		seed      string
	}{
		{"simple", true, 8, 2, "upstream statistics"},
		{"resnet", true, 16, 1, "profile " + csv},
		{"nobatch", false, 0, 0, ""},
		{"quiet", false, 0, 0, ""},
	}
	for _, tt := range tests {
		s, ok := byName[tt.model]
		if !ok {
			t.Fatalf("%s not in status", tt.model)
		}
		if s.Batched != tt.batched {
			t.Errorf("%s batched = %v, want %v (reason %q)", tt.model, s.Batched, tt.batched, s.Reason)
			continue
		}
		if !tt.batched {
			if s.Reason == "" {
				t.Errorf("%s: passed through without a reason", tt.model)
			}
			if _, queued := q.specs[tt.model]; queued {
				t.Errorf("%s: registered with the dispatcher although not batched", tt.model)
			}
			continue
		}
		spec := q.specs[tt.model]
		if spec.MaxBatch != tt.maxBatch || spec.Instances != tt.instances || s.Seed != tt.seed {
			t.Errorf("%s: max batch %d instances %d seed %q; want %d %d %q", tt.model, spec.MaxBatch, spec.Instances, s.Seed, tt.maxBatch, tt.instances, tt.seed)
		}
		// The model's monitor plans, observes its queue and reads its callers.
		if mon, ok := spec.Planner.(*monitor.Monitor); !ok || spec.Observer != dispatcher.Observer(mon) || spec.WatchCallers == nil {
			t.Errorf("%s: planner %T, observer %T, callers watched %v; want its monitor for all three", tt.model, spec.Planner, spec.Observer, spec.WatchCallers != nil)
		}
	}
	if _, ok := byName["loading"]; ok {
		t.Error("a model not READY was registered")
	}
	if !strings.Contains(byName["simple"].Warning, "dynamic batcher") {
		t.Errorf("no warning about Triton's own dynamic batcher: %q", byName["simple"].Warning)
	}
	// The profile's line (tau = 2b + 1) seeds resnet's fit.
	if rule := byName["resnet"].Rule; rule == nil || rule.AlphaMs < 1.9 || rule.AlphaMs > 2.1 {
		t.Errorf("resnet seed not from its profile: %+v", rule)
	}

	// The upstream raises simple's limits: the queue follows.
	up.mu.Lock()
	up.configs["simple"].MaxBatchSize = 16
	up.mu.Unlock()
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := q.specs["simple"].MaxBatch; got != 16 {
		t.Errorf("max batch after the upstream changed = %d, want 16", got)
	}

	up.mu.Lock()
	up.down = true
	up.mu.Unlock()
	if err := r.Refresh(context.Background()); !errors.Is(err, ErrUnreachable) {
		t.Errorf("unreachable upstream: %v, want ErrUnreachable", err)
	}
	if len(r.Monitors()) != 2 {
		t.Errorf("models forgotten when the upstream was unreachable")
	}
}

func TestEnsureDiscoversUnlistedModels(t *testing.T) {
	// PyTriton's repository index is empty; models are found when named.
	up := &fakeUpstream{configs: map[string]*triton.ModelConfig{"simple": {Name: "simple", MaxBatchSize: 8}}}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	r := New(up, q, &cfg, nil)
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(q.specs) != 0 {
		t.Fatal("models registered from an empty index")
	}
	r.Ensure(context.Background(), "simple")
	if q.specs["simple"].MaxBatch != 8 {
		t.Fatalf("simple not registered on demand: %+v", q.specs)
	}
	// An unknown name is looked up once per discovery interval, not per request.
	r.Ensure(context.Background(), "nosuch")
	up.mu.Lock()
	up.configs["nosuch"] = &triton.ModelConfig{Name: "nosuch", MaxBatchSize: 4}
	up.mu.Unlock()
	r.Ensure(context.Background(), "nosuch")
	if _, ok := q.specs["nosuch"]; ok {
		t.Fatal("a failed lookup was retried before the discovery interval")
	}
}

// Requests naming a model while its on-demand lookup runs wait for that
// lookup instead of finding the model unknown (and being passed through):
// one lookup, and every caller returns with the model registered.
func TestEnsureWaitsForALookupInProgress(t *testing.T) {
	up := &fakeUpstream{configs: map[string]*triton.ModelConfig{"simple": {Name: "simple", MaxBatchSize: 8}}, gate: make(chan struct{})}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	r := New(up, q, &cfg, nil)
	const callers = 4
	registered := make(chan bool, callers)
	asked := make(chan struct{}, 2*callers)
	for range callers {
		go func() {
			r.Ensure(&doneSignal{Context: context.Background(), asked: asked}, "simple")
			q.mu.Lock()
			_, ok := q.specs["simple"]
			q.mu.Unlock()
			registered <- ok
		}()
	}
	// One caller looks (held in ModelConfig by the gate, without asking its
	// context for Done); the others reach their wait, where they ask for
	// Done. None may return while the gate holds the lookup.
	testpoll.Until(t, "one lookup started", func() bool {
		up.mu.Lock()
		defer up.mu.Unlock()
		return up.lookups == 1
	})
	expire := time.After(10 * time.Second)
	for waiting := 0; waiting < callers-1; {
		select {
		case <-asked:
			waiting++
		case <-registered:
			t.Fatal("a caller returned while the lookup was still running")
		case <-expire:
			t.Fatalf("only %d of %d callers reached their wait for the lookup", waiting, callers-1)
		}
	}
	if len(registered) != 0 {
		t.Fatal("a caller returned while the lookup was still running")
	}
	close(up.gate)
	for range callers {
		if !<-registered {
			t.Fatal("a caller returned before the model was registered")
		}
	}
	if up.lookups != 1 {
		t.Fatalf("%d lookups for one model, want 1", up.lookups)
	}

	// A caller whose context ends stops waiting.
	up.gate = make(chan struct{})
	defer close(up.gate)
	go r.Ensure(context.Background(), "other")
	testpoll.Until(t, "the lookup of other started", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.looking["other"] != nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Ensure(ctx, "other") // returns: its context is done
}

// doneSignal is a context that reports, once, that its Done was asked
// for: a caller of Ensure asks when it starts waiting for another's lookup.
type doneSignal struct {
	context.Context
	once  sync.Once
	asked chan<- struct{}
}

func (c *doneSignal) Done() <-chan struct{} {
	c.once.Do(func() { c.asked <- struct{}{} })
	return c.Context.Done()
}

// TestStatisticsFeedTheMonitor runs the registry against an upstream whose
// batch statistics grow along a known line: the monitor learns from them.
// Against one without statistics the registry stops asking.
func TestStatisticsFeedTheMonitor(t *testing.T) {
	line := func(b int) float64 { return 0.5*float64(b) + 4 }
	grown := func(n int64) []triton.BatchStat {
		var out []triton.BatchStat
		for _, b := range []int{1, 2, 3, 5, 8} {
			var s triton.BatchStat
			s.BatchSize = b
			s.ComputeInfer.Count = n
			s.ComputeInfer.Ns = int64(float64(n) * line(b) * 1e6)
			out = append(out, s)
		}
		return out
	}
	up := &fakeUpstream{
		index:   []triton.IndexEntry{{Name: "m", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"m": {Name: "m", MaxBatchSize: 8}},
		stats:   map[string][]triton.BatchStat{},
	}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	cfg.Policy.Window = 5 * time.Millisecond
	r := New(up, &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}, &cfg, nil)
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	var snap *monitor.Snapshot
	n := int64(0)
	testpoll.Until(t, "the monitor fitted the statistics' line", func() bool {
		n++
		up.setStats("m", grown(10*n))
		snap = r.Statuses()[0].Rule
		return snap.FitSource == "server statistics" && snap.FitDoubt == "" && math.Abs(snap.AlphaMs-0.5) < 1e-3
	})
	if snap.FitSource != "server statistics" || math.Abs(snap.AlphaMs-0.5) > 1e-3 || math.Abs(snap.Tau0Ms-4) > 1e-2 {
		t.Fatalf("monitor %+v: want the statistics' line 0.5*b + 4", snap)
	}

	up = &fakeUpstream{
		index:   []triton.IndexEntry{{Name: "m", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"m": {Name: "m", MaxBatchSize: 8}},
		noStats: true,
	}
	r = New(up, &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}, &cfg, nil)
	// The poller's ticks are the test's: it reads once at start and once
	// per tick, and stopping its ticker is the signal that it gave up.
	ticks, stopped := make(chan time.Time), make(chan struct{})
	r.statsTicker = func(time.Duration) (<-chan time.Time, func()) { return ticks, func() { close(stopped) } }
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	go r.Run(ctx)
	expire := time.After(10 * time.Second)
	for sent := 0; ; sent++ {
		if sent > 3*statsGiveUp {
			t.Fatalf("the poller still reads after %d failed reads; it gives up after %d", up.statReads()-1, statsGiveUp)
		}
		select {
		case ticks <- time.Now():
			continue
		case <-stopped:
		case <-expire:
			t.Fatal("the statistics poller neither read nor stopped in 10s")
		}
		break
	}
	// One read for the seed, statsGiveUp by the poller, then none.
	if n := up.statReads(); n != 1+statsGiveUp {
		t.Fatalf("%d statistics reads from a server without them, want %d", n, 1+statsGiveUp)
	}
	if s := r.Statuses()[0].Rule; s.FitSource != "round trip" {
		t.Fatalf("fit source %q", s.FitSource)
	}
}

// Discover retries the model list until the upstream answers (Triton may
// start after the proxy), and only then reports the registry discovered.
func TestDiscoverRetriesUntilTheUpstreamAnswers(t *testing.T) {
	defer func(first, last time.Duration) { discoverFirstRetry, discoverMaxRetry = first, last }(discoverFirstRetry, discoverMaxRetry)
	discoverFirstRetry, discoverMaxRetry = time.Millisecond, 4*time.Millisecond

	up := &fakeUpstream{
		down:    true,
		index:   []triton.IndexEntry{{Name: "simple", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"simple": {Name: "simple", MaxBatchSize: 8}},
		stats:   map[string][]triton.BatchStat{},
	}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	r := New(up, q, &cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Discover(ctx) }()
	defer func() { cancel(); <-done }()

	// Down: several attempts, none of which may mark the registry discovered.
	// The third attempt started, so the first two have been handled: a
	// registry that took a failure for discovery is marked by now.
	testpoll.Until(t, "three attempts to read the model list", func() bool { return up.attempts() >= 3 })
	if r.Discovered() {
		t.Fatal("discovered while the upstream is down")
	}
	up.mu.Lock()
	up.down = false
	up.mu.Unlock()
	testpoll.Until(t, "discovery after the upstream came up", r.Discovered)
	if len(r.Statuses()) != 1 {
		t.Fatalf("statuses %+v, want the upstream's one model", r.Statuses())
	}

	// Discover gives up with ctx, also while still retrying.
	cancel()
	<-done
	up2 := &fakeUpstream{down: true}
	r2 := New(up2, q, &cfg, nil)
	ctx2, cancel2 := context.WithCancel(context.Background())
	cancel2()
	r2.Discover(ctx2) // returns at once
	if r2.Discovered() {
		t.Fatal("discovered a down upstream")
	}
}

// A model the configuration names that the upstream does not serve (a typo,
// or a model not loaded) is warned about in the log, once, and in Statuses
// (so in /status), until the upstream serves it.
func TestConfiguredModelsTheUpstreamLacksAreWarned(t *testing.T) {
	up := &fakeUpstream{
		index: []triton.IndexEntry{{Name: "simple", State: "READY"}, {Name: "llm", State: "UNAVAILABLE", Reason: "unloaded"}},
		configs: map[string]*triton.ModelConfig{
			"simple": {Name: "simple", MaxBatchSize: 8},
			"llm":    {Name: "llm", MaxBatchSize: 8},
		},
	}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	cfg.Models = map[string]config.Model{"simple": {MaxBatchSize: 4}, "resnet50": {}, "llm": {}}
	var logs bytes.Buffer
	r := New(up, q, &cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	ctx := context.Background()
	for range 2 {
		if err := r.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	warnings := map[string]string{}
	for _, s := range r.Statuses() {
		warnings[s.Model] = s.Warning
	}
	if w := warnings["resnet50"]; !strings.Contains(w, "neither lists it") {
		t.Errorf("resnet50's status warning %q, want one saying the upstream neither lists nor serves it", w)
	}
	if w := warnings["llm"]; !strings.Contains(w, "UNAVAILABLE (unloaded)") {
		t.Errorf("llm's status warning %q, want one naming its state", w)
	}
	if w, ok := warnings["simple"]; !ok || w != "" {
		t.Errorf("simple: listed %v, warning %q; want listed without a warning", ok, w)
	}
	for _, m := range []string{"resnet50", "llm"} {
		if n := strings.Count(logs.String(), "model="+m); n != 1 {
			t.Errorf("%d log lines name %s over two refreshes, want 1:\n%s", n, m, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"configured model not served by the upstream\"") {
		t.Errorf("no warning in the log:\n%s", logs.String())
	}

	// Loaded later: the warning goes, and the model is batched.
	up.mu.Lock()
	up.index = append(up.index, triton.IndexEntry{Name: "resnet50", State: "READY"})
	up.configs["resnet50"] = &triton.ModelConfig{Name: "resnet50", MaxBatchSize: 8}
	up.mu.Unlock()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Statuses() {
		if s.Model == "resnet50" && (s.Warning != "" || !s.Batched) {
			t.Errorf("resnet50 once served: %+v, want batched without a warning", s)
		}
	}
}

// A server whose repository index lists nothing (PyTriton) still serves
// its models: those the configuration names are looked up by name at the
// first refresh and batched before any request names them, with no
// warning; a configured name it does not serve is warned about; a model
// the index lists as not ready is not asked for.
func TestConfiguredModelsAreLookedUpWhenTheIndexOmitsThem(t *testing.T) {
	up := &fakeUpstream{
		index: []triton.IndexEntry{{Name: "llm", State: "UNAVAILABLE"}},
		configs: map[string]*triton.ModelConfig{
			"simple": {Name: "simple", MaxBatchSize: 8},
			"image":  {Name: "image", MaxBatchSize: 16},
			"llm":    {Name: "llm", MaxBatchSize: 8},
		},
	}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	cfg.Models = map[string]config.Model{"simple": {}, "image": {MaxBatchSize: 4}, "typo": {}, "llm": {}}
	var logs bytes.Buffer
	r := New(up, q, &cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	specs := maps.Clone(q.specs)
	q.mu.Unlock()
	if s, ok := specs["simple"]; !ok || s.MaxBatch != 8 {
		t.Errorf("simple: spec %+v (registered %v), want batched at the upstream's max batch 8", s, ok)
	}
	if s, ok := specs["image"]; !ok || s.MaxBatch != 4 {
		t.Errorf("image: spec %+v (registered %v), want batched at the configured cap 4", s, ok)
	}
	if _, ok := specs["llm"]; ok {
		t.Error("llm, listed UNAVAILABLE, was registered")
	}
	warnings := map[string]string{}
	for _, s := range r.Statuses() {
		warnings[s.Model] = s.Warning
	}
	for _, m := range []string{"simple", "image"} {
		if w, ok := warnings[m]; !ok || w != "" {
			t.Errorf("%s: in /status %v, warning %q; want listed without a warning", m, ok, w)
		}
	}
	if w := warnings["typo"]; !strings.Contains(w, "neither lists it") {
		t.Errorf("typo's warning %q, want one saying the upstream neither lists nor serves it", w)
	}
	if w := warnings["llm"]; !strings.Contains(w, "UNAVAILABLE") {
		t.Errorf("llm's warning %q, want its state", w)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "not served") && (strings.Contains(line, "model=simple") || strings.Contains(line, "model=image")) {
			t.Errorf("a served model warned about: %s", line)
		}
	}
}

// TestSetPolicy walks PUT /policy's changes in turn (the state carries
// over from step to step): each step's policy and latency budget in force
// per model, as Policies, Statuses and Config show them.
func TestSetPolicy(t *testing.T) {
	up := &fakeUpstream{
		index: []triton.IndexEntry{{Name: "simple", State: "READY"}, {Name: "resnet", State: "READY"}, {Name: "nobatch", State: "READY"}},
		configs: map[string]*triton.ModelConfig{
			"simple":  {Name: "simple", MaxBatchSize: 8},
			"resnet":  {Name: "resnet", MaxBatchSize: 32},
			"nobatch": {Name: "nobatch", MaxBatchSize: 0},
			"late":    {Name: "late", MaxBatchSize: 4},
		},
	}
	q := &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	cfg.Policy.Name = "budget"
	cfg.Policy.Options = cfg.Policy.Options.With(policy.BudgetOptions{})
	cfg.Models = map[string]config.Model{"resnet": {LatencyBudget: "1.3x"}}
	r := New(up, q, &cfg, nil)
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	type inForce struct{ policy, budget string }
	for _, step := range []struct {
		name          string
		model, policy string
		options       map[string]string
		err           string // in the error; "" for none
		switched      []string
		want          map[string]inForce // "" for the default
	}{
		{name: "as configured",
			want: map[string]inForce{"": {"budget", ""}, "simple": {"budget", ""}, "resnet": {"budget", "1.3x"}}},
		{name: "one model to adhoc", model: "simple", policy: "adhoc", switched: []string{"simple"},
			want: map[string]inForce{"": {"budget", ""}, "simple": {"adhoc", ""}, "resnet": {"budget", "1.3x"}}},
		{name: "one model to budget with a budget", model: "simple", policy: "budget", options: map[string]string{"latency_budget": "1.5x"},
			switched: []string{"simple"},
			want:     map[string]inForce{"": {"budget", ""}, "simple": {"budget", "1.5x"}, "resnet": {"budget", "1.3x"}}},
		{name: "away from budget, the budget stays set", model: "simple", policy: "adhoc", switched: []string{"simple"},
			want: map[string]inForce{"simple": {"adhoc", "1.5x"}}},
		{name: "and back: the model's budget again", model: "simple", policy: "budget", switched: []string{"simple"},
			want: map[string]inForce{"simple": {"budget", "1.5x"}, "resnet": {"budget", "1.3x"}}},
		{name: "unknown policy", policy: "nonsense", err: "nonsense",
			want: map[string]inForce{"": {"budget", ""}, "simple": {"budget", "1.5x"}}},
		{name: "a model not batched", model: "nobatch", policy: "budget", options: map[string]string{"latency_budget": "1.2x"},
			err: `no batched model "nobatch"`, want: map[string]inForce{"simple": {"budget", "1.5x"}}},
		{name: "a budget that does not read", model: "simple", policy: "budget", options: map[string]string{"latency_budget": "fast"},
			err: "latency budget", want: map[string]inForce{"simple": {"budget", "1.5x"}}},
		{name: "a budget below ad-hoc", model: "simple", policy: "budget", options: map[string]string{"latency_budget": "0.5x"},
			err: "latency budget", want: map[string]inForce{"simple": {"budget", "1.5x"}}},
		{name: "latency_budget with another policy", model: "simple", policy: "adhoc", options: map[string]string{"latency_budget": "1.2x"},
			err: "applies to the budget policy", want: map[string]inForce{"simple": {"budget", "1.5x"}}},
		{name: "an option policies do not have", model: "simple", policy: "budget", options: map[string]string{"window": "1s"},
			err: `unknown policy option "window"`, want: map[string]inForce{"simple": {"budget", "1.5x"}}},
		{name: "every model, with a budget", policy: "budget", options: map[string]string{"latency_budget": "1.2x"},
			switched: []string{"resnet", "simple"},
			want:     map[string]inForce{"": {"budget", "1.2x"}, "simple": {"budget", "1.2x"}, "resnet": {"budget", "1.2x"}}},
		{name: "every model, another option: the budget stays", policy: "budget", options: map[string]string{"wait_bound": "3ms"},
			switched: []string{"resnet", "simple"},
			want:     map[string]inForce{"": {"budget", "1.2x"}, "simple": {"budget", "1.2x"}, "resnet": {"budget", "1.2x"}}},
		{name: "every model to adhoc", policy: "adhoc", switched: []string{"resnet", "simple"},
			want: map[string]inForce{"": {"adhoc", "1.2x"}, "simple": {"adhoc", "1.2x"}, "resnet": {"adhoc", "1.2x"}}},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.policy != "" {
				switched, err := r.SetPolicy(context.Background(), step.model, step.policy, step.options)
				if step.err == "" && err != nil || step.err != "" && (err == nil || !strings.Contains(err.Error(), step.err)) {
					t.Fatalf("error %v, want one with %q", err, step.err)
				}
				if strings.Join(switched, ",") != strings.Join(step.switched, ",") {
					t.Errorf("switched %v, want %v", switched, step.switched)
				}
			}
			pols := r.Policies()
			got := map[string]InForce{"": pols.Default}
			for _, p := range pols.Models {
				got[p.Model] = p
			}
			statuses := map[string]Status{}
			for _, s := range r.Statuses() {
				statuses[s.Model] = s
			}
			for model, want := range step.want {
				p := got[model]
				// Shown as in force: the default for an empty budget, and
				// none for a policy without one.
				var shown any = want.budget
				switch {
				case want.policy != "budget":
					shown = nil
				case want.budget == "":
					shown = "1.10x"
				}
				if p.Policy != want.policy || p.Options["latency_budget"] != shown {
					t.Errorf("%q: %s %v, want %s with latency_budget %v", model, p.Policy, p.Options["latency_budget"], want.policy, shown)
				}
				if model == "" {
					c := r.Config()
					if b := policy.OptionsOf[policy.BudgetOptions](c.Policy.Options); c.Policy.Name != want.policy || b.LatencyBudget != want.budget {
						t.Errorf("config in force: %s %q, want %s %q", c.Policy.Name, b.LatencyBudget, want.policy, want.budget)
					}
					continue
				}
				s := statuses[model]
				if s.Policy != want.policy || s.Options["latency_budget"] != shown || s.Rule == nil || s.Rule.Policy != want.policy {
					t.Errorf("%s's status: %s %v (rule %+v), want %s %v", model, s.Policy, s.Options["latency_budget"], s.Rule, want.policy, shown)
				}
			}
		})
	}
	if _, kept := r.setOptions["nobatch"]; kept {
		t.Error("a refused change kept its options")
	}
	if w := policy.OptionsOf[policy.BudgetOptions](r.Config().Policy.Options).MaxWait; w != 3*time.Millisecond {
		t.Errorf("wait_bound set for every model: %v in force, want 3ms", w)
	}
	// A model found later runs what was set for every model.
	up.mu.Lock()
	up.index = append(up.index, triton.IndexEntry{Name: "late", State: "READY"})
	up.mu.Unlock()
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Statuses() {
		if s.Model == "late" && (s.Policy != "adhoc" || s.Rule == nil || s.Rule.Policy != "adhoc") {
			t.Errorf("a model found after the change runs %q (rule %+v), want adhoc", s.Policy, s.Rule)
		}
	}
}

// The budget's p99 options go through PUT /policy's path as the mean's
// does: set for one model, shown in force, refused for another policy.
func TestSetPolicyTailOptions(t *testing.T) {
	r, ctx := simpleRegistry(t), context.Background()
	if _, err := r.SetPolicy(ctx, "simple", "budget", map[string]string{"tail_budget": "1.3x", "slo_p99": "12ms"}); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	for _, in := range r.Policies().Models {
		if in.Model == "simple" {
			got = in.Options
		}
	}
	if got["tail_budget"] != "1.3x" || fmt.Sprint(got["slo_p99"]) != "12ms" {
		t.Errorf("in force %v, want tail_budget 1.3x and slo_p99 12ms", got)
	}
	for _, k := range []string{"tail_budget", "slo_p99"} {
		_, err := r.SetPolicy(ctx, "simple", "adhoc", map[string]string{k: "2x"})
		if err == nil || !strings.Contains(err.Error(), k+" applies to the budget policy") {
			t.Errorf("%s with adhoc: error %v, want it refused", k, err)
		}
	}
	if _, err := r.SetPolicy(ctx, "simple", "budget", map[string]string{"slo_p99": "soon"}); err == nil {
		t.Error("slo_p99 soon: no error")
	}
}

// A key belongs to the policies whose options have it: PUT /policy with a
// key of another policy is refused, naming the policies that take it, and
// switches nothing.
func TestSetPolicyRefusesAnotherPolicysOption(t *testing.T) {
	r, ctx := simpleRegistry(t), context.Background()
	for _, tc := range []struct {
		policy, key, value, err string
	}{
		{"budget", "w2", "0.5", "w2 applies to the smdp policy"},
		{"budget", "batch", "4", "batch applies to the static policy"},
		{"smdp", "latency_budget", "1.2x", "latency_budget applies to the budget policy"},
		{"adhoc", "wait_bound", "2ms", "wait_bound applies to the batchmonitor, batchmonitor+, budget, smdp, static policies"},
		{"elastic", "sla", "5ms", "sla applies to the budget, slack policies"},
	} {
		switched, err := r.SetPolicy(ctx, "simple", tc.policy, map[string]string{tc.key: tc.value})
		if err == nil || !strings.Contains(err.Error(), tc.err) || len(switched) != 0 {
			t.Errorf("%s with %s: switched %v, error %v, want it refused with %q", tc.policy, tc.key, switched, err, tc.err)
		}
	}
	if in := r.Policies().Models; len(in) != 1 || in[0].Policy != "budget" {
		t.Errorf("after refused changes: %+v, want simple still on budget", in)
	}
	// The same keys with a policy that has them pass.
	for pol, key := range map[string]string{"smdp": "w2", "static": "batch", "budget": "latency_budget", "slack": "sla"} {
		value := map[string]string{"w2": "0.5", "batch": "4", "latency_budget": "1.2x", "sla": "5ms"}[key]
		if _, err := r.SetPolicy(ctx, "simple", pol, map[string]string{key: value}); err != nil {
			t.Errorf("%s with %s: %v", pol, key, err)
		}
	}
}

// simpleRegistry is a registry of the default configuration over one
// batched model, simple.
func simpleRegistry(t *testing.T) *Models {
	t.Helper()
	up := &fakeUpstream{
		index:   []triton.IndexEntry{{Name: "simple", State: "READY"}},
		configs: map[string]*triton.ModelConfig{"simple": {Name: "simple", MaxBatchSize: 8}},
	}
	cfg := config.Default()
	cfg.Upstream = "http://u"
	r := New(up, &fakeQueues{specs: map[string]dispatcher.ModelSpec{}}, &cfg, nil)
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r
}

// The what-if reads a batched model's monitor and the setting in force,
// and builds other settings as PUT /policy would, over the model's own
// options, without switching it.
func TestWhatIfReadsAndBuildsSettings(t *testing.T) {
	r, ctx := simpleRegistry(t), context.Background()
	if _, err := r.SetPolicy(ctx, "simple", "budget", map[string]string{"latency_budget": "1.3x"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Monitor("simple"); !ok {
		t.Fatal("no monitor of the batched model simple")
	}
	if _, ok := r.Monitor("nonsense"); ok {
		t.Error("a monitor of a model that does not exist")
	}
	name, opts, ok := r.InForce("simple")
	if !ok || name != "budget" || opts["latency_budget"] != "1.3x" {
		t.Errorf("in force %q %v %v, want budget with latency_budget 1.3x", name, opts, ok)
	}
	var tuned bool
	p, err := r.NewPolicy("simple", "budget", map[string]string{"tail_budget": "1.5x"}, func(o *policy.Options) {
		b := policy.OptionsOf[policy.BudgetOptions](*o)
		tuned = b.LatencyBudget == "1.3x" && b.TailBudget == "1.5x" // the model's own, and what was set
	})
	if err != nil || p.Name() != "budget" || !tuned {
		t.Errorf("built %v, %v (tuned over the model's options: %v)", p, err, tuned)
	}
	if _, err := r.NewPolicy("simple", "adhoc", map[string]string{"tail_budget": "2x"}, nil); err == nil {
		t.Error("an option adhoc does not take was accepted")
	}
	if name, _, _ := r.InForce("simple"); name != "budget" {
		t.Errorf("building a policy switched the model to %s", name)
	}
}
