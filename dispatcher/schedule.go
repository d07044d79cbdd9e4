package dispatcher

import (
	"math"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
)

// QueuePolicy is Triton's queue policy of a model (the priority levels and
// queue policies of its dynamic_batching section), which the proxy's queue
// applies to each call as Triton's queue would: the level a call's
// priority gives it, and when a call still waiting times out. The zero
// value is Triton's for a model without the section: one level, no
// timeout, a call's own timeout ignored.
type QueuePolicy struct {
	// Levels is priority_levels: a call's priority names its level when
	// it is 1..Levels (1 goes first); 0: one level for every call.
	Levels uint64
	// DefaultLevel is default_priority_level: the level of a call whose
	// priority is 0 or above Levels.
	DefaultLevel uint64
	// Default rules the levels ByLevel does not name.
	Default Timeouts
	ByLevel map[uint64]Timeouts
}

// Timeouts is one level's queue policy (Triton's ModelQueuePolicy).
type Timeouts struct {
	// Default is default_timeout_microseconds: how long a call may wait
	// in the queue; 0: for ever.
	Default time.Duration
	// AllowOverride is allow_timeout_override: a call's timeout
	// parameter is its own when it is shorter than Default (and not 0).
	AllowOverride bool
	// Delay is timeout_action DELAY: a call past its timeout is not
	// refused but goes after those that are not (which Triton's own queue
	// does with the timeout the proxy forwards); otherwise it is refused
	// with Triton's 503 "Request timeout expired".
	Delay bool
}

// level is the priority level Triton gives a call of priority p
// (InferenceRequest::SetPriority): p itself when it names one of the
// model's levels, else the default level.
func (p *QueuePolicy) level(priority uint64) uint64 {
	if priority == 0 || priority > p.Levels {
		return p.DefaultLevel
	}
	return priority
}

func (p *QueuePolicy) timeouts(level uint64) Timeouts {
	if t, ok := p.ByLevel[level]; ok {
		return t
	}
	return p.Default
}

// deadline is when a call with the timeout parameter timeout (0: none),
// waiting since from, times out, as Triton's queue decides it
// (PriorityQueue::PolicyQueue::Enqueue): the level's default timeout, or
// the call's own when the level lets it override and it is shorter and
// not 0. A default of 0 is no timeout, and then a call's own is ignored
// too, as Triton ignores it. own reports that the call's own timeout is
// the one: what is left of it is what the proxy forwards (forwardTimeout).
func (t Timeouts) deadline(timeout time.Duration, from time.Time) (at time.Time, own bool) {
	d := t.Default
	if t.AllowOverride && timeout != 0 && timeout < d {
		d, own = timeout, true
	}
	if d == 0 {
		return time.Time{}, false
	}
	return from.Add(d), own
}

// schedule gives a call what its model's queue policy says of it: its
// level, when it is refused if still queued (Expire; zero: never, also
// when the level delays calls past their timeout), and when its own
// timeout ends (timeoutAt; zero unless Triton honours the call's own
// timeout). Called with q.mu held, at enqueue.
//
// The timeout counts from now, the call's entering the queue, not from its
// arrival at the door (Call.Received): Triton starts it when the request
// enters its scheduler's queue (PolicyQueue::Enqueue), after the body is
// in and parsed, so a body uploaded slower than the timeout is answered.
func (q *modelQueue) schedule(c *Call, now time.Time) {
	p := &q.spec.Queue
	c.level = p.level(c.Priority)
	t := p.timeouts(c.level)
	at, own := t.deadline(c.Timeout, now)
	c.Expire, c.timeoutAt = time.Time{}, time.Time{}
	if !t.Delay {
		c.Expire = at
	}
	if own {
		c.timeoutAt = at
	}
}

// forwardTimeout puts in the request of each call whose own timeout
// Triton honours what is left of it as the batch leaves (at least 1 µs:
// a call delayed past it is past it at Triton too), so that the time
// spent in the proxy's queue counts against it as it would in Triton's,
// and a merged batch carries its members' smallest (kserve.Merge). Such a
// call is sent re-encoded, not as it came: its body carries the timeout
// as the caller sent it. Called with q.mu held.
func forwardTimeout(calls []*Call, now time.Time) {
	for _, c := range calls {
		if c.timeoutAt.IsZero() {
			continue
		}
		left := c.timeoutAt.Sub(now)
		us := max((left+time.Microsecond-1)/time.Microsecond, 1)
		c.Req.Parameters = c.Req.Parameters.Clone()
		if c.Req.Parameters == nil {
			c.Req.Parameters = kserve.Parameters{}
		}
		c.Req.Parameters[kserve.ParamTimeout] = int64(us)
		c.Wire = Wire{}
	}
}

// microseconds is a timeout parameter of us microseconds as a duration,
// the longest a duration holds when it is longer: 2^63-1 µs must not wrap
// to a negative duration, a timeout already past.
func microseconds(us uint64) time.Duration {
	if us > math.MaxInt64/uint64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// byLevel orders a model's key queues for a decision pass: the highest
// priority (the smallest level) first, so that a level's batches take the
// free instances before a lower level's, as Triton's queue serves its
// levels. A model with one level keeps the map's order. scratch is the
// queue's own slice, reused.
func (q *modelQueue) byLevel(scratch []*keyQueue) []*keyQueue {
	scratch = scratch[:0]
	for _, k := range q.keys {
		scratch = append(scratch, k)
	}
	if q.spec.Queue.Levels > 0 && len(scratch) > 1 {
		slices.SortFunc(scratch, func(a, b *keyQueue) int {
			la, lb := a.level(), b.level()
			switch {
			case la < lb:
				return -1
			case la > lb:
				return 1
			}
			return 0
		})
	}
	return scratch
}
