package dispatcher

import (
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/policy"
)

// SourceIdleFor is how long a source (a caller's connection) counts as a
// possible partner after its last answer: a closed-loop client sends its
// next request a think time after the answer, and one that has not sent
// for a second is taken to have gone.
const SourceIdleFor = time.Second

// sourceWindow is how many recent gaps a source's moving means weigh: the
// first gaps are averaged equally, later ones with weight 1/sourceWindow,
// so an estimate follows a client that changes its pace within a few
// dozen requests and is not thrown by one late request.
const sourceWindow = 16

// sourceLearnAfter is how many gaps a source must show before it is
// classified; until then it is of kind unknown.
const sourceLearnAfter = 3

// sourceJitter is the spread of a gap below which it carries no
// information (scheduling and timer noise): a source whose answer→arrival
// gaps vary by less is never called open-loop for their variation.
const sourceJitter = 10 * time.Microsecond

// Source kinds, as SourceStats and the ratebatch_sources metric name them.
const (
	KindClosedLoop = "closed_loop"
	KindOpenLoop   = "open_loop"
	KindUnknown    = "unknown"
)

// sources counts a model queue's callers by connection, so that a decision
// knows how many callers could still send a request while a batch waits:
// an HTTP/1.1 connection with a call in the proxy cannot send another, so
// when every recently active connection has its call waiting or in flight,
// no partner can come from them, and holding the batch for one only costs
// its latency (a lone synchronous client would wait for itself). It also
// learns each source's behaviour (source.kind). Guarded by the queue's
// mutex.
type sources struct {
	by   map[uint64]*source
	busy int // sources with a call in the proxy
	// free is the sum over the sources of source.free: the calls they
	// could still send now.
	free    int
	unknown time.Time // the last call without a source: partners unknown until SourceIdleFor after it
	pruned  time.Time
	fb      feedback
	lone    lone
}

// lone tells a lone synchronous caller whatever its connections. A client
// that opens a connection per call (curl in a shell loop, requests.post
// without a Session, urllib) shows as a new source at every call, each
// answered source a possible partner for SourceIdleFor: one such client
// read as a population of as many unknown partners as the calls it made
// in that time, and the rules held its calls for partners that could not
// come. What its connections hide
// the model's arrivals show: a lone synchronous caller never sends while
// a call of its own is in the proxy, so no arrival finds one there. Poisson
// arrivals find one as often as the proxy has one (PASTA): a run of n
// arrivals that found none, while the proxy had a call a share u of the
// run's time, has probability about exp(-n u) under any open stream.
// After loneMinimum arrivals in a row with n u >= loneEvidence the callers
// are taken as one synchronous client (SourceStats.Lone): no partner can
// come (sources.idle) and the plan reads a closed loop of one, thinking
// the mean gap from the proxy's last answer to the next arrival. The first
// arrival that finds a call in the proxy ends it. An open stream so light
// that it passes shows almost no overlaps to gain from: sending at once
// is then what a tail budget asks anyway.
//
// Keying sources by the client's address instead would merge the callers
// behind one address (a gateway, a NAT, a load generator's pool) into one
// source and needs the door's peer address; the model's arrivals need
// neither and hold for any transport.
type lone struct {
	inProxy  int       // calls of known sources in the proxy
	run      int       // arrivals in a row that found none in the proxy
	since    time.Time // the first arrival of the run
	busyFrom time.Time // when inProxy last rose from 0
	busy     float64   // ns of the run with a call in the proxy, before busyFrom
	answered time.Time // when inProxy last fell to 0
	gaps     int       // gaps learnt into think, up to sourceWindow
	think    float64   // moving mean (ns) of the gap from answered to an arrival
}

// The lone caller's thresholds: arrivals in a row, and the overlaps an
// open stream would have shown in them (exp(-6): 0.25% of runs).
const (
	loneMinimum  = 32
	loneEvidence = 6
)

// arrive counts an arrival at now, before it is in the proxy.
func (l *lone) arrive(now time.Time) {
	if l.inProxy > 0 {
		l.run = 0
	} else {
		if l.run == 0 {
			l.since, l.busy = now, 0
		}
		l.run++
		if g := now.Sub(l.answered); !l.answered.IsZero() && g <= SourceIdleFor {
			if l.gaps < sourceWindow {
				l.gaps++
			}
			l.think += sourceWeight[l.gaps] * (float64(g) - l.think)
		}
		l.busyFrom = now
	}
	l.inProxy++
}

