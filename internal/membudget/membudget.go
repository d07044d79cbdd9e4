// Package membudget bounds the memory the proxy's requests and answers may
// hold at once (limits.memory): the bytes of request bodies being read,
// queued and in flight, and of answers being written, are admitted against
// one budget shared by both doors. A request that would pass it is refused
// (503, gRPC RESOURCE_EXHAUSTED) before its body is read further, so the
// process's memory is the budget plus a fixed overhead whatever the load,
// and small requests keep being served while large ones wait their turn.
// nginx buffers large bodies to disk and Envoy has an overload manager;
// this is the proxy's own.
package membudget

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Budget counts the bytes held against a limit. Its methods are safe for
// concurrent use; a nil *Budget admits everything.
type Budget struct {
	limit int64
	used  atomic.Int64 // held by requests and answers, and idle in the pool
	peak  atomic.Int64
	pool  pool
}

// New returns a budget of limit bytes; limit <= 0 gives nil (no limit).
func New(limit int64) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit}
}

// Limit is the budget's size, 0 for none.
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Used is the bytes held now.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Peak is the most bytes held at once so far.
func (b *Budget) Peak() int64 {
	if b == nil {
		return 0
	}
	return b.peak.Load()
}

// acquire takes n bytes if they fit, dropping idle pooled buffers to make
// room if need be, else nothing.
func (b *Budget) acquire(n int64) bool { return b.acquireUpTo(n, b.limit) }

// acquireUpTo takes n bytes if the bytes used stay within upTo.
func (b *Budget) acquireUpTo(n, upTo int64) bool {
	for {
		u := b.used.Load()
		if u+n > upTo {
			if b.reclaim(n, upTo) {
				continue
			}
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			b.notePeak(u + n)
			return true
		}
	}
}

// force takes n bytes even past the limit: an answer already in memory is
// written, and what it holds makes the next requests wait.
func (b *Budget) force(n int64) { b.notePeak(b.used.Add(n)) }

func (b *Budget) notePeak(u int64) {
	for p := b.peak.Load(); u > p && !b.peak.CompareAndSwap(p, u); p = b.peak.Load() {
	}
}

// Acquire takes n bytes if they fit and reports whether it did; a nil
// budget always does. What it took is given back with Release (or handed
// to a Hold with Adopt).
func (b *Budget) Acquire(n int64) bool { return b == nil || n <= 0 || b.acquire(n) }

// Release gives back n bytes taken by Acquire.
func (b *Budget) Release(n int64) {
	if b != nil && n > 0 {
		b.used.Add(-n)
	}
}

// Hold is what one request holds of a budget; its zero value with B set
// holds nothing. Not safe for concurrent use: a request's own.
type Hold struct {
	B    *Budget
	held int64
}

// Grow makes the hold at least n bytes, if the budget has room for the
// difference; false leaves it as it was.
func (h *Hold) Grow(n int64) bool {
	if h.B == nil || n <= h.held {
		return true
	}
	if !h.B.acquire(n - h.held) {
		return false
	}
	h.held = n
	return true
}

// Adopt makes n bytes taken by Acquire part of the hold.
func (h *Hold) Adopt(n int64) {
	if h.B != nil && n > 0 {
		h.held += n
	}
}

// Force adds n bytes to the hold even past the budget's limit.
func (h *Hold) Force(n int64) {
	if h.B == nil || n <= 0 {
		return
	}
	h.B.force(n)
	h.held += n
}

// Held is the bytes the hold has.
func (h *Hold) Held() int64 { return h.held }

// Release gives everything held back.
func (h *Hold) Release() {
	if h.B != nil && h.held != 0 {
		h.B.used.Add(-h.held)
		h.held = 0
	}
}

// Default sizing when limits.memory is not set: CgroupShare of the
// memory limit of the process's cgroup (v2 memory.max, else v1
// memory.limit_in_bytes), which leaves the rest for the runtime, the
// connections' buffers and the collector's headroom; without a cgroup
// limit, Fallback.
const (
	CgroupShare = 0.5
	Fallback    = 1 << 30
)

