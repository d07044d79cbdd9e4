package whatif

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/internal/procs"
	"github.com/ratebatch/ratebatch/internal/stats"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/replay"
)

// Defaults of Config.
const (
	// DefaultCPU is the share of one core a what-if may take.
	DefaultCPU = 0.5
	// DefaultMinArrivals is the fewest arrivals a what-if answers on:
	// fewer make a p99 of a handful of calls.
	DefaultMinArrivals = 500
	// DefaultTimeout bounds one what-if (the admin port's writes time
	// out at 30 s).
	DefaultTimeout = 25 * time.Second
	// minSpreadBatches is the fewest round trips the spread is drawn
	// from; with fewer the replay runs on the line alone.
	minSpreadBatches = 20
	// closedShare is the share of the arrivals from closed-loop callers
	// at or above which they are replayed as a closed loop.
	closedShare = 0.05
)

// Models is what the what-if reads of the live proxy's batched models
// (the registry).
type Models interface {
	// Monitor returns a batched model's monitor; false for another.
	Monitor(model string) (*monitor.Monitor, bool)
	// InForce is the policy in force for a model and its own options
	// that are set, spelt as PUT /policy takes them.
	InForce(model string) (policy string, options map[string]string, ok bool)
	// NewPolicy builds the named policy for the model as PUT /policy
	// would (set over the model's own options), then tune edits its
	// options, without switching anything.
	NewPolicy(model, name string, set map[string]string, tune func(*policy.Options)) (policy.Policy, error)
}

// Config configures a Replayer.
type Config struct {
	// CPU is the share of one core a what-if may take (DefaultCPU when
	// 0; at most 1).
	CPU float64
	// MinArrivals is the fewest arrivals answered on (DefaultMinArrivals
	// when 0).
	MinArrivals int
	// Timeout bounds one what-if (DefaultTimeout when 0).
	Timeout time.Duration
}

// Replayer answers what-ifs from a Recorder's arrivals, one at a time,
// each in a goroutine of its own (a job), off the request path.
type Replayer struct {
	rec    *Recorder
	models Models
	c      Config

	mu  sync.Mutex
	cur *job // the what-if running, or the last one
}

// job is one what-if, running or done.
type job struct {
	key     string // the question (Request.key)
	model   string
	started time.Time
	// replayed counts the settings replayed so far, of settings.
	replayed atomic.Int32
	settings int
	done     chan struct{} // closed when rep and err are set
	rep      Report
	err      error
	ended    time.Time
}

