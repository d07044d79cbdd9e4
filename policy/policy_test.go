package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

var t0 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms float64) time.Time { return t0.Add(time.Duration(ms * float64(time.Millisecond))) }

// googlenet is googlenet-p4's line: tau(b) = 0.3051 b + 1.052 ms (B_max 32).
var googlenet = batchcost.Latency{AlphaMs: 0.3051, Tau0Ms: 1.052}

// batchAt2000 is Algorithm 1's batch size for googlenet at 2000 requests/s,
// derived by hand rather than by ChooseBatch, the function under test:
// mu(b) = 1000 b / (0.3051 b + 1.052) per s exceeds 2000 when
// 389.8 b > 2104, i.e. b > 5.40; mu(5) = 1939.9, mu(6) = 2081.5.
const batchAt2000 = 6

func estimate(rate float64) Estimate {
	return Estimate{Now: t0, Window: time.Second, Arrivals: int(rate), RatePerSec: rate,
		Latency: googlenet, FitR2: 1, MaxBatch: 32, Instances: 1}
}

func TestChooseBatch(t *testing.T) {
	mu := func(b int) float64 { return 1000 * float64(b) / (0.3051*float64(b) + 1.052) } // per s
	tests := []struct {
		name string
		rate float64
		bmax int
		want int
	}{
		{"no arrivals starts the search at 2", 0, 32, 2},
		{"one request per second", 1, 32, 2},
		{"just under mu(2)", mu(2) - 1e-6, 32, 2},
		{"exactly mu(2) is not below it", mu(2), 32, 3},
		{"between mu(9) and mu(10)", (mu(9) + mu(10)) / 2, 32, 10},
		{"2000 per s, by hand", 2000, 32, batchAt2000},
		{"just under mu(32)", mu(32) - 1e-6, 32, 32},
		{"above every mu falls back to B_max", mu(32) * 2, 32, 32},
		{"B_max 1", 5000, 1, 1},
		{"B_max 2, high rate", 1e6, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ChooseBatch(tt.rate, googlenet, tt.bmax); got != tt.want {
				t.Fatalf("ChooseBatch(%v) = %d, want %d", tt.rate, got, tt.want)
			}
		})
	}
}

func TestChooseBatchIsSmallestCovering(t *testing.T) {
	// Property: the answer b covers the rate and b-1 does not (for b > 2).
	for rate := 0.0; rate < 3000; rate += 7.3 {
		b := ChooseBatch(rate, googlenet, 32)
		mu := func(b int) float64 { return 1000 * float64(b) / (0.3051*float64(b) + 1.052) }
		if b < 32 && !(rate < mu(b)) {
			t.Fatalf("rate %v: b=%d does not cover it (mu=%v)", rate, b, mu(b))
		}
		if b > 2 && rate < mu(b-1) {
			t.Fatalf("rate %v: b=%d but %d already covers it", rate, b, b-1)
		}
	}
}

