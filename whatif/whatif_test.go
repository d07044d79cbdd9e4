package whatif

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/power"
)

// fakeModels is one batched model, "m", with its monitor, the policy in
// force and the grid's options set as PUT /policy would set them.
type fakeModels struct {
	mon     *monitor.Monitor
	name    string
	options map[string]string
}

func (f *fakeModels) Monitor(model string) (*monitor.Monitor, bool) { return f.mon, model == "m" }

func (f *fakeModels) InForce(model string) (string, map[string]string, bool) {
	return f.name, f.options, model == "m"
}

func (f *fakeModels) NewPolicy(model, name string, set map[string]string, tune func(*policy.Options)) (policy.Policy, error) {
	var budget policy.BudgetOptions
	var maxBatch policy.MaxBatchOptions
	for k, v := range set {
		switch k {
		case "latency_budget":
			budget.LatencyBudget = v
		case "tail_budget":
			budget.TailBudget = v
		case "slo_p99":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, err
			}
			budget.SLOP99 = d
		case "max_queue_delay":
			d, err := time.ParseDuration(v)
			if err != nil {
				return nil, err
			}
			maxBatch.MaxQueueDelay = d
		}
	}
	o := policy.NewOptions(budget, maxBatch)
	if tune != nil {
		tune(&o)
	}
	return policy.New(name, o)
}

// line is the test model's: googlenet-p4's line with B_max 8, and its
// energy line.
var (
	testLine   = batchcost.Latency{AlphaMs: 0.3051, Tau0Ms: 1.052}
	testEnergy = batchcost.Energy{BetaMJ: 19.9, Zeta0MJ: 19.6}
)

// lived is a model served for a while: arrivals at rate per second for
// d, each served alone in the line's time, answered 0.1 ms later, told to
// a recorder as the dispatcher tells it, and a meter whose energy is the
// energy line's plus idle watts.
type livedModel struct {
	rec   *Recorder
	now   time.Time
	start time.Time
	mon   *monitor.Monitor
}

func newLived(t testing.TB, rate float64, d time.Duration, idleW float64) *livedModel {
	t.Helper()
	return newLivedBy(t, rate, d, idleW, dispatcher.CallerOpen, policy.Callers{})
}

// newLivedBy is newLived with the arrivals' callers of kind, and the
// queue's callers as the plan reads them.
func newLivedBy(t testing.TB, rate float64, d time.Duration, idleW float64, kind dispatcher.CallerKind, callers policy.Callers) *livedModel {
	t.Helper()
	start := time.Unix(1_000_000, 0)
	l := &livedModel{now: start, start: start}
	var energyJ, requests, batchS float64
	meter := func() power.Snapshot {
		at := l.now
		e, n := energyJ+idleW*at.Sub(start).Seconds(), int64(requests)
		return power.Snapshot{Time: &at, GPUs: []power.GPUSnapshot{{GPU: "g", IdlePowerW: &idleW}},
			Models: []power.ModelSnapshot{{Model: "m", BatchSeconds: batchS, Windows: map[string]power.Figures{power.TotalWindow: {EnergyJ: &e, Requests: n}}}}}
	}
	l.rec = NewRecorder(Options{Arrivals: 1 << 16, Meter: meter, Now: func() time.Time { return l.now },
		Callers: func(string) (policy.Callers, bool) { return callers, true }})
	mon, err := monitor.New(monitor.Config{Model: "m", Policy: policy.Adhoc{}, Window: time.Second, MaxBatch: 8, Instances: 1,
		Seed: &testLine, Energy: &testEnergy, Now: func() time.Time { return l.now }})
	if err != nil {
		t.Fatal(err)
	}
	l.mon = mon
	rng := rand.New(rand.NewPCG(3, 4))
	l.rec.Sample()
	next := start.Add(time.Second)
	free := start
	for at := start; at.Before(start.Add(d)); at = at.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second))) {
		for !next.After(at) {
			l.now = next
			l.rec.Sample()
			next = next.Add(time.Second)
		}
		l.now = at
		l.rec.Arrived(dispatcher.Arrival{Model: "m", At: at, Rows: 1, Caller: kind})
		begin := at
		if free.After(begin) {
			begin = free
		}
		rt := time.Duration(float64(testLine.TauDuration(1)) * math.Exp(0.4*rng.NormFloat64()-0.08))
		end := begin.Add(rt)
		free = end
		l.rec.BatchEnded(&dispatcher.Batch{Model: "m"}, dispatcher.BatchEnd{At: end, Rows: 1, Calls: 1, OK: true, RoundTrip: rt})
		l.rec.Answered(dispatcher.Answer{Model: "m", Arrived: at, Latency: end.Add(100 * time.Microsecond).Sub(at), Calls: 1})
		energyJ += testEnergy.ZetaMJ(1) / 1000
		requests++
		batchS += rt.Seconds()
	}
	for !next.After(start.Add(d)) {
		l.now = next
		l.rec.Sample()
		next = next.Add(time.Second)
	}
	return l
}

