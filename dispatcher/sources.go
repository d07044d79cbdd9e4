package dispatcher

import (
	"slices"
	"time"
)

// SourceIdleFor is how long a source (a caller's connection) counts as a
// possible partner after its last answer: a closed-loop client sends its
// next request a think time after the answer, and one that has not sent
// for a second is taken to have gone.
const SourceIdleFor = time.Second

// sources counts a model queue's callers by connection, so that a decision
// knows how many callers could still send a request while a batch waits:
// an HTTP/1.1 connection with a call in the proxy cannot send another, so
// when every recently active connection has its call waiting or in flight,
// no partner can come from them, and holding the batch for one only costs
// its latency (a lone synchronous client would wait for itself). Guarded
// by the queue's mutex.
type sources struct {
	by      map[uint64]*source
	busy    int       // sources with a call in the proxy
	unknown time.Time // the last call without a source (gRPC): partners unknown until SourceIdleFor after it
	pruned  time.Time
}

type source struct {
	calls int       // calls of the source in the proxy
	free  time.Time // when its last call was answered
}

// arrive counts a call of source id (0: unknown).
func (s *sources) arrive(id uint64, now time.Time) {
	if id == 0 {
		s.unknown = now
		return
	}
	if s.by == nil {
		s.by = map[uint64]*source{}
	}
	src := s.by[id]
	if src == nil {
		src = &source{}
		s.by[id] = src
	}
	if src.calls == 0 {
		s.busy++
	}
	src.calls++
}

// leave uncounts a call of source id: answered, withdrawn or expired.
func (s *sources) leave(id uint64, now time.Time) {
	src := s.by[id]
	if id == 0 || src == nil || src.calls == 0 {
		return
	}
	src.calls--
	if src.calls == 0 {
		s.busy--
		src.free = now
	}
}

// idle returns how many known sources are idle and recent enough to send
// again, and whether that count says anything: not when a call without a
// source came within SourceIdleFor, nor before any call came.
func (s *sources) idle(now time.Time) (n int, known bool) {
	if len(s.by) == 0 || now.Sub(s.unknown) < SourceIdleFor {
		return 0, false
	}
	if now.Sub(s.pruned) > SourceIdleFor/4 {
		s.pruned = now
		for id, src := range s.by {
			if src.calls == 0 && now.Sub(src.free) > SourceIdleFor {
				delete(s.by, id)
			}
		}
	}
	return len(s.by) - s.busy, true
}

// freeSources marks the sources of a batch's calls free: their answers
// are about to be delivered. Calls without a source (gRPC) need no lock.
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
