package whatif

import (
	"sync/atomic"
	"time"
)

// ring keeps the last len(slots) events of one kind, each packed into one
// word, without a lock: a writer claims a slot with one atomic add and
// fills it with one atomic store, so that recording on the request path
// costs two atomic operations. A reader may see a slot a writer has
// claimed but not filled yet (it then holds the event len(slots) before,
// or nothing); the events it reads are the writers' own, never torn.
type ring struct {
	next  atomic.Uint64
	slots []atomic.Uint64
}

func newRing(n int) *ring { return &ring{slots: make([]atomic.Uint64, n)} }

func (r *ring) put(v uint64) {
	i := r.next.Add(1) - 1
	r.slots[i%uint64(len(r.slots))].Store(v)
}

// each calls f with every word kept (0 for a slot never filled is
// skipped), oldest first as far as the writers' order goes.
func (r *ring) each(f func(v uint64)) {
	n := uint64(len(r.slots))
	end := r.next.Load()
	start := uint64(0)
	if end > n {
		start = end - n
	}
	for i := start; i < end; i++ {
		if v := r.slots[i%n].Load(); v != 0 {
			f(v)
		}
	}
}

// A packed word holds a time in microseconds since the recorder's epoch
// in its high timeBits bits (an offset of 2^44 us, 203 days, wraps: read
// back against the present, a word is taken for the latest such time not
// after it, which a ring far shorter than that makes right), and 20 bits
// of payload below.
const (
	timeBits    = 44
	payloadBits = 64 - timeBits
	timeMask    = 1<<timeBits - 1
	payloadMask = 1<<payloadBits - 1
)

// clock converts between times and the packed words' microseconds.
type clock struct{ epoch time.Time }

func (c clock) pack(t time.Time, payload uint64) uint64 {
	us := uint64(t.Sub(c.epoch)/time.Microsecond) & timeMask
	return us<<payloadBits | payload&payloadMask
}

// unpack returns the time of word v as of now, and its payload.
func (c clock) unpack(v uint64, now time.Time) (time.Time, uint64) {
	nowUs := uint64(now.Sub(c.epoch)/time.Microsecond) & timeMask
	age := (nowUs - v>>payloadBits) & timeMask
	return now.Add(-time.Duration(age) * time.Microsecond), v & payloadMask
}

// An arrival's payload: its rows less one (16 bits, at most 65,536 rows,
// more counted as that many) and its caller's kind (4 bits).
func arrivalPayload(rows int, kind uint8) uint64 {
	r := uint64(min(max(rows, 1), 1<<16) - 1)
	return r<<4 | uint64(kind&0xf)
}

func arrivalOf(p uint64) (rows int, kind uint8) { return int(p>>4) + 1, uint8(p & 0xf) }

// An answer's payload: the call's latency, to the microsecond below
// latencyCoarse and to the millisecond from there up to about 9 minutes
// (longer ones are counted as that long); its top bit says which.
const (
	latencyFine   = 1 << (payloadBits - 1)
	latencyCoarse = latencyFine * time.Microsecond
)

func latencyPayload(d time.Duration) uint64 {
	if d < latencyCoarse {
		return uint64(max(d, 0) / time.Microsecond)
	}
	return latencyFine | min(uint64(d/time.Millisecond), latencyFine-1)
}

func latencyOf(p uint64) time.Duration {
	if p&latencyFine == 0 {
		return time.Duration(p) * time.Microsecond
	}
	return time.Duration(p&^latencyFine) * time.Millisecond
}

// An answer's wait after its batch: whether its batch was merged (one
// bit), and the wait to the microsecond (19 bits: up to half a second,
// longer counted as that long).
const afterMax = 1<<(payloadBits-1) - 1

func afterPayload(d time.Duration, calls int) uint64 {
	us := uint64(min(max(d, 0)/time.Microsecond, afterMax))
	if calls > 1 {
		us |= 1 << (payloadBits - 1)
	}
	return us
}

func afterOf(p uint64) (d time.Duration, merged bool) {
	return time.Duration(p&afterMax) * time.Microsecond, p>>(payloadBits-1)&1 == 1
}