// NewReplayer returns a replayer of rec's arrivals for models.
func NewReplayer(rec *Recorder, models Models, c Config) *Replayer {
	if c.CPU <= 0 || c.CPU > 1 {
		c.CPU = DefaultCPU
	}
	if c.MinArrivals <= 0 {
		c.MinArrivals = DefaultMinArrivals
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	return &Replayer{rec: rec, models: models, c: c}
}

// keepFor is how long a what-if's answer is given again to the same
// question: long enough for a client polling every few seconds to fetch
// it, short enough that "the last minutes" stay the last.
const keepFor = time.Minute

// ErrNotBatched is the error for a model the proxy does not batch.
var ErrNotBatched = errors.New("not a batched model")

// ErrBusy is the error of a what-if asked while another runs.
var ErrBusy = errors.New("another what-if is running")

// Request is one what-if asked.
type Request struct {
	Model string
	// Window is how far back the arrivals are replayed.
	Window time.Duration
	// P99Ms, when > 0, is the p99 the recommendation keeps within;
	// otherwise it keeps within the mean and p99 of the setting in force.
	P99Ms float64
}

// Run answers one what-if, waiting for it until ctx ends; ErrBusy at once
// while another question's runs.
func (p *Replayer) Run(ctx context.Context, q Request) (Report, error) {
	j, err := p.start(q)
	if err != nil {
		return Report{}, err
	}
	select {
	case <-j.done:
		return j.rep, j.err
	case <-ctx.Done():
		return Report{}, ctx.Err()
	}
}

// key is the question a request asks, which a job answers.
func (q Request) key() string { return fmt.Sprint(q.Model, "|", q.Window, "|", q.P99Ms) }

// start returns the job answering q: the one running or kept for it, or a
// new one when none runs; ErrBusy while another question's runs.
func (p *Replayer) start(q Request) (*job, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if j := p.cur; j != nil {
		select {
		case <-j.done:
			if j.key == q.key() && time.Since(j.ended) < keepFor {
				return j, nil
			}
		default:
			if j.key != q.key() {
				return nil, ErrBusy
			}
			return j, nil
		}
	}
	j := &job{key: q.key(), model: q.Model, started: time.Now(), done: make(chan struct{}),
		settings: 2 + len(gridBudgets) + len(gridSLOs) + len(gridMaxDelays)}
	p.cur = j
	go p.runJob(j, q)
	return j, nil
}

// runJob runs a what-if to its end, within Config.Timeout; a panic is
// contained and becomes the job's error.
func (p *Replayer) runJob(j *job, q Request) {
	defer func() {
		if v := recover(); v != nil {
			guard.Recovered(nil, "whatif", v)
			j.err = fmt.Errorf("the what-if failed: %v", v)
		}
		j.ended = time.Now()
		close(j.done)
	}()
	// A P stays free for the request path while the replay runs
	// (procs.Background), and the replay paces itself to its share.
	defer procs.Background()()
	ctx, cancel := context.WithTimeout(context.Background(), p.c.Timeout)
	defer cancel()
	j.rep, j.err = p.run(ctx, q, &j.replayed)
	j.rep.TookSeconds, j.rep.CPUShare = time.Since(j.started).Seconds(), p.c.CPU
}

func (p *Replayer) run(ctx context.Context, q Request, replayed *atomic.Int32) (Report, error) {
	tr, err := p.rec.traffic(q.Model, q.Window, true)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Model: q.Model, From: tr.from.UTC(), To: tr.to.UTC(), Seconds: tr.span().Seconds(), Cut: tr.cut,
		Arrivals: countKinds(tr.arrivals), Recommended: -1, Lived: lived(tr)}
	mon, ok := p.models.Monitor(q.Model)
	if !ok {
		return rep, fmt.Errorf("model %q: %w", q.Model, ErrNotBatched)
	}
	snap := mon.Snapshot()
	switch {
	case len(tr.arrivals) < p.c.MinArrivals:
		rep.Reason = fmt.Sprintf("too little traffic to say: %d calls in the last %v, the what-if needs %d", len(tr.arrivals), roundSpan(tr.span()), p.c.MinArrivals)
		return rep, nil
	case snap.FitDoubt != "":
		rep.Reason = "no line learnt yet to replay on: " + snap.FitDoubt
		return rep, nil
	}
	run, err := p.setup(tr, rep.Lived, mon, snap)
	if err != nil {
		return rep, err
	}
	rep.Line, rep.ClosedLoop = run.line, run.closed
	rep.Enough = true
	if err := p.grid(ctx, q, run, &rep, replayed); err != nil {
		return rep, err
	}
	mark(&rep, q.P99Ms)
	rep.Assumptions = assumptions(rep)
	for _, pt := range rep.Points {
		if pt.Current {
			rep.CheckVsLived = Ratios{Mean: ratio(ptr(pt.MeanMs), rep.Lived.MeanMs), P99: ratio(ptr(pt.P99Ms), rep.Lived.P99Ms),
				RequestsPerJoule: ratio(pt.RequestsPerJoule, rep.Lived.RequestsPerJoule), BusyShare: ratio(ptr(pt.BusyShare), rep.Lived.BusyShare)}
		}
	}
	return rep, nil
}

// lived is what the window's calls lived.
func lived(tr traffic) Lived {
	l := Lived{Requests: len(tr.latencies)}
	if n := len(tr.latencies); n > 0 {
		var sum float64
		for _, v := range tr.latencies {
			sum += v
		}
		l.MeanMs, l.P99Ms = ptr(sum/float64(n)), ptr(stats.Percentile(tr.latencies, 99))
	}
	if f, s := tr.first, tr.last; f != nil && s.at.After(f.at) {
		if f.hasEnergy && s.hasEnergy && s.energyJ > f.energyJ {
			l.RequestsPerJoule = ptr((s.requests - f.requests) / (s.energyJ - f.energyJ))
		}
		if s.batchS > 0 {
			l.BusyShare = ptr((s.batchS - f.batchS) / s.at.Sub(f.at).Seconds())
		}
	}
	return l
}

// replaySetup is what every setting's replay shares.
type replaySetup struct {
	base   replay.Config // without a policy
	line   Line
	closed *ClosedLoop
	span   time.Duration
	idleW  float64 // idle power counted, W (0: none)
	energy bool
}

