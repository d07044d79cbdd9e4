package dispatcher

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
// lone connection whose call waits has no partner; once reused and
// answered it is one for the next caller's call; a call without a source (gRPC) makes
// the count unknown for SourceIdleFor.
func TestDecisionsKnowTheIdleSources(t *testing.T) {
	clock := struct {
		sync.Mutex
		t time.Time
	}{t: time.Unix(1000, 0)}
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.t }
	advance := func(d time.Duration) { clock.Lock(); clock.t = clock.t.Add(d); clock.Unlock() }
	rule := &seenRule{}
	pl := newPlanner(rule)
	d := startModel(t, Options{Upstream: &fakeUpstream{}, Now: now}, ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: pl, Observer: pl})
	submit := func(src uint64) policy.Queue {
		t.Helper()
		c := call(t, 1, 1)
		c.Source = src
		if err := checkAnswer(c, d.Submit(context.Background(), "simple", c)); err != nil {
			t.Fatal(err)
		}
		return rule.last()
	}
	// The decision on a call is the caller's own, right after its arrival;
	// the planner learns of it, and that no partner could come.
	if q := submit(1); !q.SourcesKnown || q.IdleSources != 0 {
		t.Fatalf("a lone connection: known %v, idle %d; want known, 0", q.SourcesKnown, q.IdleSources)
	}
	if n, open := pl.decisions.Load(), pl.open.Load(); n != 1 || open != 0 {
		t.Fatalf("a lone connection: %d decisions reported, %d open to a partner; want 1, 0", n, open)
	}
	// A connection that carried one call may have been closed with its
	// answer: it is a partner once it sends again.
	if q := submit(2); !q.SourcesKnown || q.IdleSources != 0 {
		t.Fatalf("a second connection with the first answered once: known %v, idle %d; want known, 0", q.SourcesKnown, q.IdleSources)
	}
	if q := submit(1); !q.SourcesKnown || q.IdleSources != 0 {
		t.Fatalf("the first connection again: known %v, idle %d; want known, 0", q.SourcesKnown, q.IdleSources)
	}
	if q := submit(2); !q.SourcesKnown || q.IdleSources != 1 {
		t.Fatalf("the second connection with the first reused and answered: known %v, idle %d; want known, 1", q.SourcesKnown, q.IdleSources)
	}
	if n, open := pl.decisions.Load(), pl.open.Load(); n != 4 || open != 1 {
		t.Fatalf("%d decisions reported, %d open to a partner; want 4, 1", n, open)
	}
	advance(2 * SourceIdleFor)
	if q := submit(2); !q.SourcesKnown || q.IdleSources != 0 {
		t.Fatalf("the first connection gone quiet: known %v, idle %d; want known, 0", q.SourcesKnown, q.IdleSources)
	}
	if sn := d.Snapshots()[0].Sources; !sn.Known || sn.Population != 1 || sn.Busy != 0 || sn.Idle != 1 || sn.Partners != 1 {
		t.Fatalf("snapshot %+v: want one known source, idle", sn)
	}
	if q := submit(0); q.SourcesKnown {
		t.Fatal("a call without a source leaves the count known")
	}
	if q := submit(2); q.SourcesKnown {
		t.Fatal("the count is known again right after a call without a source")
	}
}

