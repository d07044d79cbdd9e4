package dispatcher

import "time"

// fifo is a queue of calls that reuses its backing array.
type fifo struct {
	calls []*Call
	head  int
}

func (f *fifo) push(c *Call) { f.calls = append(f.calls, c) }

func (f *fifo) len() int { return len(f.calls) - f.head }

func (f *fifo) peek() *Call { return f.calls[f.head] }

func (f *fifo) pop() *Call {
	c := f.calls[f.head]
	f.calls[f.head] = nil
	f.head++
	if f.head == len(f.calls) {
		f.calls, f.head = f.calls[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.calls) {
		n := copy(f.calls, f.calls[f.head:])
		clear(f.calls[n:])
		f.calls, f.head = f.calls[:n], 0
	}
	return c
}

// keyQueue holds the waiting calls of one batch key, by priority level and
// FIFO within a level. Cancelled calls stay until they reach a head.
type keyQueue struct {
	key    string
	levels []level // sorted by level, ascending
	// spare is the array of the last level emptied, for the next new
	// level to reuse.
	spare     []*Call
	rows      int // rows of live (queued) calls
	deadlines int // live calls with their own Deadline
	expiring  int // live calls with an Expire
}

type level struct {
	n uint64
	q fifo
}

// level is the priority level of the key's first waiting calls (the
// largest level when none waits).
func (k *keyQueue) level() uint64 {
	if len(k.levels) == 0 {
		return ^uint64(0)
	}
	return k.levels[0].n
}

func (k *keyQueue) push(c *Call) {
	i := 0
	for i < len(k.levels) && k.levels[i].n < c.level {
		i++
	}
	if i == len(k.levels) || k.levels[i].n != c.level {
		k.levels = append(k.levels, level{})
		copy(k.levels[i+1:], k.levels[i:])
		k.levels[i] = level{n: c.level, q: fifo{calls: k.spare}}
		k.spare = nil
	}
	c.state.Store(stateQueued)
	k.levels[i].q.push(c)
	k.account(c, 1)
}

func (k *keyQueue) account(c *Call, sign int) {
	k.rows += sign * c.Rows
	if !c.Deadline.IsZero() {
		k.deadlines += sign
	}
	if !c.Expire.IsZero() {
		k.expiring += sign
	}
}

// head returns the first live call, dropping cancelled ones on the way.
func (k *keyQueue) head() *Call {
	for i := 0; i < len(k.levels); {
		q := &k.levels[i].q
		for q.len() > 0 && q.peek().state.Load() == stateCancelled {
			q.pop()
		}
		if q.len() > 0 {
			return q.peek()
		}
		k.spare = q.calls[:0] // emptied by pop, which keeps the array
		k.levels = append(k.levels[:i], k.levels[i+1:]...)
	}
	return nil
}

// take pops live calls in order while their rows fit in limit; it always
// takes the first one, so a caller larger than the rule's batch still goes.
func (k *keyQueue) take(limit int, dst []*Call) ([]*Call, int) {
	rows := 0
	for {
		c := k.head()
		if c == nil || (rows > 0 && rows+c.Rows > limit) {
			return dst, rows
		}
		k.levels[0].q.pop()
		if !c.state.CompareAndSwap(stateQueued, stateTaken) {
			continue // cancelled between head and here
		}
		k.account(c, -1)
		rows += c.Rows
		dst = append(dst, c)
	}
}

// cancel removes a live call's rows from the counts; the call itself leaves
// the queue when it reaches a head.
func (k *keyQueue) cancel(c *Call) { k.account(c, -1) }

// each visits every live call.
func (k *keyQueue) each(fn func(*Call)) {
	for i := range k.levels {
		q := &k.levels[i].q
		for _, c := range q.calls[q.head:] {
			if c.state.Load() == stateQueued {
				fn(c)
			}
		}
	}
}

// earliestDeadline is the earliest latency target among live calls.
func (k *keyQueue) earliestDeadline(head *Call) time.Time {
	if k.deadlines == 0 {
		return time.Time{}
	}
	if k.deadlines == 1 && !head.Deadline.IsZero() {
		return head.Deadline
	}
	var min time.Time
	k.each(func(c *Call) {
		if !c.Deadline.IsZero() && (min.IsZero() || c.Deadline.Before(min)) {
			min = c.Deadline
		}
	})
	return min
}