// setup builds the replay of the window: its arrivals (a closed loop's
// as its clients), the line the plan in force was made with and the
// round trips' spread about it, the proxy's time around a batch, and the
// energy.
func (p *Replayer) setup(tr traffic, lived Lived, mon *monitor.Monitor, snap monitor.Snapshot) (replaySetup, error) {
	line := mon.Line()
	extra := mon.Extra()
	s := replaySetup{span: tr.span()}
	s.line = Line{AlphaMs: line.AlphaMs, Tau0Ms: line.Tau0Ms, MaxBatch: snap.MaxBatch, Instances: max(snap.Instances, 1),
		HoldLoneMs: extra.HoldLoneMs, HoldMergedMs: extra.HoldMergedMs, AfterLoneMs: extra.AfterLoneMs, AfterMergedMs: extra.AfterMergedMs,
		WindowSeconds: (mon.TickEvery() * monitor.Slices).Seconds()}
	if f, l := tr.first, tr.last; f != nil && l.doorN > f.doorN {
		s.line.DoorMs = float64(l.doorNs-f.doorNs) / float64(l.doorN-f.doorN) / float64(time.Millisecond)
	}
	prof := batchcost.Profile{Name: snap.Model, Latency: line, MaxBatch: snap.MaxBatch}
	if e := mon.Energy(); e != nil {
		prof.Energy, prof.HasEnergy, s.energy = *e, true, true
		s.line.BetaMJ, s.line.Zeta0MJ = ptr(e.BetaMJ), ptr(e.Zeta0MJ)
		if f, l := tr.first, tr.last; f != nil && l.idleW > 0 {
			share := 1.0
			if all := l.allBatchS - f.allBatchS; all > 0 {
				share = (l.batchS - f.batchS) / all
			}
			s.idleW = l.idleW * share
			s.line.IdleWatts = ptr(s.idleW)
		}
	}
	door := msDur(s.line.DoorMs)
	s.base = replay.Config{Profile: prof, Window: mon.TickEvery() * monitor.Slices, Instances: s.line.Instances, Seed: 1,
		Live: replay.Overheads{Extra: extra, Client: door}}
	if sp := spreadOf(tr.batches, line, tr.from); len(sp.factors) >= minSpreadBatches {
		sp.stalls = stallsOf(tr)
		s.base.Spread = sp
		s.line.Batches, s.line.SpreadSCV, s.line.MeanFactor = len(sp.factors), sp.scv(), sp.mean()
	}
	s.base.Arrivals, s.closed = p.arrivals(tr, lived)
	if s.closed != nil {
		first, last := closedSpan(tr)
		s.base.Clients, s.base.Think = s.closed.Clients, max(msDur(s.closed.ThinkMs)-door, 0)
		s.base.ClientsFrom, s.base.ClientsUntil = first, max(last, first+time.Nanosecond)
	}
	if s.base.Arrivals == nil && s.base.Clients == 0 {
		return s, errors.New("nothing to replay")
	}
	return s, nil
}

// arrivals are the window's calls as offsets from its start, a call of r
// rows as r requests at its arrival; a closed loop's calls are left out
// and described instead (closedLoop), when they are closedShare of the
// calls or more and the window's samples saw closed-loop callers.
func (p *Replayer) arrivals(tr traffic, lived Lived) ([]time.Duration, *ClosedLoop) {
	cl := closedLoop(tr, lived)
	out := make([]time.Duration, 0, len(tr.arrivals))
	for _, a := range tr.arrivals {
		if cl != nil && closedKind(a.kind) {
			continue
		}
		for range a.rows {
			out = append(out, a.at.Sub(tr.from))
		}
	}
	if len(out) == 0 {
		out = nil // a closed loop alone
	}
	return out, cl
}

// closedLoop describes the window's closed loop: its callers' think time
// as the queue measured it, and as many clients as send the calls that
// came at the rate they came, by Little's law: clients = rate x (latency
// + think), with the latency lived. The queue's count of closed-loop
// connections is kept beside it: a pool of connections under an open
// stream, which the queue may read in part as closed-loop ones, counts
// more connections than the loop they make.
func closedLoop(tr traffic, lived Lived) *ClosedLoop {
	calls := 0
	for _, a := range tr.arrivals {
		if closedKind(a.kind) {
			calls++
		}
	}
	if calls == 0 || float64(calls) < closedShare*float64(len(tr.arrivals)) {
		return nil
	}
	var seen, think, n float64
	for _, s := range tr.samples {
		if s.closedLoop > 0 {
			seen += float64(s.closedLoop)
			think += s.thinkMs
			n++
		}
	}
	if n == 0 {
		return nil
	}
	cl := &ClosedLoop{Seen: int(math.Round(seen / n)), ThinkMs: think / n, Arrivals: calls}
	first, last := closedSpan(tr)
	cl.Clients = cl.Seen
	if span := (last - first).Seconds(); span > 0 && lived.MeanMs != nil {
		cycle := (*lived.MeanMs + cl.ThinkMs) / 1000
		cl.Clients = max(int(math.Round(float64(calls)/span*cycle)), 1)
	}
	return cl
}

