package membudget

import (
	"sync"
	"testing"
	"time"
)

func TestClass(t *testing.T) {
	const M = 1 << 20
	for _, c := range []struct{ n, want int64 }{
		{1, M}, {M, M}, {M + 1, M + M/8}, {2 * M, 2 * M}, {2*M + 1, 2*M + M/4},
		{32 * M, 32 * M}, {32*M + 1, 36 * M},
		{60211200 + 1000, 60 * M}, // the 100-row image request of scripts/memload.sh
		{60*M + 1, 64 * M}, {64 * M, 64 * M},
	} {
		got := Class(c.n)
		if got != c.want {
			t.Errorf("Class(%d) = %d, want %d", c.n, got, c.want)
		}
		if Class(got) != got || got < c.n || (c.n > M && got-c.n >= got/classSteps+1) {
			t.Errorf("Class(%d) = %d: not a fixed point, too small or too wasteful", c.n, got)
		}
	}
}

// fakeTimers stands in for time.AfterFunc: the test fires them.
type fakeTimers struct {
	mu  sync.Mutex
	now time.Time
	fns []func()
}

func (f *fakeTimers) install(b *Budget) {
	b.pool.now = func() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.now }
	b.pool.after = func(d time.Duration, fn func()) *time.Timer {
		f.mu.Lock()
		f.fns = append(f.fns, fn)
		f.mu.Unlock()
		return nil
	}
}

// advance moves the clock and fires the timers scheduled so far.
func (f *fakeTimers) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	fns := f.fns
	f.fns = nil
	f.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// A large body's buffer goes back to the pool with its bytes still
// counted, and the next lease of its class takes it without new room; a
// lease of another class drops idle buffers when it needs their room; a
// buffer idle for IdleFor is dropped.
func TestLeaseKeepReclaimTrim(t *testing.T) {
	const M = 1 << 20
	b := New(10 * M)
	ft := &fakeTimers{now: time.Unix(0, 0)}
	ft.install(b)

	l, ok := b.Lease(3*M + 5) // class 3.25 MiB
	if !ok || l.N != 3*M+M/4 || l.Buf != nil || b.Used() != l.N {
		t.Fatalf("first lease %d %v (buf %v), used %d", l.N, ok, l.Buf != nil, b.Used())
	}
	h := Hold{B: b}
	h.Adopt(l.N)
	buf := make([]byte, 0, l.N)
	buf = append(buf, 42)
	h.Force(1000) // its answer
	h.Keep(buf)
	h.Release()
	if b.Used() != l.N || b.Pooled() != l.N {
		t.Fatalf("after keeping: used %d pooled %d, want both %d", b.Used(), b.Pooled(), l.N)
	}

	// The same class again: the kept buffer, no new room taken.
	l2, ok := b.Lease(3*M + 100)
	if !ok || cap(l2.Buf) != int(l.N) || len(l2.Buf) != 0 || b.Used() != l.N || b.Pooled() != 0 {
		t.Fatalf("second lease: ok %v cap %d len %d, used %d pooled %d", ok, cap(l2.Buf), len(l2.Buf), b.Used(), b.Pooled())
	}
	if &l2.Buf[:1][0] != &buf[0] {
		t.Fatal("the second lease got a new buffer, not the kept one")
	}
	h2 := Hold{B: b}
	h2.Adopt(l2.N)
	h2.Keep(l2.Buf)
	h2.Release()

	// Another class that needs the idle buffer's room gets it.
	l3, ok := b.Lease(8 * M)
	if !ok || l3.Buf != nil || b.Pooled() != 0 || b.Used() != 8*M {
		t.Fatalf("lease needing the idle room: ok %v, used %d pooled %d", ok, b.Used(), b.Pooled())
	}
	// Nothing idle left to drop: no room.
	if _, ok := b.Lease(3 * M); ok {
		t.Fatal("leased 3 MiB with 2 MiB left")
	}
	// The small requests' share: 1.5 MiB more fits the budget (9.5 of
	// 10) but not a lease (limit less 1/16: 9.375).
	if _, ok := b.Lease(3 * M / 2); ok {
		t.Fatal("a lease took the small requests' share")
	}
	if !b.Acquire(3 * M / 2) {
		t.Fatal("a small request refused its share")
	}
	b.Release(3 * M / 2)
	b.Release(l3.N)

	// A buffer that is not a whole class, or more than its hold holds, is
	// not kept.
	h4 := Hold{B: b}
	h4.Grow(4 * M)
	h4.Keep(make([]byte, 0, 3*M+1))
	h4.Keep(make([]byte, 0, 8*M))
	if b.Pooled() != 0 || h4.Held() != 4*M {
		t.Fatalf("kept what it should not: pooled %d, held %d", b.Pooled(), h4.Held())
	}
	h4.Keep(make([]byte, 0, 4*M))
	if b.Pooled() != 4*M || h4.Held() != 0 || b.Used() != 4*M {
		t.Fatalf("a 4 MiB buffer not kept: pooled %d held %d used %d", b.Pooled(), h4.Held(), b.Used())
	}

	// Idle for IdleFor: dropped, and the budget is free again.
	ft.advance(IdleFor / 2)
	if b.Pooled() != 4*M {
		t.Fatalf("dropped after %v: pooled %d", IdleFor/2, b.Pooled())
	}
	ft.advance(IdleFor / 2)
	if b.Pooled() != 0 || b.Used() != 0 {
		t.Fatalf("after IdleFor: pooled %d used %d", b.Pooled(), b.Used())
	}
}