// leave counts a call leaving the proxy at now.
func (l *lone) leave(now time.Time) {
	if l.inProxy == 0 {
		return
	}
	l.inProxy--
	if l.inProxy == 0 {
		l.busy += float64(now.Sub(l.busyFrom))
		l.answered = now
	}
}

// is reports whether the arrivals are a lone synchronous caller's at now:
// the run is long and telling enough, and the caller active (a call in
// the proxy, or answered within SourceIdleFor).
func (l *lone) is(now time.Time) bool {
	if l.run < loneMinimum || (l.inProxy == 0 && now.Sub(l.answered) > SourceIdleFor) {
		return false
	}
	busy := l.busy
	if l.inProxy > 0 {
		busy += float64(now.Sub(l.busyFrom))
	}
	span := float64(now.Sub(l.since))
	return span > 0 && float64(l.run)*busy/span >= loneEvidence
}

// feedback tells a closed loop from open arrivals that come through a pool
// of connections, by what the arrivals see. Each connection of a pool that
// carries a Poisson stream (a load generator, an async client's
// connection pool) sends its next request some time after its previous
// answer, with gaps as spread as an exponential thinker's: one connection
// at a time, the two look alike (source.kind calls both closed-loop). The
// population tells them apart. In a closed loop each idle caller sends at
// its own pace, so the arrival rate grows with the callers idle, and the
// arrivals see more idle callers than the time average: E_a[k] =
// E_t[k^2]/E_t[k] for k partners (exactly, for exponential think times).
// Poisson arrivals see time averages (PASTA): E_a[k] = E_t[k]. The score
// (E_a[k] - E_t[k]) / (E_t[k^2]/E_t[k] - E_t[k]) is about 1 for a closed
// loop of exponential thinkers, about a half for synchronous callers that
// think alike (their arrivals come in a cluster after a batch's answers,
// each seeing one partner fewer than the one before: (N+1)/2N), and about
// 0 for open arrivals through a pool, whatever its order of reuse
// (TestFeedbackTellsAPoolFromAClosedLoop prints each).
//
// Without it, an open stream over a pool of keep-alive connections was
// planned live as a closed loop of as many clients (each connection
// closed-loop by its own gaps), and the budget policy missed its bound
// (docs/ALGORITHMS.md, "What is learnt of each source").
type feedback struct {
	at           time.Time // when the partner count last changed
	last         time.Time // the last arrival from a known source
	t, tk, tk2   float64   // time-integrals (ns) of 1, k and k^2
	arrivals, ak float64   // arrivals from known sources, and their summed k
}

// Feedback's constants: its memory (the sums halve every feedbackMemory
// arrivals), the arrivals it needs to say anything, and the score below
// which arrivals are taken as open.
const (
	feedbackMemory  = 4096
	feedbackMinimum = 256
	feedbackOpen    = 0.25
)

// hold accounts the partner count k for the time since the last change,
// up to now, but no later than SourceIdleFor after the last arrival: a
// pause is not the population's time (its sources are forgotten after
// it). The bound is on the arrivals, not on the interval since the last
// call, because the proxy reads its callers every few hundred
// milliseconds whether or not anyone calls: counted piecewise, the
// minutes with nobody there before the first call (or between bursts)
// would read as time with no partner in which no arrival came, exactly
// what a closed loop shows, and a light Poisson stream over a pool would
// score as one.
//
// Nor is time with no partner and no call in the proxy: no caller could
// arrive but on a new connection, in a closed loop as in an open stream.
// A closed loop shows no partner only while all its callers wait in the
// proxy; counted, the second after a lone first call (a probe before a
// benchmark, a readiness check) read as that, and a Poisson stream over a
// pool that followed it scored as a closed loop until the halvings of
// feedbackMemory washed that second out, tens of seconds at a few hundred
// calls a second.
// busy says a call was in the proxy since the last change.
func (f *feedback) hold(k int, busy bool, now time.Time) {
	end := now
	if stop := f.last.Add(SourceIdleFor); end.After(stop) {
		end = stop
	}
	if d := end.Sub(f.at); !f.at.IsZero() && d > 0 && (k > 0 || busy) {
		dt, x := float64(d), float64(k)
		f.t += dt
		f.tk += dt * x
		f.tk2 += dt * x * x
	}
	f.at = now
}