func closedKind(k dispatcher.CallerKind) bool {
	return k == dispatcher.CallerClosed || k == dispatcher.CallerLone
}

// closedSpan is the first and last closed-loop arrival of the window, as
// offsets from its start.
func closedSpan(tr traffic) (first, last time.Duration) {
	first = -1
	for _, a := range tr.arrivals {
		if closedKind(a.kind) {
			if first < 0 {
				first = a.at.Sub(tr.from)
			}
			last = a.at.Sub(tr.from)
		}
	}
	return max(first, 0), last
}

// replayOne replays the window through one policy.
func (s *replaySetup) replayOne(ctx context.Context, pol policy.Policy, pace func()) (Point, error) {
	c := s.base
	c.Policy, c.Pace = pol, pace
	res, err := replay.Run(ctx, c)
	if err != nil {
		return Point{}, err
	}
	pt := Point{Requests: res.Requests, MeanMs: res.MeanLatencyMs, P99Ms: res.P99LatencyMs, MeanBatch: res.MeanBatchSize}
	span := s.span.Seconds()
	if span > 0 {
		pt.BusyShare = res.Utilization * res.DurationS / span
	}
	if s.energy && res.EnergyJ != nil {
		if j := *res.EnergyJ + s.idleW*span; j > 0 {
			pt.RequestsPerJoule = ptr(float64(res.Requests) / j)
		}
	}
	return pt, nil
}

// pacer keeps a goroutine's work to a share of one core: called between
// pieces of work, it sleeps, once the work since the last sleep reaches a
// couple of milliseconds, for as long as keeps the share.
type pacer struct {
	share float64
	since time.Time // the end of the last sleep
}

const paceSlice = 2 * time.Millisecond

func (p *pacer) pace() {
	if p.share >= 1 {
		return
	}
	now := time.Now()
	if p.since.IsZero() {
		p.since = now
		return
	}
	if worked := now.Sub(p.since); worked >= paceSlice {
		time.Sleep(time.Duration(float64(worked) * (1/p.share - 1)))
		p.since = time.Now()
	}
}

// spread runs a replayed batch at the pace the live server kept
// (replay.TimedSpread). Each batch of the window ran at the line's time
// over its round trip: the server's speed while it ran (a stall is a
// speed far below 1, a batch faster than the line one above it), and
// between batches the line's own (1). A replayed batch starting at a time
// of the window takes as long as its line's time takes at those speeds
// from then on: the host's stalls fall where they fell, for every setting
// alike, and a stall is lived once, however many replayed batches meet
// it. Its time drawn at random (BatchMs) is the line's times the ratio of
// a random batch of the window.
type spread struct {
	// The live batches' runs from the window's start, in ms, ascending
	// and not overlapping (one instance at a time), and the speed of each.
	starts, ends, speeds []float64
	factors              []float64 // each batch's round trip over the line
	stalls
}

// stalls are the live proxy's own time around its batches beyond its
// means, by when it was spent (replay.ProxyStalls): each batch's hold, and
// each answer's wait after its batch, less the window's mean of its kind
// (a batch of one caller or of several), at its moment from the window's
// start. A replayed batch ending at a moment takes the excess of the live
// batch, and its callers that of the live answer, nearest it: a pause of
// the host delays the batches and answers it met, in every setting.
type stalls struct {
	holdAt, afterAt []time.Duration // ascending
	holdEx, afterEx []time.Duration
}