func TestFillDecide(t *testing.T) {
	rule := Fill{Policy: "x", Batch: 4, MaxWait: 2 * time.Millisecond}
	q := func(now float64, rows int, oldest float64, inFlight int) Queue {
		qq := Queue{Now: at(now), Rows: rows, InFlight: inFlight, Instances: 1, MaxBatch: 8}
		if rows > 0 {
			qq.OldestArrival = at(oldest)
		}
		return qq
	}
	tests := []struct {
		name string
		rule Fill
		q    Queue
		want Decision
	}{
		{"empty queue waits for an arrival", rule, q(10, 0, 0, 0), Wait()},
		{"full batch goes at once", rule, q(10, 4, 10, 0), Send(4)},
		{"longer queue still sends the batch size", rule, q(10, 9, 0, 0), Send(4)},
		{"busy instance waits for the completion", rule, q(10, 9, 0, 1), Wait()},
		{"busy instance past the bound still waits", rule, q(10, 2, 0, 1), Wait()},
		{"partial batch waits until the bound", rule, q(10, 2, 9, 0), WaitUntil(at(11))},
		{"partial batch goes at the bound", rule, q(11, 2, 9, 0), Send(2)},
		{"partial batch goes after the bound", rule, q(50, 3, 9, 0), Send(3)},
		{"zero wait is work-conserving", Fill{Batch: 4}, q(10, 3, 10, 0), Send(3)},
		{"batch 0 means the queue's max batch", Fill{}, q(10, 20, 10, 0), Send(8)},
		{"batch above max batch is cut", Fill{Batch: 50, MaxWait: time.Hour}, q(10, 8, 10, 0), Send(8)},
		{"second instance free", rule, Queue{Now: at(10), Rows: 4, OldestArrival: at(10), InFlight: 1, Instances: 2, MaxBatch: 8}, Send(4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Decide(tt.q); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func doubted(e Estimate) Estimate {
	e.FitDoubt = "one size seen"
	return e
}

func TestBuiltinPlans(t *testing.T) {
	tau := func(b int) time.Duration { return estimate(0).TauDuration(b) }
	tests := []struct {
		name     string
		policy   string
		opts     Options
		e        Estimate
		wantB    int
		wantWait time.Duration
		wantNote string
	}{
		{"batchmonitor starts work-conserving", NameBatchMonitor, Options{}, Estimate{Now: t0, Latency: googlenet, MaxBatch: 32, Instances: 1}, 1, 0, "no arrival rate"},
		{"batchmonitor doubts the fit", NameBatchMonitor, Options{}, doubted(estimate(2000)), 1, 0, "work-conserving: one size"},
		{"batchmonitor+ doubts the fit", NameBatchMonitorPlus, Options{}, doubted(estimate(2000)), 1, 0, "work-conserving: one size"},
		{"batchmonitor low rate picks 2, waits tau(2)", NameBatchMonitor, Options{}, estimate(10), 2, tau(2), ""},
		{"batchmonitor mid rate", NameBatchMonitor, Options{}, estimate(2000), batchAt2000, tau(batchAt2000), ""},
		{"batchmonitor overload picks B_max", NameBatchMonitor, Options{}, estimate(1e5), 32, tau(32), ""},
		{"batchmonitor explicit wait", NameBatchMonitor, NewOptions(BatchMonitorOptions{HoldOptions{MaxWait: 7 * time.Millisecond}}), estimate(10), 2, 7 * time.Millisecond, ""},
		{"batchmonitor bad estimate falls back", NameBatchMonitor, Options{}, Estimate{Window: time.Second, Latency: batchcost.Latency{AlphaMs: -1}, MaxBatch: 32, Instances: 1}, 32, 0, "alpha"},
		{"adhoc", NameAdhoc, Options{}, estimate(10), 32, 0, ""},
		{"maxbatch default delay", NameMaxBatch, Options{}, estimate(10), 32, DefaultMaxQueueDelay, ""},
		{"maxbatch delay", NameMaxBatch, NewOptions(MaxBatchOptions{MaxQueueDelay: 3 * time.Millisecond}), estimate(10), 32, 3 * time.Millisecond, ""},
		{"static", NameStatic, NewOptions(StaticOptions{Batch: 8}), estimate(10), 8, DefaultStaticMaxWait, ""},
		{"static wait", NameStatic, NewOptions(StaticOptions{Batch: 8, HoldOptions: HoldOptions{MaxWait: time.Millisecond}}), estimate(10), 8, time.Millisecond, ""},
		{"static cut to B_max", NameStatic, NewOptions(StaticOptions{Batch: 64}), estimate(10), 32, DefaultStaticMaxWait, "cut"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.policy, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if p.Name() != tt.policy {
				t.Fatalf("Name() = %q, want %q", p.Name(), tt.policy)
			}
			st := p.Plan(tt.e).Status()
			if st.BatchSize != tt.wantB || st.MaxWait != tt.wantWait || st.Policy != tt.policy {
				t.Fatalf("Status = %+v, want batch %d wait %v", st, tt.wantB, tt.wantWait)
			}
			if !strings.Contains(st.Note, tt.wantNote) || (tt.wantNote == "" && st.Note != "") {
				t.Fatalf("note %q, want it to mention %q", st.Note, tt.wantNote)
			}
		})
	}
}

// The rules, driven event by event, behave as their policies promise.
func TestBuiltinRules(t *testing.T) {
	e := estimate(10) // batchmonitor: pbs 2
	mk := func(name string, o Options) Rule {
		p, err := New(name, o)
		if err != nil {
			t.Fatal(err)
		}
		return p.Plan(e)
	}
	one := func(now, oldest float64, rows int) Queue {
		return Queue{Now: at(now), Rows: rows, OldestArrival: at(oldest), Instances: 1, MaxBatch: 32}
	}
	tests := []struct {
		name string
		rule Rule
		q    Queue
		want Decision
	}{
		{"adhoc sends a lone request", mk(NameAdhoc, Options{}), one(0, 0, 1), Send(1)},
		{"adhoc sends all up to B_max", mk(NameAdhoc, Options{}), one(0, 0, 100), Send(32)},
		{"batchmonitor holds a lone request for tau(2)", mk(NameBatchMonitor, Options{}), one(0, 0, 1), WaitUntil(at(0).Add(e.TauDuration(2)))},
		{"batchmonitor sends a pair", mk(NameBatchMonitor, Options{}), one(0, 0, 2), Send(2)},
		{"batchmonitor sends only pbs from a long queue", mk(NameBatchMonitor, Options{}), one(0, 0, 30), Send(2)},
		{"maxbatch waits for B_max", mk(NameMaxBatch, NewOptions(MaxBatchOptions{MaxQueueDelay: 5 * time.Millisecond})), one(1, 0, 31), WaitUntil(at(5))},
		{"maxbatch sends B_max", mk(NameMaxBatch, Options{}), one(1, 0, 32), Send(32)},
		{"maxbatch deadline", mk(NameMaxBatch, NewOptions(MaxBatchOptions{MaxQueueDelay: 5 * time.Millisecond})), one(5, 0, 3), Send(3)},
		{"static waits for b", mk(NameStatic, NewOptions(StaticOptions{Batch: 4})), one(900, 0, 3), WaitUntil(at(1000))},
		{"static sends b", mk(NameStatic, NewOptions(StaticOptions{Batch: 4})), one(0, 0, 9), Send(4)},
		{"static never holds forever", mk(NameStatic, NewOptions(StaticOptions{Batch: 4})), one(1000, 0, 1), Send(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Decide(tt.q); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name, policy string
		o            Options
		want         string
	}{
		{"unknown lists known", "nope", Options{}, "batchmonitor"},
		{"static needs a batch", NameStatic, Options{}, "batch size"},
		{"negative delay", NameMaxBatch, NewOptions(MaxBatchOptions{MaxQueueDelay: -1}), "max queue delay"},
		{"negative wait", NameBatchMonitor, NewOptions(BatchMonitorOptions{HoldOptions{MaxWait: -1}}), "max wait"},
		{"weights without latency", NameSMDP, NewOptions(SMDPOptions{W2: 1}), "w1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.policy, tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error %v, want it to mention %q", err, tt.want)
			}
		})
	}
	if _, err := New("nope", Options{}); !errors.Is(err, ErrUnknown) {
		t.Fatalf("unknown policy error %v does not wrap ErrUnknown", err)
	}
}

type testPolicy struct{}

func (testPolicy) Name() string         { return "test-registered" }
func (testPolicy) Plan(e Estimate) Rule { return Fill{Policy: "test-registered", Batch: 3} }

func TestRegisterOpen(t *testing.T) {
	Register("test-registered", func(o StaticOptions) (Policy, error) {
		if o.Batch > 4 {
			return nil, paramErr("batch", "at most 4, got %d", o.Batch)
		}
		return testPolicy{}, nil
	})
	p, err := New("test-registered", NewOptions(StaticOptions{Batch: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Plan(estimate(1)).Status().BatchSize; got != 3 {
		t.Fatalf("registered policy planned batch %d, want 3", got)
	}
	if _, err := New("test-registered", NewOptions(StaticOptions{Batch: 5})); err == nil || !strings.Contains(err.Error(), "at most 4") {
		t.Fatalf("bad parameter error %v", err)
	}
	if _, err := New("test-registered", NewOptions(StaticOptions{Batch: -1})); err == nil || !strings.Contains(err.Error(), "batch") {
		t.Fatalf("New does not validate the options before the factory: %v", err)
	}
	found := false
	for _, n := range Names() {
		found = found || n == "test-registered"
	}
	if !found {
		t.Fatalf("Names() = %v lacks the registered policy", Names())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("registering a name twice must panic")
		}
	}()
	Register(NameAdhoc, func(NoOptions) (Policy, error) { return Adhoc{}, nil })
}

func TestQueueHelpers(t *testing.T) {
	q := Queue{Now: at(5), Rows: 2, OldestArrival: at(2), InFlight: 1, Instances: 2}
	if !q.Free() || q.Waited() != 3*time.Millisecond {
		t.Fatalf("Free %v Waited %v", q.Free(), q.Waited())
	}
	if (Queue{Now: at(5)}).Waited() != 0 {
		t.Fatal("empty queue waited")
	}
	if err := (Estimate{Latency: batchcost.Latency{AlphaMs: 1}, MaxBatch: 1, Instances: 0}).Validate(); err == nil || !strings.Contains(err.Error(), "instances") {
		t.Fatalf("Validate: %v", err)
	}
}
