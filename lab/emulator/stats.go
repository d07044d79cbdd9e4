package emulator

import (
	"sort"
	"sync"
	"time"
)

// The statistics types follow Triton's statistics extension
// (docs/protocol/extension_statistics.md) field for field, so a client of
// GET /v2/models/{m}/stats cannot tell the emulator from Triton.

// StatsResponse is the body of GET /v2/models[/{m}[/versions/{v}]]/stats.
type StatsResponse struct {
	ModelStats []ModelStats `json:"model_stats"`
}

// ModelStats is the cumulative activity of one model version.
type ModelStats struct {
	Name           string         `json:"name"`
	Version        string         `json:"version"`
	LastInference  uint64         `json:"last_inference"` // ms since the epoch, 0 before the first
	InferenceCount uint64         `json:"inference_count"`
	ExecutionCount uint64         `json:"execution_count"`
	InferenceStats InferenceStats `json:"inference_stats"`
	BatchStats     []BatchStats   `json:"batch_stats"`
}

// InferenceStats aggregates every request of a model version.
type InferenceStats struct {
	Success       DurationStat `json:"success"`
	Fail          DurationStat `json:"fail"`
	Queue         DurationStat `json:"queue"`
	ComputeInput  DurationStat `json:"compute_input"`
	ComputeInfer  DurationStat `json:"compute_infer"`
	ComputeOutput DurationStat `json:"compute_output"`
	CacheHit      DurationStat `json:"cache_hit"`
	CacheMiss     DurationStat `json:"cache_miss"`
}

// BatchStats aggregates the executions of one batch size.
type BatchStats struct {
	BatchSize     uint64       `json:"batch_size"`
	ComputeInput  DurationStat `json:"compute_input"`
	ComputeInfer  DurationStat `json:"compute_infer"`
	ComputeOutput DurationStat `json:"compute_output"`
}

// DurationStat is a count and a cumulative duration in nanoseconds.
type DurationStat struct {
	Count uint64 `json:"count"`
	NS    uint64 `json:"ns"`
}

func (d *DurationStat) add(t time.Duration) {
	d.Count++
	if t > 0 {
		d.NS += uint64(t)
	}
}

// execution is what one successful request contributes to the statistics.
type execution struct {
	end                             time.Time
	rows                            int
	total, queue, input, infer, out time.Duration
}

// modelStats accumulates a model's statistics; all methods are safe for
// concurrent use.
type modelStats struct {
	mu      sync.Mutex
	s       ModelStats
	batches map[uint64]*BatchStats
}

func newModelStats(name, version string) *modelStats {
	return &modelStats{s: ModelStats{Name: name, Version: version}, batches: map[uint64]*BatchStats{}}
}

func (m *modelStats) success(e execution) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.s.LastInference = uint64(max(0, e.end.UnixMilli()))
	m.s.InferenceCount += uint64(e.rows)
	m.s.ExecutionCount++
	is := &m.s.InferenceStats
	is.Success.add(e.total)
	is.Queue.add(e.queue)
	is.ComputeInput.add(e.input)
	is.ComputeInfer.add(e.infer)
	is.ComputeOutput.add(e.out)
	b := m.batches[uint64(e.rows)]
	if b == nil {
		b = &BatchStats{BatchSize: uint64(e.rows)}
		m.batches[uint64(e.rows)] = b
	}
	b.ComputeInput.add(e.input)
	b.ComputeInfer.add(e.infer)
	b.ComputeOutput.add(e.out)
}

func (m *modelStats) fail(total time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.s.InferenceStats.Fail.add(total)
}

// snapshot returns a copy with batch_stats sorted by batch size.
func (m *modelStats) snapshot() ModelStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.s
	s.BatchStats = make([]BatchStats, 0, len(m.batches))
	for _, b := range m.batches {
		s.BatchStats = append(s.BatchStats, *b)
	}
	sort.Slice(s.BatchStats, func(i, j int) bool { return s.BatchStats[i].BatchSize < s.BatchStats[j].BatchSize })
	return s
}