// arrive counts an arrival at now that saw k partners.
func (f *feedback) arrive(k int, now time.Time) {
	f.last = now
	f.arrivals++
	f.ak += float64(k)
	if f.arrivals >= feedbackMemory {
		f.t, f.tk, f.tk2, f.arrivals, f.ak = f.t/2, f.tk/2, f.tk2/2, f.arrivals/2, f.ak/2
	}
}

// score is the feedback score, and false while it says nothing: too few
// arrivals, or a partner count that hardly varied (the closed loop's
// predicted bias is then too small to measure).
func (f *feedback) score() (float64, bool) {
	if f.arrivals < feedbackMinimum || f.t <= 0 {
		return 0, false
	}
	et, et2 := f.tk/f.t, f.tk2/f.t
	v := et2 - et*et
	if et <= 0 || v <= 0.01*et*et {
		return 0, false
	}
	return (f.ak/f.arrivals - et) * et / v, true
}

// source is one caller's connection and what is learnt of it. A
// closed-loop source sends its next request a think time after its
// previous answer: the gap from answer to arrival is the think time,
// whatever the latency was, and the interval from arrival to arrival is
// the latency plus it, so it varies at least as much. An open-loop source
// sends on its own schedule: the interval from arrival to arrival is its
// own, and the gap from the answer is it minus the latency, varying more.
// The moving means of both and of their squares tell them apart.
//
// A connection that multiplexes callers (a gRPC connection's streams) is
// learnt the same way, each arrival paired with the oldest of its answers
// not yet paired (first in, first out): when its callers are synchronous
// and think about the same time, each arrival follows the answer of the
// caller that sends it by that caller's think time, and the gaps are as
// tight as one client's. When its calls come on their own schedule, the
// answer an arrival is paired with is anyone's, and the gaps spread.
type source struct {
	calls    int       // calls of the source in the proxy
	answered time.Time // when its latest call was answered
	arrived  time.Time // its last arrival
	overlap  bool      // it had more than one call in the proxy at once
	reused   bool      // it sent a call after its first
	// unpaired holds, for a connection whose calls overlapped, the times
	// of its answers not yet paired with a later arrival, oldest first
	// (at most maxUnpaired).
	unpaired []time.Time
	peak     int // the most calls it has had in the proxy at once
	gaps     int // gaps learnt, up to sourceWindow
	// Moving means, in nanoseconds, of the gap from an answer to the next
	// arrival and of the interval between the two arrivals, and of their
	// squares.
	gap, gap2, ival, ival2 float64
}

// free is how many more calls the source could send now. A connection
// that has never had two calls in the proxy at once is one caller (an
// HTTP/1.1 connection cannot have two): it can send when it has none. One
// whose calls overlapped multiplexes callers (a gRPC connection's
// streams, perf_analyzer's contexts); it has shown it can have peak calls
// at once, and can send while it has fewer. When its callers are
// synchronous, peak counts them, and a connection with all of them in the
// proxy sends no partner however busy it looks; an open-loop one's peak
// grows with its bursts, so it stays a partner but at its very peak.
//
// A connection that has carried one call only is no partner yet: many
// clients open a connection per call and close it with the answer (curl
// in a shell loop, requests.post without a Session), and a partner that
// cannot come is the costly error (a hold for nobody) where one missed
// costs a batch that could have been fuller. It counts from its second
// call on.
func (s *source) free() int {
	switch {
	case s.overlap:
		return max(s.peak-s.calls, 0)
	case !s.reused:
		return 0
	}
	return max(1-s.calls, 0)
}

