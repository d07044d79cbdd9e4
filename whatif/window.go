package whatif

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
)

// ErrNotRecorded is the error for a model the recorder keeps nothing of:
// not batched, no call yet, or beyond Options.Models.
var ErrNotRecorded = errors.New("no arrivals recorded")

// arrival is one kept arrival.
type arrival struct {
	at   time.Time
	rows int
	kind dispatcher.CallerKind
}

// traffic is what a model's record holds over a window.
type traffic struct {
	from, to time.Time
	arrivals []arrival // in time order
	// latencies are the calls' that arrived in the window and were
	// answered, in ms, sorted.
	latencies []float64
	batches   []batch // that ended in the window
	afters    []after // the answers written in the window, in time order
	// first and last are the samples at the window's ends; nil when there
	// are fewer than two.
	first, last *sample
	// samples are those in the window, first and last included.
	samples []sample
	// cut says the ring had dropped arrivals of the window asked for:
	// from is then the oldest arrival it still held.
	cut bool
}

// traffic returns what the model's record holds over the last d before
// the newest sample (or since the record began, or the oldest arrival
// kept, if later). Aligned, the
// window starts at the first sample in it, so that the meter's figures
// and the arrivals cover the same time (the first second of a model's
// calls, before its first sample, is then left out). It stays one
// function: the window's bounds, the arrivals and the meter's samples are
// cut together, under the record's locks.
func (r *Recorder) traffic(model string, d time.Duration, aligned bool) (traffic, error) {
	k := (*r.models.Load())[model]
	if k == nil {
		return traffic{}, fmt.Errorf("model %q: %w (not batched, no call yet, or more than %d models)", model, ErrNotRecorded, r.o.Models)
	}
	now := r.o.Now()
	var tr traffic
	k.arrivals.each(func(v uint64) {
		at, p := r.clk.unpack(v, now)
		rows, kind := arrivalOf(p)
		tr.arrivals = append(tr.arrivals, arrival{at: at, rows: rows, kind: dispatcher.CallerKind(kind)})
	})
	slices.SortStableFunc(tr.arrivals, func(a, b arrival) int { return a.at.Compare(b.at) })
	r.mu.Lock()
	samples := slices.Clone(k.samples)
	r.mu.Unlock()

	tr.to = now
	if n := len(samples); n > 0 {
		tr.to = samples[n-1].at
	}
	tr.from = tr.to.Add(-d)
	if tr.from.Before(k.since) {
		tr.from = k.since // nothing is known of the time before
	}
	wrapped := k.arrivals.next.Load() > uint64(len(k.arrivals.slots))
	if wrapped && len(tr.arrivals) > 0 && tr.arrivals[0].at.After(tr.from) {
		tr.from, tr.cut = tr.arrivals[0].at, true
	}
	if i := slices.IndexFunc(samples, func(s sample) bool { return !s.at.Before(tr.from) }); i >= 0 && i < len(samples)-1 {
		tr.samples = samples[i:]
		tr.first, tr.last = &tr.samples[0], &tr.samples[len(tr.samples)-1]
		if aligned {
			tr.from = tr.first.at
		}
	}
	tr.arrivals = slices.DeleteFunc(tr.arrivals, func(a arrival) bool { return a.at.Before(tr.from) || a.at.After(tr.to) })
	k.answers.each(func(v uint64) {
		at, p := r.clk.unpack(v, now)
		if !at.Before(tr.from) && !at.After(tr.to) {
			tr.latencies = append(tr.latencies, float64(latencyOf(p))/float64(time.Millisecond))
		}
	})
	slices.Sort(tr.latencies)
	k.afters.each(func(v uint64) {
		at, p := r.clk.unpack(v, now)
		if !at.Before(tr.from) && !at.After(tr.to) {
			wait, merged := afterOf(p)
			tr.afters = append(tr.afters, after{at, wait, merged})
		}
	})
	slices.SortStableFunc(tr.afters, func(a, b after) int { return a.at.Compare(b.at) })
	k.bmu.Lock()
	for _, b := range k.batches {
		if end := b.end(); !end.Before(tr.from) && !end.After(tr.to) {
			tr.batches = append(tr.batches, b)
		}
	}
	k.bmu.Unlock()
	return tr, nil
}

// after is one answer's wait after its batch, by when it was written.
type after struct {
	at     time.Time
	wait   time.Duration
	merged bool
}

// span is the window's length.
func (tr *traffic) span() time.Duration { return tr.to.Sub(tr.from) }
