package policy

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestChooseBatchFor(t *testing.T) {
	mu := func(b int) float64 { return 1000 * float64(b) / (0.3051*float64(b) + 1.052) } // per s
	tests := []struct {
		name string
		rate float64
		from int
		util float64
		want int
	}{
		{"from 1 at light load sends singles", 10, 1, 1, 1},
		{"from 2 at light load holds for a pair", 10, 2, 1, 2},
		{"from 0 acts as 1", 10, 0, 1, 1},
		{"just under mu(1)", mu(1) - 1e-6, 1, 1, 1},
		// 0.9 mu(5) / 0.8 = 2182.3 per s: mu(6) = 2081.5 falls short, mu(7) = 2195.9 covers it.
		{"util 0.8 needs headroom", 0.9 * mu(5), 1, 0.8, 7},
		{"util 0.8 near saturation gives B_max", 0.85 * mu(32), 1, 0.8, 32},
		// mu(2) = 1203.2 < 1234 < mu(3) = 1524.9 per s.
		{"util 1 from 2 is Algorithm 1", 1234, 2, 1, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ChooseBatchFor(tt.rate, googlenet, tt.from, 32, tt.util); got != tt.want {
				t.Fatalf("ChooseBatchFor = %d, want %d", got, tt.want)
			}
		})
	}
	// Property: the answer covers the rate at the target utilisation and
	// the size below it does not.
	for rate := 0.0; rate < 3000; rate += 11.7 {
		for _, u := range []float64{0.6, 0.8, 1} {
			b := ChooseBatchFor(rate, googlenet, 1, 32, u)
			if b < 32 && !(rate < u*mu(b)) {
				t.Fatalf("rate %v util %v: b=%d does not cover it", rate, u, b)
			}
			if b > 1 && rate < u*mu(b-1) {
				t.Fatalf("rate %v util %v: b=%d but %d covers it", rate, u, b, b-1)
			}
		}
	}
}

func TestLimitDecide(t *testing.T) {
	rule := Limit{Policy: "x", Limit: 4, MaxWait: 2 * time.Millisecond}
	q := func(now float64, rows int, oldest float64, inFlight int) Queue {
		qq := Queue{Now: at(now), Rows: rows, InFlight: inFlight, Instances: 1, MaxBatch: 8}
		if rows > 0 {
			qq.OldestArrival = at(oldest)
		}
		return qq
	}
	tests := []struct {
		name string
		rule Limit
		q    Queue
		want Decision
	}{
		{"empty queue waits", rule, q(10, 0, 0, 0), Wait()},
		{"limit reached sends it", rule, q(10, 4, 10, 0), Send(4)},
		{"a longer queue is drained, not sliced", rule, q(10, 6, 9, 0), Send(6)},
		{"drain stops at B_max", rule, q(10, 30, 0, 0), Send(8)},
		{"busy instance waits for the completion", rule, q(10, 30, 0, 1), Wait()},
		{"below the limit waits for the bound", rule, q(10, 2, 9, 0), WaitUntil(at(11))},
		{"below the limit goes at the bound", rule, q(11, 2, 9, 0), Send(2)},
		{"limit 1 is work-conserving", Limit{Limit: 1}, q(10, 1, 10, 0), Send(1)},
		{"limit 0 is work-conserving", Limit{}, q(10, 3, 10, 0), Send(3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Decide(tt.q); got != tt.want {
				t.Fatalf("Decide = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBatchMonitorPlusPlan(t *testing.T) {
	tau := func(b int) time.Duration { return estimate(0).TauDuration(b) }
	half := func(b int) time.Duration { return time.Duration(DefaultWaitShare * float64(tau(b))) }
	rate := 2000.0
	tests := []struct {
		name     string
		p        BatchMonitorPlus
		e        Estimate
		wantRule string
		wantB    int
		wantWait time.Duration
	}{
		{"defaults before the first window", NewBatchMonitorPlus(), Estimate{Now: t0, Latency: googlenet, MaxBatch: 32, Instances: 1}, "Limit", 1, 0},
		{"defaults at light load never hold", NewBatchMonitorPlus(), estimate(10), "Limit", 1, half(1)},
		{"defaults under load use Algorithm 1's size as a limit", NewBatchMonitorPlus(), estimate(rate), "Limit",
			batchAt2000, half(batchAt2000)},
		{"without drain it is a fixed size", BatchMonitorPlus{Util: 1, From: 2}, estimate(10), "Fill", 2, half(2)},
		{"explicit wait", BatchMonitorPlus{Util: 1, From: 2, Drain: true, MaxWait: time.Millisecond}, estimate(10), "Limit", 2, time.Millisecond},
		{"util out of range acts as 1", BatchMonitorPlus{Util: 7, From: 2, Drain: true}, estimate(rate), "Limit",
			batchAt2000, half(batchAt2000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.p.Plan(tt.e)
			switch r.(type) {
			case Limit:
				if tt.wantRule != "Limit" {
					t.Fatalf("rule %T, want %s", r, tt.wantRule)
				}
			case Fill:
				if tt.wantRule != "Fill" {
					t.Fatalf("rule %T, want %s", r, tt.wantRule)
				}
			default:
				t.Fatalf("rule %T", r)
			}
			st := r.Status()
			if st.Policy != NameBatchMonitorPlus || st.BatchSize != tt.wantB || st.MaxWait != tt.wantWait {
				t.Fatalf("Status = %+v, want batch %d wait %v", st, tt.wantB, tt.wantWait)
			}
		})
	}
	bad := estimate(10)
	bad.AlphaMs = 0
	if st := NewBatchMonitorPlus().Plan(bad).Status(); !strings.Contains(st.Note, "alpha") {
		t.Fatalf("bad estimate: note %q should name alpha", st.Note)
	}
}

func TestExplorerSendsOneRowInEvery(t *testing.T) {
	x := &Explorer{Every: 4}
	rule := Limit{Policy: "x", Limit: 1, Explore: x}
	q := Queue{Now: at(10), Rows: 8, OldestArrival: at(9), Instances: 1, MaxBatch: 8}
	var sizes []int
	for range 8 {
		sizes = append(sizes, rule.Decide(q).Rows)
	}
	if want := []int{8, 8, 8, 1, 8, 8, 8, 1}; !slices.Equal(sizes, want) {
		t.Fatalf("sizes %v, want %v", sizes, want)
	}
	// Small batches, and rows with deadlines, are never split.
	small := q
	small.Rows = 3
	withDeadline := q
	withDeadline.EarliestDeadline = at(20)
	for range 8 {
		if n := rule.Decide(small).Rows; n != 3 {
			t.Fatalf("a batch of 3 was cut to %d", n)
		}
		if n := rule.Decide(withDeadline).Rows; n != 8 {
			t.Fatalf("rows with a deadline: batch cut to %d", n)
		}
	}
	// A doubting estimate gets an exploring rule, a trusted one none.
	p := NewBatchMonitorPlus()
	if l := p.Plan(doubted(estimate(2000))).(Limit); l.Explore == nil {
		t.Fatal("doubting rule does not explore")
	}
	if l := p.Plan(estimate(2000)).(Limit); l.Explore != nil {
		t.Fatal("trusted rule explores")
	}
}
