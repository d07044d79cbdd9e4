package membudget

import (
	"math/bits"
	"sync"
	"time"
)

// The budget keeps the buffers of large bodies for reuse. Without it each
// large body is a fresh allocation (a 60 MB image batch, 60 MB of new
// memory per request), and with the runtime's soft limit at the budget
// (LimitRuntime) a budget spent on such bodies keeps the collector running
// nearly all the time, which every request pays for in latency. A pooled
// buffer is counted in the budget while it lies idle, so the resident set
// stays within the same bound: its bytes pass from the request that used
// it to the pool and from the pool to the next request of its size class
// without leaving the budget. When a request needs room that idle buffers
// take, they are dropped for it (the collector takes them back), so idle
// buffers never refuse a request the budget would admit without them; and
// a buffer idle for IdleFor is dropped, so that a burst's memory goes back
// to the system once the burst is over.

// MinClass is the smallest size class; smaller bodies are not pooled here
// (the proxy keeps those in a sync.Pool of its own).
const MinClass = 1 << 20

// classSteps is the number of size classes per doubling: a buffer is at
// most 1/classSteps larger than the body it was taken for.
const classSteps = 8

// Leases, the large bodies, may hold the budget only up to its limit less
// a share of 1/SmallShare: the rest stays for small requests, which would
// otherwise be refused whenever a few large bodies, rounded up to their
// size classes, fill the budget to its last byte. (A 512 MiB budget keeps
// 32 MiB for them, and admits eight 60 MiB bodies.)
const SmallShare = 16

// IdleFor is how long an idle buffer is kept.
const IdleFor = 30 * time.Second

// Class is the size class of a buffer for n bytes: the smallest class of
// at least n bytes. Classes are MinClass, then classSteps steps per
// doubling (1 MiB, ..., 32 MiB, 36 MiB, 40 MiB, ..., 60 MiB, 64 MiB, ...).
func Class(n int64) int64 {
	if n <= MinClass {
		return MinClass
	}
	k := bits.Len64(uint64(n-1)) - 1 // 2^k < n <= 2^(k+1)
	base := int64(1) << k
	step := base / classSteps
	return base + (n-base+step-1)/step*step
}

// pool is the budget's idle buffers by size class.
type pool struct {
	mu    sync.Mutex
	idle  map[int64][]idleBuf
	bytes int64 // the idle buffers' capacity, counted in the budget's used
	trim  *time.Timer
	now   func() time.Time
	after func(time.Duration, func()) *time.Timer
}

type idleBuf struct {
	b     []byte
	since time.Time
}

// Lease is room in the budget for one large body: N bytes counted, and
// a buffer of capacity N to read it into when the pool had one (nil: make
// one of capacity N when needed).
type Lease struct {
	N   int64
	Buf []byte
}

// Lease takes room for a body of n bytes, rounded up to its size class:
// an idle buffer of that class if the pool has one (its bytes are already
// counted: they pass to the lease), else room in the budget below its
// small requests' share (SmallShare), dropping idle buffers of other
// classes to make it if need be. false: no room.
// A nil budget leases nothing and always has room.
func (b *Budget) Lease(n int64) (Lease, bool) {
	if b == nil {
		return Lease{}, true
	}
	c := Class(n)
	p := &b.pool
	p.mu.Lock()
	if l := p.idle[c]; len(l) > 0 {
		buf := l[len(l)-1].b
		l[len(l)-1] = idleBuf{}
		p.idle[c] = l[:len(l)-1]
		p.bytes -= c
		p.mu.Unlock()
		return Lease{N: c, Buf: buf[:0]}, true
	}
	p.mu.Unlock()
	if !b.acquireUpTo(c, b.limit-b.limit/SmallShare) {
		return Lease{}, false
	}
	return Lease{N: c}, true
}