// cgroupFiles are where the cgroup memory limit is read, v2 first.
var cgroupFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Default returns the budget to use when none is configured and where it
// comes from ("cgroup" or "fallback").
func Default() (limit int64, source string) {
	if l, ok := cgroupLimit(cgroupFiles); ok {
		return int64(float64(l) * CgroupShare), "cgroup"
	}
	return Fallback, "fallback"
}

// cgroupLimit reads the first of files that holds a memory limit. "max"
// (v2) and v1's near-2^63 "no limit" are none.
func cgroupLimit(files []string) (int64, bool) {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= 1<<60 {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

var (
	descLimit = prometheus.NewDesc("ratebatch_memory_budget_bytes",
		"The memory budget (limits.memory) request and answer bytes are admitted against.", nil, nil)
	descHeld = prometheus.NewDesc("ratebatch_memory_held_bytes",
		"Request and answer bytes held against the memory budget now, idle pooled buffers included.", nil, nil)
	descPeak = prometheus.NewDesc("ratebatch_memory_held_peak_bytes",
		"The most request and answer bytes held against the memory budget at once since the start.", nil, nil)
	descPooled = prometheus.NewDesc("ratebatch_memory_pooled_bytes",
		"Bytes of idle large-body buffers kept for reuse, counted in ratebatch_memory_held_bytes.", nil, nil)
)

type collector struct{ b *Budget }

// Collector exports the budget, the bytes held and their peak.
func (b *Budget) Collector() prometheus.Collector { return collector{b} }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLimit
	ch <- descHeld
	ch <- descPeak
	ch <- descPooled
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descLimit, prometheus.GaugeValue, float64(c.b.Limit()))
	ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(c.b.Used()))
	ch <- prometheus.MustNewConstMetric(descPeak, prometheus.GaugeValue, float64(c.b.Peak()))
	ch <- prometheus.MustNewConstMetric(descPooled, prometheus.GaugeValue, float64(c.b.Pooled()))
}

// Overhead is what the process needs beside the budget, connections
// apart: the runtime, the binary, goroutine stacks, the live page's
// history and the garbage the collector lets build up between cycles.
// The documented worst case of the resident set is the budget plus
// Overhead plus PerConn for every open client connection (fasthttp's
// read and write buffers, the body's first bytes, a goroutine);
// docs/RELIABILITY.md measures it.
const (
	Overhead = 160 << 20
	PerConn  = 40 << 10
)

// runtimeHeadroom is what the Go runtime's soft limit leaves beside the
// budget: Overhead less what the runtime does not count (the binary's
// text, memory returned to the system but still resident).
const runtimeHeadroom = 96 << 20

// runtimeGCPercent is the collector's GOGC under the soft limit: the heap
// may grow to five times what is live between cycles, not twice. The
// proxy's live heap is a few megabytes, so at the default a cycle comes
// every few megabytes allocated, and its marking shares the one or two Go
// processors the proxy sizes itself to (internal/procs) with the calls in
// flight: the calls a cycle overlaps are late by it, and at a p99 that is
// enough of them to show. The soft limit still bounds the heap to the
// budget plus runtimeHeadroom, so the resident set's documented bound
// holds as before; what grows is the garbage on a small heap.
const runtimeGCPercent = 400

// LimitRuntime sets the Go runtime's soft memory limit to the budget plus
// 96 MiB (runtimeHeadroom) and its GOGC to runtimeGCPercent, unless
// GOMEMLIMIT is set in the environment (which then wins, and the collector
// is left as the environment sets it); GOGC in the environment keeps its
// value. Without the limit the collector lets the heap grow to twice what
// is live before it runs, so a budget spent on large bodies would cost
// twice its size in resident memory; with it, the heap may hold more
// garbage between cycles while it is small, for fewer cycles. It returns
// the limit set, 0 if none.
func LimitRuntime(b *Budget) int64 {
	if b == nil || os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	l := b.Limit() + runtimeHeadroom
	debug.SetMemoryLimit(l)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(runtimeGCPercent)
	}
	return l
}