// The decision log has a line per arrival, decision, batch start and
// end, in the documented form.
func TestDecisionLog(t *testing.T) {
	var buf syncBuffer
	decisions := NewDecisionLog(&buf, time.Now())
	d := New(Options{Upstream: &fakeUpstream{}, Observer: decisions})
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
	if err := decisions.Flush(); err != nil {
		t.Fatal(err)
	}
	kinds := ""
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[2] != "simple" {
			t.Fatalf("decision log line %q", line)
		}
		kinds += f[1]
	}
	if !strings.HasPrefix(kinds, "ADSE") || !strings.Contains(buf.String(), "idle=0 send=1") {
		t.Fatalf("decision log %q: want an arrival, a decision to send it with no idle source, its start and end", buf.String())
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

// sourceEvent is one arrival (leave false) or answer of source id at ms
// after the test's epoch.
type sourceEvent struct {
	ms    float64
	id    uint64
	leave bool
}

// closedLoop is a source that sends its next request thinkMs[i] after its
// i-th answer, which comes latencyMs[i] after its request.
func closedLoop(id uint64, startMs float64, thinkMs, latencyMs []float64) []sourceEvent {
	var ev []sourceEvent
	t := startMs
	for i, l := range latencyMs {
		ev = append(ev, sourceEvent{t, id, false}, sourceEvent{t + l, id, true})
		t += l
		if i < len(thinkMs) {
			t += thinkMs[i]
		}
	}
	return ev
}

// openLoop is a source that sends every periodMs whatever its answers,
// each answered latencyMs[i] after it was sent (within the period).
func openLoop(id uint64, periodMs float64, latencyMs []float64) []sourceEvent {
	var ev []sourceEvent
	for i, l := range latencyMs {
		t := float64(i) * periodMs
		ev = append(ev, sourceEvent{t, id, false}, sourceEvent{t + l, id, true})
	}
	return ev
}

// muxBatches serves the calls of one connection as a server with one
// instance does under ad-hoc batching: whenever it is free it takes every
// call that has arrived, in tau(b) = 1 + 0.5 b ms. next(k, endMs) is when
// the caller of a call answered at endMs sends its next one (k counts the
// calls sent), negative for none; arrivals are the calls sent without
// waiting for an answer (the open loop's schedule, the closed loop's
// first calls). It returns the connection's events up to n calls.
func muxBatches(id uint64, arrivals []float64, next func(k int, endMs float64) float64, n int) []sourceEvent {
	var ev []sourceEvent
	pending := slices.Clone(arrivals)
	free := 0.0
	sent := len(pending)
	for len(pending) > 0 && len(ev) < 2*n {
		slices.Sort(pending)
		start := max(free, pending[0])
		b := 0
		for b < len(pending) && pending[b] <= start {
			ev = append(ev, sourceEvent{pending[b], id, false})
			b++
		}
		end := start + 1 + 0.5*float64(b)
		pending = pending[b:]
		for range b {
			ev = append(ev, sourceEvent{end, id, true})
			if t := next(sent, end); t >= 0 && sent < n {
				pending = append(pending, t)
				sent++
			}
		}
		free = end
	}
	return ev
}

// What is learnt of each source from its arrivals and answers alone: a
// closed loop's think time whatever its latencies; an open loop by its
// gaps after answers varying more than its intervals, or by its calls
// overlapping (and then it stays a possible partner while busy); nothing
// before three gaps; no pause taken for a think time; no source kept
// beyond SourceIdleFor.
func TestSourcesLearnTheirKind(t *testing.T) {
	lat := []float64{3, 5, 4, 6, 3, 7, 4}
	think := func(ms float64) []float64 { return []float64{ms, ms, ms, ms, ms, ms, ms} }
	ms := func(v float64) *float64 { return &v }
	for _, tt := range []struct {
		name   string
		events []sourceEvent
		atMs   float64 // stats at; 0: the last event's time
		want   SourceStats
	}{
		{"closed loop with a think time", closedLoop(1, 0, think(2), lat),
			0, SourceStats{Known: true, Population: 1, Concurrency: 1, ClosedLoop: 1, ClosedLoopCallers: 1, Idle: 1, Partners: 1, ThinkMs: ms(2)}},
		{"closed loop without think (perf_analyzer)", closedLoop(1, 0, think(0), lat),
			0, SourceStats{Known: true, Population: 1, Concurrency: 1, ClosedLoop: 1, ClosedLoopCallers: 1, Idle: 1, Partners: 1, ThinkMs: ms(0)}},
		{"closed loop whose think varies", closedLoop(1, 0, []float64{1, 9, 2, 8, 3, 7}, []float64{4, 4.1, 4, 4.2, 4, 4.1, 4}),
			0, SourceStats{Known: true, Population: 1, Concurrency: 1, ClosedLoop: 1, ClosedLoopCallers: 1, Idle: 1, Partners: 1, ThinkMs: ms(5)}},
		{"open loop on one connection", openLoop(1, 10, lat),
			0, SourceStats{Known: true, Population: 1, Concurrency: 1, OpenLoop: 1, Idle: 1, Partners: 1}},
		{"two gaps: not learnt yet", closedLoop(1, 0, think(2), lat[:3]),
			0, SourceStats{Known: true, Population: 1, Concurrency: 1, Unknown: 1, Idle: 1, Partners: 1}},
		{"overlapping calls, busy: not learnt yet", []sourceEvent{{0, 1, false}, {1, 1, false}, {2, 1, true}},
			0, SourceStats{Known: true, Population: 1, Unknown: 1, Busy: 1, Partners: 1, Concurrency: 2}},
		// perf_analyzer's gRPC client: four synchronous callers on one
		// connection, each thinking 0.3 ms (+-10%) after its answer.
		{"synchronous callers multiplexed", muxBatches(1, []float64{0, 0, 0, 0}, func(k int, end float64) float64 {
			return end + 0.3*(0.9+0.2*float64(k%5)/4)
		}, 200),
			0, SourceStats{Known: true, Population: 1, ClosedLoop: 1, ClosedLoopCallers: 4, Idle: 1, Partners: 4, Concurrency: 4, ThinkMs: ms(0.3)}},
		// An open loop on one connection at 800 calls a second (Poisson),
		// the server batching them.
		{"an open loop multiplexed", muxBatches(1, poissonMs(0.8, 400), func(int, float64) float64 { return -1 }, 400),
			0, SourceStats{Known: true, Population: 1, OpenLoop: 1, Idle: 1, Partners: 10, Concurrency: 10}},
		{"a busy closed loop is no partner", append(closedLoop(1, 0, think(2), lat), sourceEvent{46, 1, false}),
			0, SourceStats{Known: true, Population: 1, Concurrency: 1, ClosedLoop: 1, ClosedLoopCallers: 1, Busy: 1, ThinkMs: ms(2)}},
		{"a pause is not a think time", append(closedLoop(1, 0, think(2), lat[:4]), closedLoop(1, 1500, think(2), lat[:3])...),
			0, SourceStats{Known: true, Population: 1, Concurrency: 1, ClosedLoop: 1, ClosedLoopCallers: 1, Idle: 1, Partners: 1, ThinkMs: ms(2)}},
		{"mixed population", append(append(closedLoop(1, 0, think(1), lat), closedLoop(2, 0, think(3), lat)...), openLoop(3, 10, lat)...),
			60, SourceStats{Known: true, Population: 3, Concurrency: 3, ClosedLoop: 2, ClosedLoopCallers: 2, OpenLoop: 1, Idle: 3, Partners: 3, ThinkMs: ms(2)}},
		{"gone quiet", closedLoop(1, 0, think(2), lat),
			2000, SourceStats{}},
		{"a call without a source", append(closedLoop(1, 0, think(2), lat), sourceEvent{50, 0, false}),
			0, SourceStats{Population: 1, Concurrency: 1, ClosedLoop: 1, ClosedLoopCallers: 1, Idle: 1, Partners: 1, ThinkMs: ms(2)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			epoch := time.Unix(1000, 0)
			at := func(ms float64) time.Time { return epoch.Add(time.Duration(ms * float64(time.Millisecond))) }
			ev := slices.Clone(tt.events)
			slices.SortStableFunc(ev, func(a, b sourceEvent) int { return cmp.Compare(a.ms, b.ms) })
			var s sources
			for _, e := range ev {
				if e.leave {
					s.leave(e.id, at(e.ms))
				} else {
					s.arrive(e.id, at(e.ms))
				}
			}
			now := at(ev[len(ev)-1].ms)
			if tt.atMs != 0 {
				now = at(tt.atMs)
			}
			got := s.stats(now)
			if (got.ThinkMs == nil) != (tt.want.ThinkMs == nil) || (got.ThinkMs != nil && math.Abs(*got.ThinkMs-*tt.want.ThinkMs) > 0.02**tt.want.ThinkMs+1e-6) {
				t.Errorf("think %v ms, want %v", deref(got.ThinkMs), deref(tt.want.ThinkMs))
			}
			// The population's feedback score has its own test
			// (TestFeedbackTellsAPoolFromAClosedLoop).
			got.ThinkMs, tt.want.ThinkMs, got.Feedback = nil, nil, nil
			if got != tt.want {
				t.Errorf("stats %+v\nwant  %+v", got, tt.want)
			}
			if n, known := s.idle(now); known != tt.want.Known || (known && n != tt.want.Partners) {
				t.Errorf("a decision sees %d partners (known %v); the stats say %d (known %v)", n, known, tt.want.Partners, tt.want.Known)
			}
		})
	}
}

// poissonMs is n arrival times of a Poisson process of ratePerMs, seeded.
func poissonMs(ratePerMs float64, n int) []float64 {
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([]float64, n)
	t := 0.0
	for i := range out {
		t += rng.ExpFloat64() / ratePerMs
		out[i] = t
	}
	return out
}

func deref(v *float64) any {
	if v == nil {
		return nil
	}
	return *v
}

// The sources learnt reach the snapshot (/status) and the metrics: a
// sequential caller thinking 3 ms between answer and request is one
// closed-loop source with a think time of 3 ms.
func TestSourcesInSnapshotAndMetrics(t *testing.T) {
	clock := struct {
		sync.Mutex
		t time.Time
	}{t: time.Unix(1000, 0)}
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return clock.t }
	advance := func(d time.Duration) { clock.Lock(); clock.t = clock.t.Add(d); clock.Unlock() }
	pl := &watchingPlanner{fixedPlanner: newPlanner(policy.Fill{Policy: "test"})}
	d := startModel(t, Options{Upstream: &fakeUpstream{}, Now: now}, ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: pl, WatchCallers: pl.watch})
	if pl.read == nil {
		t.Fatal("the planner was not given the callers' reader")
	}
	if c := pl.read(now()); c.Known || c.Closed() {
		t.Fatalf("callers before any call %+v: want unknown", c)
	}
	for range 5 {
		c := call(t, 1, 1)
		c.Source = 42
		if err := checkAnswer(c, d.Submit(context.Background(), "simple", c)); err != nil {
			t.Fatal(err)
		}
		advance(3 * time.Millisecond)
	}
	st := d.Snapshots()[0].Sources
	if st.ThinkMs == nil || math.Abs(*st.ThinkMs-3) > 1e-9 {
		t.Fatalf("think %v ms, want 3", deref(st.ThinkMs))
	}
	if !st.Known || st.Population != 1 || st.ClosedLoop != 1 || st.Idle != 1 || st.Busy != 0 {
		t.Fatalf("sources %+v: want one idle closed-loop source", st)
	}
	// The plan reads the same: a closed loop of one client thinking 3 ms.
	if c := pl.read(now()); !c.Closed() || c.ClosedLoop != 1 || c.Others != 0 || math.Abs(c.ThinkMs-3) > 1e-9 {
		t.Fatalf("callers as a plan reads them %+v: want one closed-loop client thinking 3 ms", c)
	}
	want := `
# HELP ratebatch_source_think_seconds Mean estimated think time of the closed-loop connections (answer to next request, as the proxy sees it); absent without one.
# TYPE ratebatch_source_think_seconds gauge
ratebatch_source_think_seconds{model="simple"} 0.003
# HELP ratebatch_sources Callers' connections active within the last second, by kind (closed_loop: its next request follows its answer after a think time; open_loop: its calls overlap or keep their own schedule, or it is one of a pool whose arrivals do not follow the answers (ratebatch_source_feedback below 0.25); unknown: not learnt yet).
# TYPE ratebatch_sources gauge
ratebatch_sources{kind="closed_loop",model="simple"} 1
ratebatch_sources{kind="open_loop",model="simple"} 0
ratebatch_sources{kind="unknown",model="simple"} 0
# HELP ratebatch_sources_busy Callers' connections with a call in the proxy now.
# TYPE ratebatch_sources_busy gauge
ratebatch_sources_busy{model="simple"} 0
`
	if err := testutil.CollectAndCompare(d.Collector(), strings.NewReader(want),
		"ratebatch_sources", "ratebatch_sources_busy", "ratebatch_source_think_seconds", "ratebatch_source_feedback"); err != nil {
		t.Error(err) // no feedback yet: too few arrivals
	}
}