// Claim hands an idle buffer of the size class to a lease made without
// one, or returns nil when the pool has none. The lease took its room at
// the body's headers, when the pool may have been empty; a buffer given
// back since (a large body answered while this one waited for its turn)
// is read into instead of new memory: a fresh 60 MB buffer costs tens of
// milliseconds of page faults and zeroing, and the collector's work to
// take it back. The buffer's bytes leave the pool and the budget: the
// lease already counts them.
func (b *Budget) Claim(class int64) []byte {
	if b == nil {
		return nil
	}
	p := &b.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.idle[class]
	if len(l) == 0 {
		return nil
	}
	buf := l[len(l)-1].b
	l[len(l)-1] = idleBuf{}
	p.idle[class] = l[:len(l)-1]
	p.bytes -= class
	b.used.Add(-class)
	return buf[:0]
}

// Keep gives a body's buffer to the pool, with its bytes out of h: they
// stay counted in the budget, as the pool's, until a lease takes the
// buffer or it is dropped. A buffer whose capacity is not a size class,
// or that h does not hold, is left to the collector. Nothing may refer to
// buf afterwards.
func (h *Hold) Keep(buf []byte) {
	c := int64(cap(buf))
	if h.B == nil || c < MinClass || Class(c) != c || h.held < c {
		return
	}
	b := h.B
	p := &b.pool
	now := p.clock()
	p.mu.Lock()
	if p.idle == nil {
		p.idle = map[int64][]idleBuf{}
	}
	p.idle[c] = append(p.idle[c], idleBuf{b: buf[:0], since: now})
	p.bytes += c
	h.held -= c
	if p.trim == nil {
		p.trim = p.schedule(IdleFor, func() { b.trimIdle() })
	}
	p.mu.Unlock()
}

// Pooled is the bytes of idle buffers the budget keeps (part of Used).
func (b *Budget) Pooled() int64 {
	if b == nil {
		return 0
	}
	b.pool.mu.Lock()
	defer b.pool.mu.Unlock()
	return b.pool.bytes
}

// reclaim drops idle buffers until need more bytes would keep the bytes
// used within upTo, or none is left; it reports whether it dropped any.
func (b *Budget) reclaim(need, upTo int64) bool {
	p := &b.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	dropped := false
	for c, l := range p.idle {
		for len(l) > 0 && b.used.Load()+need > upTo {
			l[0] = idleBuf{}
			l = l[1:]
			p.bytes -= c
			b.used.Add(-c)
			dropped = true
		}
		if len(l) == 0 {
			delete(p.idle, c)
		} else {
			p.idle[c] = l
		}
		if b.used.Load()+need <= upTo {
			break
		}
	}
	return dropped
}

// trimIdle drops the buffers idle for IdleFor and runs again while some
// are left.
func (b *Budget) trimIdle() {
	p := &b.pool
	now := p.clock()
	p.mu.Lock()
	defer p.mu.Unlock()
	next := time.Duration(0)
	for c, l := range p.idle {
		i := 0
		for i < len(l) && now.Sub(l[i].since) >= IdleFor {
			l[i] = idleBuf{}
			p.bytes -= c
			b.used.Add(-c)
			i++
		}
		l = l[i:]
		if len(l) == 0 {
			delete(p.idle, c)
			continue
		}
		p.idle[c] = l
		if wait := IdleFor - now.Sub(l[0].since); next == 0 || wait < next {
			next = wait
		}
	}
	p.trim = nil
	if next > 0 {
		p.trim = p.schedule(next, func() { b.trimIdle() })
	}
}

func (p *pool) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

func (p *pool) schedule(d time.Duration, f func()) *time.Timer {
	if p.after != nil {
		return p.after(d, f)
	}
	return time.AfterFunc(d, f)
}

// DropIdle drops every idle buffer now, giving its bytes back to the
// budget and its memory to the collector (a benchmark's clean slate; a
// process that wants its memory back at once).
func (b *Budget) DropIdle() {
	if b != nil {
		b.reclaim(1, 0)
	}
}
