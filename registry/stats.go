package registry

import (
	"context"
	"os"
	"sort"
	"time"

	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/regression"
)

// statsGiveUp is how many failed reads of a model's statistics, before any
// succeeded, make the registry stop asking: the server has none (or not at
// that path), and the monitor learns from round trips instead.
const statsGiveUp = 3

// pollStats reads the upstream's per-batch-size statistics of a model every
// slice of a window and hands them to its monitor, which learns tau(b) from their
// differences: the server's own compute time per batch, free of network,
// HTTP and queueing. It returns when ctx ends or the server has no
// statistics.
func (r *Models) pollStats(ctx context.Context, name string, mon *monitor.Monitor) {
	// As often as the monitor re-plans, so that from the second read on
	// (a slice after the model's first request) the fit is the server's.
	ticks, stop := r.newStatsTicker(mon.TickEvery())
	defer stop()
	failed, worked := 0, false
	for {
		stats, err := r.up.ModelStats(ctx, name)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failed++
			if !worked && failed >= statsGiveUp {
				r.log.Info("upstream has no batch statistics for the model; tau(b) is learnt from round trips", "model", name, "err", err)
				return
			}
		default:
			worked = true
			mon.ObserveServer(batchTotals(stats))
		}
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
	}
}

func (r *Models) newStatsTicker(d time.Duration) (<-chan time.Time, func()) {
	if r.statsTicker != nil {
		return r.statsTicker(d)
	}
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// batchTotals sums a model's batch_stats over its versions, per batch size.
func batchTotals(stats []triton.BatchStat) []monitor.BatchTotal {
	by := map[int]*monitor.BatchTotal{}
	var out []monitor.BatchTotal
	for _, s := range stats {
		if s.BatchSize < 1 {
			continue
		}
		b := by[s.BatchSize]
		if b == nil {
			b = &monitor.BatchTotal{Batch: s.BatchSize}
			by[s.BatchSize] = b
		}
		b.Count += s.ComputeInfer.Count
		b.Time += time.Duration(s.ComputeNs())
	}
	for _, b := range by {
		out = append(out, *b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Batch < out[j].Batch })
	return out
}

// seed finds the starting tau(b) line: the configured profile CSV, else the
// upstream's per-batch-size statistics, else the monitor's default.
func (r *Models) seed(ctx context.Context, name string) (*regression.Line, string) {
	if path := r.cfg.Models[name].ProfileCSV; path != "" {
		line, err := fitCSV(path)
		if err == nil {
			return line, "profile " + path
		}
		r.log.Warn("profile unusable; trying the upstream's statistics", "model", name, "path", path, "err", err)
	}
	stats, err := r.up.ModelStats(ctx, name)
	if err == nil {
		var samples []regression.Sample
		for _, s := range stats {
			if ms := s.MeanMs(); ms > 0 {
				samples = append(samples, regression.Sample{Batch: s.BatchSize, LatencyMs: ms, Weight: float64(s.ComputeInfer.Count)})
			}
		}
		if f, err := regression.FitSamples(samples, regression.Options{}); err == nil {
			return &f.Line, "upstream statistics"
		}
	}
	return nil, "default"
}

func fitCSV(path string) (*regression.Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	samples, err := regression.ReadCSV(f)
	if err != nil {
		return nil, err
	}
	fit, err := regression.FitSamples(samples, regression.Options{})
	if err != nil {
		return nil, err
	}
	return &fit.Line, nil
}