// A lease made while the pool was empty claims a buffer given back since:
// the buffer, of the lease's class only, leaves the pool and its bytes the
// budget (the lease counts them); nothing idle, or none of that class:
// nil, and nothing changes.
func TestClaim(t *testing.T) {
	const M = 1 << 20
	var none *Budget
	if none.Claim(M) != nil {
		t.Fatal("a nil budget claimed a buffer")
	}
	b := New(16 * M)
	early, _ := b.Lease(2 * M) // taken while the pool is empty
	late, _ := b.Lease(2 * M)
	if early.Buf != nil || late.Buf != nil || b.Used() != 4*M {
		t.Fatalf("leases on an empty pool: buffers %v %v, used %d", early.Buf != nil, late.Buf != nil, b.Used())
	}
	if b.Claim(2*M) != nil {
		t.Fatal("claimed a buffer from an empty pool")
	}
	h := Hold{B: b}
	h.Adopt(early.N)
	kept := make([]byte, 7, early.N)
	h.Keep(kept)
	h.Release()
	for _, tc := range []struct {
		class        int64
		want         bool
		used, pooled int64
	}{
		{3 * M, false, 4 * M, 2 * M}, // another class: not this buffer
		{2 * M, true, 2 * M, 0},      // the late lease's: the kept buffer
		{2 * M, false, 2 * M, 0},     // claimed once only
	} {
		got := b.Claim(tc.class)
		if (got != nil) != tc.want || b.Used() != tc.used || b.Pooled() != tc.pooled {
			t.Fatalf("Claim(%d): buffer %v, used %d, pooled %d; want %v, %d, %d", tc.class, got != nil, b.Used(), b.Pooled(), tc.want, tc.used, tc.pooled)
		}
		if got != nil && (len(got) != 0 || cap(got) != int(early.N) || &got[:1][0] != &kept[0]) {
			t.Fatalf("claimed len %d cap %d, not the kept buffer emptied", len(got), cap(got))
		}
	}
	// The late lease reads into it, keeps it, and the budget ends with
	// that one buffer pooled.
	h2 := Hold{B: b}
	h2.Adopt(late.N)
	h2.Keep(make([]byte, 0, late.N))
	h2.Release()
	if b.Used() != 2*M || b.Pooled() != 2*M {
		t.Fatalf("after: used %d pooled %d, want both %d", b.Used(), b.Pooled(), 2*M)
	}
}

// Under concurrent leases, keeps and holds the budget never passes its
// limit, and once everything is given back only idle buffers remain.
func TestLeasesNeverPassTheLimit(t *testing.T) {
	const M = 1 << 20
	b := New(20 * M)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				n := int64(1+(g+i)%5) * M
				l, ok := b.Lease(n)
				if !ok {
					continue
				}
				if u := b.Used(); u > b.Limit() {
					t.Errorf("used %d past the limit %d", u, b.Limit())
				}
				h := Hold{B: b}
				h.Adopt(l.N)
				buf := l.Buf
				if buf == nil {
					buf = make([]byte, 0, l.N)
				}
				if int64(cap(buf)) != l.N {
					t.Errorf("leased a buffer of %d for class %d", cap(buf), l.N)
				}
				h.Keep(buf)
				h.Release()
			}
		})
	}
	wg.Wait()
	if b.Used() != b.Pooled() || b.Used() > b.Limit() || b.Peak() > b.Limit() {
		t.Fatalf("used %d, pooled %d, peak %d, limit %d", b.Used(), b.Pooled(), b.Peak(), b.Limit())
	}
	b.DropIdle()
	if b.Used() != 0 || b.Pooled() != 0 {
		t.Fatalf("after DropIdle: used %d, pooled %d", b.Used(), b.Pooled())
	}
}