// kind is what the source's calls so far show: unknown until it has
// shown sourceLearnAfter gaps after an answer; open-loop when they vary
// more than twice its intervals from arrival to arrival (beyond timer
// noise); else closed-loop. A multiplexing connection is judged the same
// way, its gaps paired first in, first out: synchronous callers' gaps
// vary far less than the connection's intervals, which cluster behind
// each batch's answers, while a Poisson stream's on one connection vary
// more (the ratios measured: docs/ALGORITHMS.md, "What is learnt of each
// source"; TestMultiplexedSourcesKind prints each).
func (s *source) kind() string {
	if s.gaps < sourceLearnAfter {
		return KindUnknown
	}
	const jitter = float64(sourceJitter)
	if varGap, varIval := s.gap2-s.gap*s.gap, s.ival2-s.ival*s.ival; varGap > 2*varIval+jitter*jitter {
		return KindOpenLoop
	}
	return KindClosedLoop
}

// maxUnpaired bounds a multiplexing connection's unpaired answers: beyond
// its callers (perf_analyzer's --concurrency-range, a client's pool) they
// are an open loop's, and the oldest are dropped.
const maxUnpaired = 256

// learn takes the gap from the answer that prompted a new arrival (the
// source's last for a one-call connection, its oldest unpaired for a
// multiplexing one), and the interval since its previous arrival, into its
// moving means. A gap longer than SourceIdleFor is a pause, not a think
// time, and is skipped.
func (s *source) learn(now time.Time) {
	answered := s.answered
	if s.overlap {
		if len(s.unpaired) == 0 {
			return // one more caller than it has had at once
		}
		answered = s.unpaired[0]
		s.unpaired = s.unpaired[1:]
	}
	g := now.Sub(answered)
	if answered.IsZero() || g > SourceIdleFor {
		return
	}
	gap, ival := float64(g), float64(now.Sub(s.arrived))
	if s.gaps < sourceWindow {
		s.gaps++
	}
	w := sourceWeight[s.gaps]
	s.gap += w * (gap - s.gap)
	s.gap2 += w * (gap*gap - s.gap2)
	s.ival += w * (ival - s.ival)
	s.ival2 += w * (ival*ival - s.ival2)
}

// sourceWeight[n] is the weight of the n-th gap of a source's moving
// means, 1/n, and 1/sourceWindow from then on (a table: no division on the
// request path).
var sourceWeight = func() (w [sourceWindow + 1]float64) {
	for n := 1; n <= sourceWindow; n++ {
		w[n] = 1 / float64(n)
	}
	return w
}()

// arrive counts a call of source id (0: unknown) and returns what its
// caller is taken for (caller).
func (s *sources) arrive(id uint64, now time.Time) CallerKind {
	if id == 0 {
		s.unknown = now
		return CallerUnnamed
	}
	if s.by == nil {
		s.by = map[uint64]*source{}
	}
	s.lone.arrive(now)
	s.fb.hold(s.free, s.busy > 0, now)
	s.fb.arrive(s.free, now)
	src := s.by[id]
	if src == nil {
		src = &source{}
		s.by[id] = src
	} else {
		s.free -= src.free()
		src.reused = true
	}
	switch {
	case src.calls == 0:
		s.busy++
		src.learn(now)
	case src.overlap:
		src.learn(now)
	case src.calls == 1:
		// Its second call at once: it multiplexes callers. What it
		// learnt as one caller does not describe them.
		src.overlap = true
		src.gaps, src.gap, src.gap2, src.ival, src.ival2 = 0, 0, 0, 0, 0
		src.unpaired = make([]time.Time, 0, 8)
	}
	src.arrived = now
	src.calls++
	if src.calls > src.peak {
		src.peak = src.calls
	}
	s.free += src.free()
	return s.caller(src, now)
}

// CallerKind is what the queue takes a call's caller for at its arrival,
// as the plan reads the callers (modelQueue.callers): an observer that
// keeps arrivals to replay them through other settings (the what-if) must
// not replay a closed loop's at the times they came, since they follow
// the answers.
type CallerKind uint8

// The kinds of caller. A closed-loop connection among arrivals whose
// feedback says they do not follow the answers (a pool under an open
// stream) is open, as the plan takes it.
const (
	CallerUnnamed CallerKind = iota // a connection the door cannot name
	CallerUnknown                   // a connection not learnt yet
	CallerOpen                      // sends on its own schedule
	CallerClosed                    // sends a think time after its answer
	CallerLone                      // the one synchronous caller of the model
)

var callerNames = [...]string{"unnamed", "unknown", "open_loop", "closed_loop", "lone"}

func (k CallerKind) String() string {
	if int(k) < len(callerNames) {
		return callerNames[k]
	}
	return "unknown"
}