// A what-if on a model's last minute: every setting of the grid replayed,
// the one in force first and ad-hoc second, each against ad-hoc, the
// front and a recommendation marked, and the replay of the setting in
// force set against what was lived.
func TestReplayerAnswers(t *testing.T) {
	l := newLived(t, 300, 10*time.Second, 20)
	p := NewReplayer(l.rec, &fakeModels{mon: l.mon, name: policy.NameAdhoc}, Config{CPU: 1})
	rep, err := p.Run(context.Background(), Request{Model: "m", Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Enough {
		t.Fatalf("not enough: %s", rep.Reason)
	}
	var b strings.Builder
	WriteTable(&b, rep)
	t.Log("\n" + b.String())
	if want := 2 + len(gridBudgets) + len(gridSLOs) + len(gridMaxDelays); len(rep.Points) != want {
		t.Fatalf("%d points, want %d", len(rep.Points), want)
	}
	if !rep.Points[0].Current || rep.Points[1].Policy != policy.NameAdhoc || *rep.Points[1].VsAdhoc.Mean != 1 {
		t.Errorf("the first points are %+v and %+v: want the one in force, then ad-hoc at 1x itself", rep.Points[0], rep.Points[1])
	}
	front := 0
	for _, pt := range rep.Points {
		if pt.Error != "" {
			t.Errorf("%s not replayed: %s", pt.Label, pt.Error)
		}
		if pt.Requests != rep.Arrivals.Rows {
			t.Errorf("%s replayed %d requests of %d", pt.Label, pt.Requests, rep.Arrivals.Rows)
		}
		if pt.Front {
			front++
		}
	}
	if front == 0 || rep.Recommended < 0 || !rep.Points[rep.Recommended].Front {
		t.Errorf("front of %d points, recommended %d", front, rep.Recommended)
	}
	// Ad-hoc's replay on the line the lived batches ran on, with their
	// energy: the same requests per joule within 3%, the same busy share
	// within 10%.
	c := rep.CheckVsLived
	if c.RequestsPerJoule == nil || math.Abs(*c.RequestsPerJoule-1) > 0.03 || c.BusyShare == nil || math.Abs(*c.BusyShare-1) > 0.1 {
		t.Errorf("replayed over lived: requests per joule %v, busy share %v; want within 3%% and 10%%", deref(c.RequestsPerJoule), deref(c.BusyShare))
	}
	// Waiting for a partner buys requests per joule: the longest maxbatch
	// delay beats ad-hoc's.
	if last := rep.Points[len(rep.Points)-1]; *last.VsAdhoc.RequestsPerJoule <= 1 || last.MeanBatch <= rep.Points[1].MeanBatch {
		t.Errorf("%s: %vx ad-hoc's requests per joule at batches of %.2f", last.Label, deref(last.VsAdhoc.RequestsPerJoule), last.MeanBatch)
	}
	if len(rep.Assumptions) < 5 || rep.Efficiency != EfficiencyRPJ {
		t.Errorf("assumptions %q, efficiency %s", rep.Assumptions, rep.Efficiency)
	}
}

func deref(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

// Closed-loop callers' calls are replayed as a loop: as many clients as
// send them at the rate they came with the latency lived (Little's law),
// thinking as long as the queue measured, over the span they came in; the
// replay says so, and the loop's replay under the setting in force sends
// about as many calls as came.
func TestClosedLoopReplayedAsClients(t *testing.T) {
	callers := policy.Callers{Known: true, ClosedLoop: 30, ThinkMs: 4}
	l := newLivedBy(t, 300, 10*time.Second, 20, dispatcher.CallerClosed, callers)
	p := NewReplayer(l.rec, &fakeModels{mon: l.mon, name: policy.NameAdhoc}, Config{CPU: 1})
	rep, err := p.Run(t.Context(), Request{Model: "m", Window: time.Minute})
	if err != nil || !rep.Enough {
		t.Fatalf("%v: %s", err, rep.Reason)
	}
	c := rep.ClosedLoop
	// 300 calls a second, each cycle the latency lived (about 2 ms) and
	// 4 ms of thinking: about 2 clients, not the 30 connections counted.
	if want := math.Round(300 * (deref(rep.Lived.MeanMs) + 4) / 1000); c == nil || float64(c.Clients) != want || c.Seen != 30 || c.ThinkMs != 4 || c.Arrivals != rep.Arrivals.Total {
		t.Fatalf("closed loop %+v, want %v clients (30 seen) thinking 4 ms, all %d calls", c, want, rep.Arrivals.Total)
	}
	if !strings.Contains(strings.Join(rep.Assumptions, " "), fmt.Sprintf("replayed as %d synchronous client(s)", c.Clients)) {
		t.Errorf("the assumptions do not say how the loop was replayed: %q", rep.Assumptions)
	}
	if got := float64(rep.Points[0].Requests); math.Abs(got/float64(rep.Arrivals.Total)-1) > 0.25 {
		t.Errorf("the loop replayed %v calls under the setting in force, %d came", got, rep.Arrivals.Total)
	}
}

// The pacer keeps work to its share of a core: at a quarter, 40 ms of
// work takes at least 160 ms.
func TestPacerKeepsItsShare(t *testing.T) {
	p := pacer{share: 0.25}
	start := time.Now()
	for worked := time.Duration(0); worked < 40*time.Millisecond; {
		t0 := time.Now()
		for time.Since(t0) < 100*time.Microsecond {
		}
		worked += time.Since(t0)
		p.pace()
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("40 ms of work at a quarter of a core took %v, want at least 160 ms", took)
	}
}

// The table fits in 100 columns.
func TestTableWidth(t *testing.T) {
	l := newLived(t, 300, 5*time.Second, 20)
	p := NewReplayer(l.rec, &fakeModels{mon: l.mon, name: policy.NameBudget, options: map[string]string{"latency_budget": "1.10x"}}, Config{CPU: 1})
	rep, err := p.Run(t.Context(), Request{Model: "m", Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rep.Points[2].Apply = `curl -sS -X PUT -H "Authorization: Bearer $RATEBATCH_ADMIN_TOKEN" -d '{"latency_budget":"1.05x","model":"m","policy":"budget","tail_budget":"1.20x"}' http://127.0.0.1:9002/policy`
	rep.Recommended = 2
	var b strings.Builder
	WriteTable(&b, rep)
	for i, line := range strings.Split(b.String(), "\n") {
		if n := len([]rune(line)); n > tableWidth {
			t.Errorf("line %d is %d columns: %q", i+1, n, line)
		}
	}
	if !strings.Contains(b.String(), "in force: budget mean 1.10x") || !strings.Contains(b.String(), "apply it:") {
		t.Errorf("table:\n%s", b.String())
	}
}

// A replayed batch runs at the live server's pace: the line's speed
// between live batches, a live batch's own while it ran; so a stall is
// lived once by the batches that meet it, not again by each.
func TestSpreadRunsAtTheLivePace(t *testing.T) {
	from := time.Unix(100, 0)
	line := batchcost.Latency{AlphaMs: 1, Tau0Ms: 1} // tau(1) = 2 ms
	// Two live batches of one row: at 10 ms, 2 ms as the line says; at
	// 20 ms, stalled for 40 ms (a twentieth of the line's speed).
	b := func(startMs, rtMs float64) batch {
		rt := time.Duration(rtMs * float64(time.Millisecond))
		return batch{at: from.Add(time.Duration(startMs*float64(time.Millisecond)) + rt).UnixNano(), rows: 1, roundTrip: rt}
	}
	s := spreadOf([]batch{b(20, 40), b(10, 2)}, line, from)
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, tc := range []struct {
		at, work, want float64 // ms
	}{
		{0, 2, 2},         // before any live batch: the line's pace
		{10, 2, 2},        // during the one at the line's pace
		{19, 2, 1 + 20},   // 1 ms to the stall, the second 1 ms of work at a twentieth
		{30, 2, 30 + 0.5}, // the stall's last 30 ms do 1.5 ms of work, 0.5 after it
		{58, 2, 2 + 1.9},  // its last 2 ms do 0.1, 1.9 after it
		{70, 2, 2},        // after: the line's
	} {
		if got := s.BatchMsAt(nil, ms(tc.at), tc.work); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%.3g ms of work at %v ms takes %v ms, want %v", tc.work, tc.at, got, tc.want)
		}
	}
}

// The live proxy's stalls are kept by when they happened, as the excess
// over their kind's mean: a batch's hold, an answer's wait after it.
func TestStallsByMoment(t *testing.T) {
	from := time.Unix(100, 0)
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	tr := traffic{from: from,
		batches: []batch{
			{at: from.Add(ms(10)).UnixNano(), rows: 1, calls: 1, hold: ms(0.1)},
			{at: from.Add(ms(20)).UnixNano(), rows: 1, calls: 1, hold: ms(30.1)}, // a pause
			{at: from.Add(ms(30)).UnixNano(), rows: 4, calls: 4, hold: ms(0.5)},
		},
		afters: []after{{from.Add(ms(10)), ms(0.05), false}, {from.Add(ms(21)), ms(20.05), false}, {from.Add(ms(30)), ms(0.2), true}},
	}
	st := stallsOf(tr)
	// Lone holds average 15.1 ms: the pause's is 15 over, the other 15
	// under; the merged one is its own mean.
	for _, tc := range []struct {
		at         float64
		hold, wait time.Duration
	}{{9, ms(-15), ms(-10)}, {19, ms(15), ms(10)}, {31, 0, 0}} {
		if h, w := st.HoldAt(ms(tc.at), 1), st.AfterAt(ms(tc.at), 1); h != tc.hold || w != tc.wait {
			t.Errorf("at %v ms: hold %v, wait %v beyond the mean; want %v, %v", tc.at, h, w, tc.hold, tc.wait)
		}
	}
}
