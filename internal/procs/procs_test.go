package procs

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// calm is the rule's run of low intervals in these tests.
const calm = 4

func TestNext(t *testing.T) {
	tests := []struct {
		name           string
		cur, most, low int
		busy           float64
		want, wantLow  int
	}{
		{"idle at one stays", 1, 8, 0, 0, 1, 0},
		{"light load at one stays", 1, 8, 0, 0.3, 1, 0},
		{"one P past the up threshold gets a second", 1, 8, 0, 0.36, 2, 0},
		{"a load step is followed at once", 1, 8, 3, 2.0, 6, 0},
		{"never past most", 2, 4, 0, 3.5, 4, 0},
		{"in the band between the thresholds nothing moves", 2, 8, 2, 0.32, 2, 0},
		{"a low interval is counted", 2, 8, 1, 0.2, 2, 2},
		{"the calm-th low interval gives one back", 2, 8, calm - 1, 0.2, 1, 0},
		{"from many, straight to what the load needs", 8, 8, calm - 1, 0.5, 2, 0},
		{"one busy interval resets the count", 8, 8, calm - 1, 2.2, 8, 0},
		{"a negative reading counts as idle", 3, 8, calm - 1, -0.1, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, low := next(tt.cur, tt.most, tt.busy, tt.low, calm)
			if got != tt.want || low != tt.wantLow {
				t.Errorf("next(%d, %d, %v, %d) = %d, %d; want %d, %d", tt.cur, tt.most, tt.busy, tt.low, got, low, tt.want, tt.wantLow)
			}
		})
	}
}

// TestNextSettles runs the rule on a process whose CPU per request falls
// with fewer Ps (as measured: the spinning threads cost more CPU than the
// requests at light load) and checks that no steady load makes it flap.
func TestNextSettles(t *testing.T) {
	for _, demand := range []float64{0.05, 0.25, 0.31, 0.34, 0.5, 0.9, 1.5, 2.8} {
		cur, low, changes := 4, 0, 0
		for range 200 {
			busy := demand * (1 + 0.15*float64(min(cur, 2)-1)) // 15% dearer with a second P
			n, l := next(cur, 4, busy, low, calm)
			if n != cur {
				changes++
			}
			cur, low = n, l
		}
		if changes > 2 {
			t.Errorf("demand %v cores: %d changes in 200 intervals, want at most 2 (ended at %d)", demand, changes, cur)
		}
		if need := int(math.Ceil(demand / upBusy)); cur < min(need, 4) {
			t.Errorf("demand %v cores: settled at %d Ps, fewer than the %d its load needs", demand, cur, need)
		}
	}
}

// fakeCPU reports CPU time as if the process kept busy cores busy.
type fakeCPU struct {
	mu   sync.Mutex
	at   time.Time
	used time.Duration
	busy float64
	err  error
}

func (f *fakeCPU) set(busy float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	f.busy = busy
}

func (f *fakeCPU) advance() {
	now := time.Now()
	if !f.at.IsZero() {
		f.used += time.Duration(f.busy * float64(now.Sub(f.at)))
	}
	f.at = now
}

func (f *fakeCPU) read() (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.advance()
	return f.used, f.err
}

func TestRunFollowsTheLoadAndGivesBack(t *testing.T) {
	cpu := &fakeCPU{busy: 0.05}
	sets := make(chan int, 64)
	s := &Sizer{Max: 8, Interval: 5 * time.Millisecond, CPU: cpu.read, Set: func(n int) { sets <- n }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	waitFor := func(want int) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case n := <-sets:
				if n == want {
					return
				}
			case <-timeout:
				t.Fatalf("GOMAXPROCS never set to %d", want)
			}
		}
	}
	waitFor(1)   // idle: down to one P
	cpu.set(1.5) // a load step: ceil(1.5/0.35) Ps
	waitFor(5)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := <-sets; n != 8 {
		t.Errorf("on return Set(%d), want the Max, 8", n)
	}
}

func TestRunReportsAnUnreadableCPUTime(t *testing.T) {
	cpu := &fakeCPU{err: errors.New("no rusage")}
	var last atomic.Int64
	s := &Sizer{Max: 3, Interval: time.Millisecond, CPU: cpu.read, Set: func(n int) { last.Store(int64(n)) }}
	err := s.Run(context.Background())
	if err == nil || !errors.Is(err, cpu.err) {
		t.Fatalf("Run = %v, want an error wrapping %v", err, cpu.err)
	}
	if last.Load() != 3 {
		t.Errorf("Ps left at %d, want the Max, 3", last.Load())
	}
}

// TestRunSizesThisProcess uses the real CPU clock and runtime: an idle test
// process drops to one P, and the runtime's default comes back on return.
func TestRunSizesThisProcess(t *testing.T) {
	def := runtime.GOMAXPROCS(0)
	if def < 2 {
		t.Skipf("GOMAXPROCS is %d: nothing to take away", def)
	}
	changed := make(chan int, 16)
	s := &Sizer{Interval: 10 * time.Millisecond, Changed: func(_, to int, _ float64) { changed <- to }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for n := def; n != 1; {
		select {
		case n = <-changed:
		case <-deadline:
			t.Fatalf("an idle process still has %d Ps", runtime.GOMAXPROCS(0))
		}
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS = %d after the change to 1", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := runtime.GOMAXPROCS(0); got != def {
		t.Errorf("GOMAXPROCS = %d after Run, want the runtime's default %d back", got, def)
	}
}

// TestBackgroundKeepsAPFree: with the process sized down to one P, work in
// the background gets a P of its own at once, and the rule's count comes
// back at its release; each piece of work held counts; nothing is set
// with Max 1 or once Run has returned.
func TestBackgroundKeepsAPFree(t *testing.T) {
	tests := []struct {
		name      string
		max, held int
		want      int // the Ps while held (the rule's count is 1)
	}{
		{"one piece of work", 8, 1, 2},
		{"two at once", 8, 2, 3},
		{"never past Max", 2, 3, 2},
		{"one core: nothing to give", 1, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu := &fakeCPU{busy: 0.05}
			var mu sync.Mutex
			var sets []int
			last := func() int { mu.Lock(); defer mu.Unlock(); return sets[len(sets)-1] }
			s := &Sizer{Max: tt.max, Interval: time.Millisecond, CPU: cpu.read, Set: func(n int) {
				mu.Lock()
				sets = append(sets, n)
				mu.Unlock()
			}}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
				s.mu.Lock()
				down := s.running && s.sized == 1
				s.mu.Unlock()
				if down {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("an idle process was never sized to one P")
				}
			}
			var releases []func()
			for range tt.held {
				releases = append(releases, Background())
			}
			mu.Lock()
			n := len(sets)
			mu.Unlock()
			if tt.max > 1 && (n == 0 || last() != tt.want) {
				t.Fatalf("with %d held: Ps set to %v, want %d at once", tt.held, sets, tt.want)
			}
			for _, r := range releases {
				r()
				r() // a second release does nothing
			}
			if tt.max > 1 && last() != 1 {
				t.Errorf("after the releases: Ps set to %v, want the rule's 1 back", sets)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			mu.Lock()
			n = len(sets)
			mu.Unlock()
			Background()() // no Sizer running: nothing set
			mu.Lock()
			defer mu.Unlock()
			if len(sets) != n {
				t.Errorf("Background after Run returned set %v", sets[n:])
			}
		})
	}
}