// caller is the kind of src's caller at now.
func (s *sources) caller(src *source, now time.Time) CallerKind {
	if s.lone.is(now) {
		return CallerLone
	}
	switch src.kind() {
	case KindOpenLoop:
		return CallerOpen
	case KindClosedLoop:
		if fb, ok := s.fb.score(); ok && fb < feedbackOpen {
			return CallerOpen
		}
		return CallerClosed
	}
	return CallerUnknown
}

// leave uncounts a call of source id: answered, withdrawn or expired.
func (s *sources) leave(id uint64, now time.Time) {
	src := s.by[id]
	if id == 0 || src == nil || src.calls == 0 {
		return
	}
	s.lone.leave(now)
	s.fb.hold(s.free, s.busy > 0, now)
	s.free -= src.free()
	src.calls--
	src.answered = now
	if src.overlap {
		if len(src.unpaired) == maxUnpaired {
			src.unpaired = src.unpaired[1:]
		}
		src.unpaired = append(src.unpaired, now)
	}
	if src.calls == 0 {
		s.busy--
	}
	s.free += src.free()
}

// active reports whether a source sent within SourceIdleFor or has a call
// in the proxy.
func (src *source) active(now time.Time) bool {
	return src.calls > 0 || now.Sub(src.answered) <= SourceIdleFor
}

// prune forgets the sources idle for longer than SourceIdleFor, at most
// four times per SourceIdleFor, so memory is bounded by the connections of
// the last second or so.
func (s *sources) prune(now time.Time) {
	if now.Sub(s.pruned) <= SourceIdleFor/4 {
		return
	}
	s.pruned = now
	s.fb.hold(s.free, s.busy > 0, now)
	for id, src := range s.by {
		if !src.active(now) {
			s.free -= src.free()
			delete(s.by, id)
		}
	}
}

// idle returns how many calls the known sources could send now
// (source.free: a recent connection without a call, the streams a
// multiplexing one has shown beyond those it has in the proxy; none
// when the arrivals are a lone caller's, lone), and
// whether that count says anything: not when a call without a source came
// within SourceIdleFor, nor before any call came.
func (s *sources) idle(now time.Time) (n int, known bool) {
	s.prune(now)
	if len(s.by) == 0 || now.Sub(s.unknown) < SourceIdleFor {
		return 0, false
	}
	if s.lone.is(now) {
		return 0, true // the one caller is waiting
	}
	return s.free, true
}

// SourceStats is a model's callers as the dispatcher has learnt them
// (docs/ALGORITHMS.md, "Sources").
type SourceStats struct {
	// Known is false while calls without a source (a connection the door
	// cannot name) came within SourceIdleFor: the counts below are then
	// only part of the callers.
	Known bool `json:"known"`
	// Population is the sources active within SourceIdleFor: with a call
	// in the proxy, or answered within it.
	Population int `json:"population"`
	// ClosedLoop, OpenLoop and Unknown split the population by kind:
	// unknown until a source has shown three gaps from an answer to its
	// next request. Connections that each look closed-loop by their gaps
	// count as open-loop once Feedback says their arrivals do not follow
	// the answers (a pool under an open stream): the plan, the metrics
	// and the live page read the one verdict. While Feedback is not
	// known yet, such a pool still counts as closed-loop.
	ClosedLoop int `json:"closed_loop"`
	OpenLoop   int `json:"open_loop"`
	Unknown    int `json:"unknown"`
	// ClosedLoopCallers is the synchronous callers behind the closed-loop
	// connections: one per one-call connection, a multiplexing one's most
	// calls at once (its streams). It is the population the budget
	// policy plans a closed loop for.
	ClosedLoopCallers int `json:"closed_loop_callers"`
	// Busy have a call in the proxy now, Idle do not.
	Busy int `json:"busy"`
	Idle int `json:"idle"`
	// Concurrency is the sum over the population of the most calls each
	// has had in the proxy at once: 1 for an HTTP/1.1 connection, the
	// streams a gRPC connection carried together (perf_analyzer's gRPC
	// client multiplexes its concurrency over one connection). When each
	// stream is a synchronous caller, it counts the callers behind the
	// connections.
	Concurrency int `json:"concurrency"`
	// Partners is how many calls could be sent now, as a decision counts
	// them (policy.Queue.IdleSources): one per idle connection, and per
	// multiplexing connection the calls it has shown at once beyond those
	// it has in the proxy.
	Partners int `json:"partners"`
	// ThinkMs is the mean over closed-loop sources of their estimated
	// think time: the moving mean of the gap from an answer to the
	// source's next request, as the proxy sees it (so including the
	// network both ways). Nil without a closed-loop source.
	ThinkMs *float64 `json:"think_ms"`
	// Lone is true when the arrivals are one synchronous caller's,
	// whatever its connections: none found a call in the proxy over a
	// run long enough to tell (lone). The counts then describe that one
	// caller: one closed-loop source, thinking the mean gap from the
	// proxy's last answer to the next arrival.
	Lone bool `json:"lone"`
	// Feedback is how much the arrivals follow the answers: about 1 when
	// the callers are a closed loop (an idle caller sends its next
	// request at its own pace), about 0 when they arrive on their own
	// schedule through a pool of connections (arrivals independent of how
	// many wait); nil until enough arrivals were seen. Below 0.25 the
	// connections are counted, and planned, as open arrivals (feedback).
	Feedback *float64 `json:"feedback"`
}

