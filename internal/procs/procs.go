// Package procs sizes the Go scheduler to the CPU the process uses.
//
// The runtime keeps GOMAXPROCS processors (Ps). Whenever a goroutine becomes
// runnable while a P is idle, it wakes an OS thread to spin looking for work,
// and the thread goes back to sleep when it finds none. A proxy at light load
// makes goroutines runnable all the time (a request arrives, an upstream
// answer arrives, a batch is handed over) while it uses a small share of one
// core, so most of those wake-ups find nothing, and sizing the Ps to the
// load takes a share off the CPU per request of both the pass-through and
// the batching proxy (docs/ARCHITECTURE.md, "Principles"). A Sizer keeps as
// few Ps as the process's own CPU use calls for and adds them back as soon
// as it grows.
package procs

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The rule's constants. A P more than upBusy busy on average over an
// interval is one too few: the process gets ceil(busy/upBusy) Ps at once, so
// a load step is followed within one interval. Ps are taken away only when
// the CPU in use would keep one P fewer under downBusy each, for calmFor in
// a row; the gap between the two thresholds, and the fact that fewer Ps make
// the same load cheaper, keep the count from flapping.
const (
	upBusy   = 0.35
	downBusy = 0.30
	calmFor  = time.Second
)

// DefaultInterval is how often a Sizer samples the process's CPU time:
// short, so that a step from idle to a load one P cannot carry is followed
// before a queue builds (reading the CPU time is one system call).
const DefaultInterval = 50 * time.Millisecond

// Sizer adjusts GOMAXPROCS between 1 and Max from the process's CPU use.
// The zero value, with its defaults, sizes this process.
type Sizer struct {
	// Max is the most Ps (0: runtime.GOMAXPROCS(0) when Run starts, the
	// runtime's own default, which follows the CPU limit of the container).
	Max int
	// Interval is how often CPU use is sampled (0: DefaultInterval).
	Interval time.Duration
	// CPU returns the process's CPU time so far, user and system (nil:
	// CPUTime).
	CPU func() (time.Duration, error)
	// Set sets the count of Ps (nil: runtime.GOMAXPROCS).
	Set func(n int)
	// Changed, when set, is told each change the rule makes and the busy
	// cores behind it (not the Ps held for Background work).
	Changed func(from, to int, busy float64)

	mu      sync.Mutex // guards what follows, while Run runs
	running bool
	set     func(n int)
	most    int
	sized   int // the rule's count
	cur     int // the count set: sized, or more while work is held
	holds   int // Background work running
}

// active is the Sizer running in this process, if any: GOMAXPROCS is the
// process's, so work in the background asks the one that sizes it.
var active atomic.Pointer[Sizer]

// Background keeps a P free for the rest of the process while the caller
// runs CPU-bound work in the background, such as a policy's solve, and
// returns the call that ends it. Sized down to one P at light load, the
// process would otherwise run nothing else until the scheduler preempted
// the work, 10 ms or more later: live, a budget policy's solves held
// every arrival and every answer from the upstream that long
// (docs/LEARNING.md, "A solve keeps a processor free"). Until the
// release, the running Sizer keeps at
// least one P more than the work held (within its Max); the release
// gives the rule's count back at once. Without a running Sizer
// (GOMAXPROCS fixed, or one core) it does nothing.
func Background() (release func()) {
	s := active.Load()
	if s == nil {
		return func() {}
	}
	s.mu.Lock()
	s.holds++
	s.apply()
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.holds--
			s.apply()
			s.mu.Unlock()
		})
	}
}

// apply sets the count the rule and the work held call for; under s.mu.
func (s *Sizer) apply() {
	if !s.running {
		return
	}
	n := s.sized
	if s.holds > 0 {
		n = max(n, min(s.most, s.holds+1))
	}
	if n != s.cur {
		s.set(n)
		s.cur = n
	}
}

// Run sizes the Ps until ctx is done, then gives them back: to Max when Set
// is the caller's, or to the runtime's default (which it then keeps up to date
// again). It returns an error only when the CPU time cannot be read.
//
// It stays one function: one control loop, its state in local variables.
func (s *Sizer) Run(ctx context.Context) error {
	cpu, set := s.CPU, s.Set
	if cpu == nil {
		cpu = CPUTime
	}
	most := s.Max
	if most <= 0 {
		most = runtime.GOMAXPROCS(0)
	}
	if set == nil {
		set = func(n int) { runtime.GOMAXPROCS(n) }
		defer runtime.SetDefaultGOMAXPROCS()
	} else {
		defer set(most)
	}
	s.mu.Lock()
	s.running, s.set, s.most, s.sized, s.cur = true, set, most, most, most
	s.mu.Unlock()
	active.CompareAndSwap(nil, s)
	defer func() { // before the deferred restore above: no hold sets after it
		active.CompareAndSwap(s, nil)
		s.mu.Lock()
		s.running = false
		s.mu.Unlock()
	}()
	every := s.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	calm := max(1, int(calmFor/every))
	used, err := cpu()
	if err != nil {
		return fmt.Errorf("procs: reading the process's CPU time: %w", err)
	}
	at := time.Now() // read beside the CPU time, so both span the same interval
	low := 0
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			u, err := cpu()
			if err != nil {
				return fmt.Errorf("procs: reading the process's CPU time: %w", err)
			}
			now := time.Now()
			busy := (u - used).Seconds() / now.Sub(at).Seconds()
			used, at = u, now
			s.mu.Lock()
			from := s.sized
			s.sized, low = next(from, most, busy, low, calm)
			s.apply()
			to := s.sized
			s.mu.Unlock()
			if to != from && s.Changed != nil {
				s.Changed(from, to, busy)
			}
		}
	}
}

// next is the rule: given cur Ps (most at most), the busy cores used over
// the last interval, and low intervals in a row that wanted fewer, it returns
// the count for the next interval and the new run of low intervals; calm
// low intervals in a row take Ps away.
func next(cur, most int, busy float64, low, calm int) (int, int) {
	want := min(most, max(1, int(math.Ceil(busy/upBusy))))
	if want > cur {
		return want, 0
	}
	if cur > 1 && busy < downBusy*float64(cur-1) {
		if low+1 >= calm {
			return min(want, cur-1), 0
		}
		return cur, low + 1
	}
	return cur, 0
}