func stallsOf(tr traffic) stalls {
	var st stalls
	var holdSum, afterSum [2]time.Duration
	var holdN, afterN [2]int
	kind := func(merged bool) int {
		if merged {
			return 1
		}
		return 0
	}
	for _, b := range tr.batches {
		k := kind(b.calls > 1)
		holdSum[k] += b.hold
		holdN[k]++
	}
	for _, a := range tr.afters {
		k := kind(a.merged)
		afterSum[k] += a.wait
		afterN[k]++
	}
	mean := func(sum time.Duration, n int) time.Duration { return sum / time.Duration(max(n, 1)) }
	bs := slices.SortedFunc(slices.Values(tr.batches), func(a, b batch) int { return cmp.Compare(a.at, b.at) })
	for _, b := range bs {
		k := kind(b.calls > 1)
		st.holdAt = append(st.holdAt, b.end().Sub(tr.from))
		st.holdEx = append(st.holdEx, b.hold-mean(holdSum[k], holdN[k]))
	}
	for _, a := range tr.afters {
		k := kind(a.merged)
		st.afterAt = append(st.afterAt, a.at.Sub(tr.from))
		st.afterEx = append(st.afterEx, a.wait-mean(afterSum[k], afterN[k]))
	}
	return st
}

// nearest is ex at the moment in at nearest t; 0 for none.
func nearest(at, ex []time.Duration, t time.Duration) time.Duration {
	if len(at) == 0 {
		return 0
	}
	i, _ := slices.BinarySearch(at, t)
	if i == len(at) || (i > 0 && t-at[i-1] < at[i]-t) {
		i--
	}
	return ex[i]
}

// HoldAt is the excess hold of the live batch that ended nearest at.
func (s stalls) HoldAt(at time.Duration, _ int) time.Duration { return nearest(s.holdAt, s.holdEx, at) }

// AfterAt is the excess wait of the live answer written nearest at.
func (s stalls) AfterAt(at time.Duration, _ int) time.Duration {
	return nearest(s.afterAt, s.afterEx, at)
}

func spreadOf(batches []batch, line batchcost.Latency, from time.Time) spread {
	type run struct{ start, end, factor float64 }
	var runs []run
	for _, b := range batches {
		t := line.TauMs(int(b.rows))
		rt := float64(b.roundTrip) / float64(time.Millisecond)
		if t <= 0 || rt <= 0 {
			continue
		}
		start := float64(b.end().Add(-b.hold-b.roundTrip).Sub(from)) / float64(time.Millisecond)
		runs = append(runs, run{start, start + rt, rt / t})
	}
	slices.SortFunc(runs, func(a, b run) int { return cmp.Compare(a.start, b.start) })
	var s spread
	for _, r := range runs {
		s.factors = append(s.factors, r.factor)
		if n := len(s.ends); n > 0 && r.start < s.ends[n-1] {
			r.start = s.ends[n-1] // instances overlapping: the one before's pace holds
		}
		if r.end > r.start {
			s.starts, s.ends, s.speeds = append(s.starts, r.start), append(s.ends, r.end), append(s.speeds, 1/r.factor)
		}
	}
	return s
}

// BatchMs draws a kept ratio at random.
func (s spread) BatchMs(rng *rand.Rand, meanMs float64) float64 {
	return meanMs * s.factors[rng.IntN(len(s.factors))]
}

// BatchMsAt is how long meanMs of the line's time takes from at on, at the
// live server's speeds.
func (s spread) BatchMsAt(_ *rand.Rand, at time.Duration, meanMs float64) float64 {
	t0 := float64(at) / float64(time.Millisecond)
	t, work := t0, meanMs
	i, _ := slices.BinarySearch(s.ends, t)
	for ; i < len(s.starts) && work > 0; i++ {
		if gap := s.starts[i] - t; gap > 0 { // between live batches: the line's pace
			if work <= gap {
				return t + work - t0
			}
			work, t = work-gap, s.starts[i]
		}
		if done := (s.ends[i] - t) * s.speeds[i]; work > done {
			work, t = work-done, s.ends[i]
			continue
		}
		return t + work/s.speeds[i] - t0
	}
	return t + work - t0
}

func (s spread) mean() float64 {
	var sum float64
	for _, f := range s.factors {
		sum += f
	}
	return sum / float64(len(s.factors))
}

// scv is the factors' squared coefficient of variation.
func (s spread) scv() float64 {
	m := s.mean()
	var v float64
	for _, f := range s.factors {
		v += (f - m) * (f - m)
	}
	return v / float64(len(s.factors)) / (m * m)
}

// roundSpan rounds a window's length for a sentence: to the second, or
// to the hundredth under ten seconds.
func roundSpan(d time.Duration) time.Duration {
	if d < 10*time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Second)
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