// The feedback score, once known, is exported beside the callers.
func TestFeedbackMetric(t *testing.T) {
	fb, think := 0.83, 2.0
	for _, tc := range []struct {
		name string
		src  SourceStats
		want string
	}{
		{"not known yet", SourceStats{}, ""},
		{"known", SourceStats{ThinkMs: &think, Feedback: &fb}, `
# HELP ratebatch_source_feedback How much the arrivals follow the answers: about 1 for a closed loop, about 0 for open arrivals over a pool of connections; below 0.25 the connections are planned as open. Absent until enough arrivals were seen.
# TYPE ratebatch_source_feedback gauge
ratebatch_source_feedback{model="simple"} 0.83
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := collectorFunc(func(ch chan<- prometheus.Metric) { collectSources(ch, "simple", tc.src) })
			if err := testutil.CollectAndCompare(c, strings.NewReader(tc.want), "ratebatch_source_feedback"); err != nil {
				t.Error(err)
			}
		})
	}
}

// collectorFunc is an unchecked collector of what a function sends.
type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(chan<- *prometheus.Desc)    {}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

// watchingPlanner takes the callers' reader (ModelSpec.WatchCallers).
type watchingPlanner struct {
	*fixedPlanner
	read func(time.Time) policy.Callers
}

func (p *watchingPlanner) watch(read func(time.Time) policy.Callers) { p.read = read }

// BenchmarkSources is the sources' work per call of a closed loop among 64
// connections, all under the queue's lock: its arrival (learning its gap),
// a decision's count of the partners, its answer.
func BenchmarkSources(b *testing.B) {
	var s sources
	t := time.Now() // with a monotonic reading, as the dispatcher's clock
	for i := 0; b.Loop(); i++ {
		id := uint64(i%64 + 1)
		s.arrive(id, t)
		s.idle(t)
		t = t.Add(50 * time.Microsecond)
		s.leave(id, t)
	}
}

// A connection that multiplexes callers (gRPC streams) can send as many
// calls as it has shown at once, less those in the proxy: with all its
// synchronous callers waiting it sends no partner, however busy it looks.
// A one-call connection is a partner only when idle, and only once it has
// been reused (a client may open a connection per call); a source gone
// quiet for SourceIdleFor is forgotten, with its partners.
func TestPartnersCountStreams(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type step struct {
		op        string // "+" arrive, "-" leave
		src       uint64
		wantIdle  int
		wantKnown bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
		after time.Duration // then idle() at t0+after
		want  int
	}{
		{"one HTTP connection", []step{{"+", 1, 0, true}, {"-", 1, 0, true}, {"+", 1, 0, true}, {"-", 1, 1, true}, {"+", 1, 0, true}}, 0, 0},
		{"two HTTP connections", []step{{"+", 1, 0, true}, {"+", 2, 0, true}, {"-", 1, 0, true}, {"-", 2, 0, true},
			{"+", 1, 0, true}, {"+", 2, 0, true}, {"-", 1, 1, true}, {"-", 2, 2, true}}, 0, 2},
		{"a connection per call", []step{{"+", 1, 0, true}, {"-", 1, 0, true}, {"+", 2, 0, true}, {"-", 2, 0, true}, {"+", 3, 0, true}, {"-", 3, 0, true}}, 0, 0},
		{"gRPC, two streams", []step{{"+", 1, 0, true}, {"+", 1, 0, true}, {"-", 1, 1, true}, {"+", 1, 0, true}, {"-", 1, 1, true}, {"-", 1, 2, true}}, 0, 2},
		{"gRPC grows to three", []step{{"+", 1, 0, true}, {"+", 1, 0, true}, {"+", 1, 0, true}, {"-", 1, 1, true}, {"+", 2, 1, true}}, 0, 1},
		{"gone quiet", []step{{"+", 1, 0, true}, {"+", 1, 0, true}, {"-", 1, 1, true}, {"-", 1, 2, true}}, 2 * SourceIdleFor, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s sources
			now := t0
			for i, st := range tc.steps {
				now = now.Add(time.Millisecond)
				switch st.op {
				case "+":
					s.arrive(st.src, now)
				case "-":
					s.leave(st.src, now)
				}
				if n, known := s.idle(now); n != st.wantIdle || known != st.wantKnown {
					t.Fatalf("step %d (%s%d): idle %d known %v, want %d %v", i, st.op, st.src, n, known, st.wantIdle, st.wantKnown)
				}
				if p := s.stats(now).Partners; p != st.wantIdle {
					t.Fatalf("step %d: stats show %d partners, decisions %d", i, p, st.wantIdle)
				}
			}
			if n, _ := s.idle(now.Add(tc.after)); n != tc.want {
				t.Fatalf("at the end (+%v): idle %d, want %d", tc.after, n, tc.want)
			}
		})
	}
}

// A multiplexing connection is closed-loop when its callers are
// synchronous, whatever their number and think time, and open-loop when
// its calls come on their own schedule, whatever their rate.
func TestMultiplexedSourcesKind(t *testing.T) {
	kind := func(ev []sourceEvent, name string, args ...any) string {
		slices.SortStableFunc(ev, func(a, b sourceEvent) int { return cmp.Compare(a.ms, b.ms) })
		var s sources
		epoch := time.Unix(1000, 0)
		at := func(ms float64) time.Time { return epoch.Add(time.Duration(ms * float64(time.Millisecond))) }
		for _, e := range ev {
			if e.leave {
				s.leave(e.id, at(e.ms))
			} else {
				s.arrive(e.id, at(e.ms))
			}
		}
		src := s.by[1]
		k := src.kind()
		t.Logf("%s: Var(gap)/Var(interval) %.3g, %s", fmt.Sprintf(name, args...), (src.gap2-src.gap*src.gap)/(src.ival2-src.ival*src.ival), k)
		return k
	}
	for _, callers := range []int{2, 4, 8, 16} {
		for _, think := range []float64{0.1, 0.3, 1, 3} {
			first := make([]float64, callers)
			ev := muxBatches(1, first, func(k int, end float64) float64 { return end + think*(0.9+0.2*float64(k%7)/6) }, 400)
			if got := kind(ev, "%d callers thinking %v ms", callers, think); got != KindClosedLoop {
				t.Errorf("%d synchronous callers thinking %v ms: %s", callers, think, got)
			}
			// A client that handles a batch's answers one after another,
			// 0.15 ms each (perf_analyzer's gRPC client at 8 callers).
			last, j := -1.0, 0
			ev = muxBatches(1, first, func(k int, end float64) float64 {
				if end == last {
					j++
				} else {
					j, last = 0, end
				}
				return end + think + 0.15*float64(j)
			}, 400)
			if got := kind(ev, "%d callers thinking %v ms, answers handled in turn", callers, think); got != KindClosedLoop {
				t.Errorf("%d synchronous callers thinking %v ms, answers handled in turn: %s", callers, think, got)
			}
		}
	}
	// Exponential think times, the closed loop the finite model solves
	// exactly, though first in, first out pairs them with others' answers.
	rng := rand.New(rand.NewPCG(3, 4))
	ev := muxBatches(1, make([]float64, 4), func(_ int, end float64) float64 { return end + rng.ExpFloat64() }, 400)
	if got := kind(ev, "4 callers thinking exponentially"); got != KindClosedLoop {
		t.Errorf("4 callers thinking 1 ms on the mean, exponentially: %s", got)
	}
	for _, rate := range []float64{0.1, 0.4, 0.8, 1.5, 3} {
		ev := muxBatches(1, poissonMs(rate, 600), func(int, float64) float64 { return -1 }, 600)
		if got := kind(ev, "Poisson, %v calls a ms", rate); got != KindOpenLoop {
			t.Errorf("an open loop of %v calls a ms: %s", rate, got)
		}
	}
}

// poolCall is a call arriving at ms from source id (0: not assigned yet).
type poolCall struct {
	ms float64
	id uint64
}

// batchServe serves calls as one instance under ad-hoc batching does
// (tau(b) = 1 + 0.5 b ms): whenever it is free it takes every call that
// has arrived. A call without a source gets one from assign(arrival,
// answer), when it joins its batch (so its answer is known); next(id, end)
// is when source id sends again after its answer at end (false: it does
// not). It returns the events of the first n calls.
func batchServe(first []poolCall, assign func(arrMs, endMs float64) uint64, next func(id uint64, endMs float64) (float64, bool), n int) []sourceEvent {
	pending := slices.Clone(first)
	var ev []sourceEvent
	free, sent := 0.0, len(pending)
	for len(pending) > 0 && len(ev) < 2*n {
		slices.SortStableFunc(pending, func(a, b poolCall) int { return cmp.Compare(a.ms, b.ms) })
		start := max(free, pending[0].ms)
		b := 0
		for b < len(pending) && pending[b].ms <= start {
			b++
		}
		end := start + 1 + 0.5*float64(b)
		batch := slices.Clone(pending[:b])
		pending = pending[b:]
		for _, c := range batch {
			if c.id == 0 {
				c.id = assign(c.ms, end)
			}
			ev = append(ev, sourceEvent{c.ms, c.id, false}, sourceEvent{end, c.id, true})
			if t, ok := next(c.id, end); ok && sent < n {
				pending = append(pending, poolCall{t, c.id})
				sent++
			}
		}
		free = end
	}
	return ev
}

// connPool hands each call an idle keep-alive connection, the most
// recently freed first (lifo, as Go's http.Transport) or the least, and
// opens a new one when none is idle.
func connPool(lifo bool) func(arrMs, endMs float64) uint64 {
	var busyUntil []float64 // by connection id - 1
	return func(arrMs, endMs float64) uint64 {
		pick := -1
		for i, u := range busyUntil {
			if u <= arrMs && (pick < 0 || (lifo && u > busyUntil[pick]) || (!lifo && u < busyUntil[pick])) {
				pick = i
			}
		}
		if pick < 0 {
			busyUntil = append(busyUntil, 0)
			pick = len(busyUntil) - 1
		}
		busyUntil[pick] = endMs
		return uint64(pick + 1)
	}
}

// The population's feedback score tells synchronous callers from an open
// stream through a pool of connections, whose connections each look
// closed-loop: about a half for 2-16 synchronous callers thinking alike,
// about 1 for exponential thinkers, about 0 for Poisson arrivals over a
// pool reused last-in or first-in first; the plan then reads the pool's
// callers as open.
func TestFeedbackTellsAPoolFromAClosedLoop(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	closed := func(n int, think func() float64) []sourceEvent {
		var first []poolCall
		for i := range n {
			first = append(first, poolCall{float64(i) * 0.01, uint64(i + 1)})
		}
		return batchServe(first, nil, func(_ uint64, end float64) (float64, bool) { return end + think(), true }, 6000)
	}
	pool := func(rate float64, lifo bool) []sourceEvent {
		var first []poolCall
		for _, ms := range poissonMs(rate, 6000) {
			first = append(first, poolCall{ms, 0})
		}
		return batchServe(first, connPool(lifo), func(uint64, float64) (float64, bool) { return 0, false }, 6000)
	}
	for _, tt := range []struct {
		name   string
		events []sourceEvent
		closed bool
	}{
		{"2 synchronous callers, think 0.3 ms", closed(2, func() float64 { return 0.3 }), true},
		{"8 synchronous callers, think 0.3 ms", closed(8, func() float64 { return 0.3 }), true},
		{"16 synchronous callers, think 0.3 ms", closed(16, func() float64 { return 0.3 }), true},
		{"8 callers thinking 5 ms (exponential)", closed(8, func() float64 { return 5 * rng.ExpFloat64() }), true},
		{"24 callers thinking 20 ms (exponential)", closed(24, func() float64 { return 20 * rng.ExpFloat64() }), true},
		{"Poisson 0.0375/ms over a LIFO pool", pool(0.0375, true), false},
		{"Poisson 0.1/ms over a LIFO pool", pool(0.1, true), false},
		{"Poisson 0.0375/ms over a FIFO pool", pool(0.0375, false), false},
		{"Poisson 0.2/ms over a FIFO pool", pool(0.2, false), false},
		{"Poisson 0.2/ms over a LIFO pool", pool(0.2, true), false},
		{"Poisson 0.36/ms over a LIFO pool", pool(0.36, true), false},
		{"Poisson 0.5/ms over a LIFO pool", pool(0.5, true), false},
		{"Poisson 1/ms over a LIFO pool", pool(1, true), false},
		{"Poisson 1.5/ms over a FIFO pool", pool(1.5, false), false},
		// A probe call on a connection of its own a second before the
		// stream (a readiness check, a first curl).
		{"Poisson 0.2/ms over a FIFO pool after a probe", append(pool(0.2, false), sourceEvent{-1000, 1 << 40, false}, sourceEvent{-999, 1 << 40, true}), false},
		{"Poisson 0.2/ms over a LIFO pool after a probe", append(pool(0.2, true), sourceEvent{-1000, 1 << 40, false}, sourceEvent{-999, 1 << 40, true}), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			epoch := time.Unix(1000, 0)
			at := func(ms float64) time.Time { return epoch.Add(time.Duration(ms * float64(time.Millisecond))) }
			ev := slices.Clone(tt.events)
			slices.SortStableFunc(ev, func(a, b sourceEvent) int { return cmp.Compare(a.ms, b.ms) })
			q := &modelQueue{}
			// The proxy reads its callers every 250 ms from its start,
			// calls or not: the quiet before the first call is no time
			// of the population's.
			for ms := -5000.0; ms < 0; ms += 250 {
				q.src.stats(at(ms))
			}
			for _, e := range ev {
				if e.leave {
					q.src.leave(e.id, at(e.ms))
				} else {
					q.src.arrive(e.id, at(e.ms))
				}
			}
			now := at(ev[len(ev)-1].ms)
			st := q.src.stats(now)
			if st.Feedback == nil {
				t.Fatalf("no feedback score after %d events: %+v", len(ev), st)
			}
			fb := *st.Feedback
			t.Logf("feedback %.3f; %d connections, %d closed-loop, %d open-loop", fb, st.Population, st.ClosedLoop, st.OpenLoop)
			if tt.closed && !(fb > 2*feedbackOpen) || !tt.closed && !(fb < feedbackOpen/2) {
				t.Errorf("feedback %.3f: want it clear of %v on the %s side", fb, feedbackOpen, map[bool]string{true: "closed-loop", false: "open"}[tt.closed])
			}
			// What the metrics and the live page show: a pool under an
			// open stream is no closed-loop caller.
			if st.ClosedLoop > 0 != tt.closed || (!tt.closed && (st.ClosedLoopCallers != 0 || st.ThinkMs != nil || st.OpenLoop+st.Unknown != st.Population)) {
				t.Errorf("callers counted %+v: closed-loop %d, want them %s", st, st.ClosedLoop, map[bool]string{true: "closed-loop", false: "all open-loop (or not learnt yet)"}[tt.closed])
			}
			c := q.callers(now)
			if c.ClosedLoop > 0 != tt.closed || (!tt.closed && c.Others < st.Population) {
				t.Errorf("the plan reads %+v: closed loop %v, want %v", c, c.ClosedLoop > 0, tt.closed)
			}
		})
	}
}

// A lone synchronous client that opens a connection per call is one
// closed-loop caller, with no partner to wait for, whatever its think
// time; its first call that overlaps another caller's ends the verdict.
// Open arrivals (Poisson, each on a new connection or over a pool) are
// almost never taken for a lone caller, and where a rule holds a batch
// their arrivals overlap the held call at once.
func TestLoneCallerWhateverItsConnections(t *testing.T) {
	const latency = time.Millisecond
	for _, think := range []time.Duration{0, 200 * time.Microsecond, 15 * time.Millisecond} {
		t.Run(fmt.Sprintf("think %v", think), func(t *testing.T) {
			var s sources
			now := time.Unix(1000, 0)
			id := uint64(0)
			for range 200 {
				id++
				s.arrive(id, now)
				now = now.Add(latency)
				s.leave(id, now)
				now = now.Add(think + 50*time.Microsecond)
			}
			st := s.stats(now)
			if !st.Lone || st.Population != 1 || st.ClosedLoop != 1 || st.ClosedLoopCallers != 1 || st.Unknown != 0 || st.Partners != 0 {
				t.Fatalf("stats %+v: want one closed-loop caller, no partner", st)
			}
			if want := float64(think+50*time.Microsecond) / 1e6; st.ThinkMs == nil || math.Abs(*st.ThinkMs-want) > 0.01*want+0.001 {
				t.Fatalf("think %v ms, want %.3f", st.ThinkMs, want)
			}
			id++
			s.arrive(id, now)
			if n, known := s.idle(now); n != 0 || !known {
				t.Fatalf("its call in the proxy: idle %d known %v, want 0 known", n, known)
			}
			s.arrive(id+1, now.Add(latency/2)) // another caller's call overlaps it
			if st := s.stats(now.Add(latency / 2)); st.Lone {
				t.Fatalf("stats %+v after an overlapping call: still lone", st)
			}
		})
	}
	for _, tc := range []struct {
		name  string
		rate  float64 // per second
		conns int     // 0: a new connection per call
	}{
		{"Poisson 30/s, a connection per call", 30, 0},
		{"Poisson 150/s, a connection per call", 150, 0},
		{"Poisson 150/s, pool of 4", 150, 4},
		{"Poisson 600/s, a connection per call", 600, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			var s sources
			now := time.Unix(1000, 0)
			type out struct {
				id uint64
				at time.Time
			}
			var inflight []out
			lone, n := 0, 20000
			for i := range n {
				now = now.Add(time.Duration(rng.ExpFloat64() / tc.rate * float64(time.Second)))
				for len(inflight) > 0 && !inflight[0].at.After(now) {
					s.leave(inflight[0].id, inflight[0].at)
					inflight = inflight[1:]
				}
				id := uint64(i + 1)
				if tc.conns > 0 {
					id = uint64(i%tc.conns + 1)
				}
				s.arrive(id, now)
				if s.lone.is(now) {
					lone++
				}
				done := now.Add(latency)
				if len(inflight) > 0 && inflight[len(inflight)-1].at.After(done) {
					done = inflight[len(inflight)-1].at
				}
				inflight = append(inflight, out{id, done})
			}
			if share := float64(lone) / float64(n); share > 0.01 {
				t.Fatalf("%d of %d arrivals (%.2f%%) taken for a lone caller's", lone, n, 100*share)
			}
			t.Logf("%d of %d arrivals taken for a lone caller's", lone, n)
		})
	}
}

// Each arrival says what its caller is taken for, as the plan takes the
// callers: a call without a connection is unnamed; a keep-alive
// connection is unknown until it has shown its gaps, then closed-loop
// when it sends a think time after each answer and open-loop when it
// keeps its own schedule; and a model's one synchronous caller is lone.
func TestArrivalCallerKind(t *testing.T) {
	now := time.Unix(1000, 0)
	var s sources
	if k := s.arrive(0, now); k != CallerUnnamed {
		t.Errorf("a call without a source: %v, want unnamed", k)
	}
	// Two keep-alive clients, each sending 100 us after its answer:
	// unknown for their first gaps, then closed-loop (two of them, so
	// never lone: their calls overlap).
	now = now.Add(2 * SourceIdleFor)
	var kinds []CallerKind
	for range 10 {
		kinds = append(kinds, s.arrive(1, now), s.arrive(2, now.Add(10*time.Microsecond)))
		now = now.Add(time.Millisecond)
		s.leave(1, now)
		s.leave(2, now)
		now = now.Add(100 * time.Microsecond)
	}
	if kinds[0] != CallerUnknown || kinds[len(kinds)-1] != CallerClosed {
		t.Errorf("closed-loop clients: %v, want unknown first and closed_loop once learnt", kinds)
	}
	// Two connections each sending every millisecond by the clock, the
	// second half a millisecond after the first, their answers taking
	// 0.55 to 0.95 ms (so each arrival finds the other's call): the gaps
	// from the answers spread far more than the intervals, open-loop.
	type event struct {
		at     time.Duration
		id     uint64
		arrive bool
	}
	var events []event
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 50 {
		for j, id := range []uint64{7, 8} {
			at := time.Duration(i)*time.Millisecond + time.Duration(j)*500*time.Microsecond
			events = append(events, event{at, id, true}, event{at + time.Duration(550+rng.IntN(400))*time.Microsecond, id, false})
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	var open sources
	var last CallerKind
	for _, e := range events {
		if e.arrive {
			last = open.arrive(e.id, now.Add(e.at))
		} else {
			open.leave(e.id, now.Add(e.at))
		}
	}
	if last != CallerOpen {
		t.Errorf("a client on its own schedule: %v, want open_loop", last)
	}
	// One synchronous client opening a connection per call: lone once
	// its run of arrivals tells.
	var lone sources
	for id := uint64(1); id <= 100; id++ {
		last = lone.arrive(id, now)
		now = now.Add(time.Millisecond)
		lone.leave(id, now)
		now = now.Add(50 * time.Microsecond)
	}
	if last != CallerLone || last.String() != "lone" {
		t.Errorf("a lone synchronous caller: %v, want lone", last)
	}
}
