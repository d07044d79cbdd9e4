// Package procs sizes the Go scheduler to the CPU the process uses.
//
// The runtime keeps GOMAXPROCS processors (Ps). Whenever a goroutine becomes
// runnable while a P is idle, it wakes an OS thread to spin looking for work,
// and the thread goes back to sleep when it finds none. A proxy at light load
// makes goroutines runnable all the time (a request arrives, an upstream
// answer arrives, a batch is handed over) while it uses a small share of one
// core, so most of those wake-ups find nothing: on two cores at 2,000 req/s,
// sizing took 7 to 23% off the pass-through proxy's CPU per request and 22
// to 31% off the batching proxy's (docs/BENCHMARKS.md, "Go processors sized
// to the load"). A Sizer keeps as few Ps as the
// process's own CPU use calls for and adds them back as soon as it grows.
package procs

import (
	"context"
	"fmt"
	"math"
	"runtime"
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
	// Changed, when set, is told each change and the busy cores behind it.
	Changed func(from, to int, busy float64)
}

// Run sizes the Ps until ctx is done, then gives them back: to Max when Set
// is the caller's, or to the runtime's default (which it then keeps up to date
// again). It returns an error only when the CPU time cannot be read.
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
	cur, low := most, 0
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
			var n int
			n, low = next(cur, most, busy, low, calm)
			if n != cur {
				set(n)
				if s.Changed != nil {
					s.Changed(cur, n, busy)
				}
				cur = n
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