// stats returns the sources' state at now.
func (s *sources) stats(now time.Time) SourceStats {
	s.prune(now)
	st := SourceStats{Known: len(s.by) > 0 && now.Sub(s.unknown) >= SourceIdleFor}
	if st.Known && s.lone.is(now) {
		busy := min(s.lone.inProxy, 1)
		ms := s.lone.think / float64(time.Millisecond)
		st.Lone, st.Population, st.ClosedLoop, st.ClosedLoopCallers, st.Concurrency = true, 1, 1, 1, 1
		st.Busy, st.Idle, st.ThinkMs = busy, 1-busy, &ms
		return st
	}
	var think float64
	for _, src := range s.by {
		if !src.active(now) {
			continue
		}
		st.Population++
		st.Concurrency += src.peak
		if src.calls > 0 {
			st.Busy++
		} else {
			st.Idle++
		}
		st.Partners += src.free()
		switch src.kind() {
		case KindClosedLoop:
			st.ClosedLoop++
			st.ClosedLoopCallers += src.peak
			think += src.gap
		case KindOpenLoop:
			st.OpenLoop++
		default:
			st.Unknown++
		}
	}
	if fb, ok := s.fb.score(); ok {
		st.Feedback = &fb
		if fb < feedbackOpen {
			// Connections that each look closed-loop by their gaps,
			// carrying arrivals that do not follow the answers: a pool
			// under an open stream, which is what they are called.
			st.OpenLoop += st.ClosedLoop
			st.ClosedLoop, st.ClosedLoopCallers = 0, 0
		}
	}
	if st.ClosedLoop > 0 {
		ms := think / float64(st.ClosedLoop) / float64(time.Millisecond)
		st.ThinkMs = &ms
	}
	return st
}

// callers is the queue's callers as a plan reads them
// (ModelSpec.WatchCallers): every kind but closed-loop counts as other.
func (q *modelQueue) callers(now time.Time) policy.Callers {
	q.mu.Lock()
	st := q.src.stats(now)
	q.mu.Unlock()
	c := policy.Callers{Known: st.Known, ClosedLoop: st.ClosedLoopCallers, Others: st.OpenLoop + st.Unknown}
	if st.ThinkMs != nil {
		c.ThinkMs = *st.ThinkMs
	}
	return c
}

// watch hands the reader of the queue's callers to the model's
// ModelSpec.WatchCallers, if set.
func (q *modelQueue) watch() {
	q.mu.Lock()
	w := q.spec.WatchCallers
	q.mu.Unlock()
	if w != nil {
		w(q.callers)
	}
}

// freeSources marks the sources of a batch's calls free: their answers
// are about to be delivered. Calls without a source need no lock.
func (q *modelQueue) freeSources(calls []*Call) {
	if !slices.ContainsFunc(calls, func(c *Call) bool { return c.Source != 0 }) {
		return
	}
	q.mu.Lock()
	now := q.d.now()
	for _, c := range calls {
		q.src.leave(c.Source, now)
	}
	q.mu.Unlock()
}
