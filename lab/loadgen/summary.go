package loadgen

import (
	"slices"
	"time"

	"github.com/ratebatch/ratebatch/internal/stats"
)

// Summary is the account of a run. The counts always balance:
// Scheduled = Sent + Dropped and Sent = OK + Errors. Latency figures cover
// the ok requests only and are 0 when there were none; percentiles are exact
// (nearest rank over the sorted latencies), not estimated from histograms.
type Summary struct {
	Scheduled int64 `json:"scheduled"`         // arrivals the Poisson process produced
	Sent      int64 `json:"sent"`              // requests put on the wire
	OK        int64 `json:"ok"`                // answered 200 (and verified, with Verify)
	Errors    int64 `json:"errors"`            // sent but not ok; see ErrorsByKind
	Dropped   int64 `json:"dropped_by_client"` // not sent: MaxInFlight requests were already out

	DurationS     float64 `json:"duration_s"`     // the sending window
	ElapsedS      float64 `json:"elapsed_s"`      // until the last answer (at least DurationS)
	OfferedRPS    float64 `json:"offered_rps"`    // Scheduled / DurationS
	ThroughputRPS float64 `json:"throughput_rps"` // OK / ElapsedS

	MeanLatencyMs float64 `json:"mean_latency_ms"`
	P50LatencyMs  float64 `json:"p50_latency_ms"`
	P90LatencyMs  float64 `json:"p90_latency_ms"`
	P99LatencyMs  float64 `json:"p99_latency_ms"`
	P999LatencyMs float64 `json:"p999_latency_ms"`
	MaxLatencyMs  float64 `json:"max_latency_ms"`

	// LagP99Ms and LagMaxMs say how faithfully the client kept the arrival
	// times (see Record.Lag); large values mean the load was not the one asked.
	LagP99Ms float64 `json:"lag_p99_ms"`
	LagMaxMs float64 `json:"lag_max_ms"`

	StatusCounts map[int]int64    `json:"status_counts"`  // HTTP status -> answers, 200 included
	ErrorsByKind map[string]int64 `json:"errors_by_kind"` // ErrorKind.String() -> requests
}

// Unverified counts the answers that failed Config.Verify: undecodable, or
// not the ones their own inputs imply.
func (s Summary) Unverified() int64 {
	return s.ErrorsByKind[KindMismatch.String()] + s.ErrorsByKind[KindDecode.String()]
}

// Summarize accounts for records. duration is the sending window and elapsed
// the time until the last answer; both may be zero (then rates are 0).
func Summarize(records []Record, duration, elapsed time.Duration) Summary {
	s := Summary{
		Scheduled:    int64(len(records)),
		DurationS:    duration.Seconds(),
		ElapsedS:     max(duration, elapsed).Seconds(),
		StatusCounts: map[int]int64{},
		ErrorsByKind: map[string]int64{},
	}
	lat := make([]time.Duration, 0, len(records))
	lags := make([]time.Duration, 0, len(records))
	var sum time.Duration
	for i := range records {
		r := &records[i]
		if r.Err == KindDropped {
			s.Dropped++
			continue
		}
		s.Sent++
		lags = append(lags, r.Lag)
		if r.Status != 0 {
			s.StatusCounts[r.Status]++
		}
		if r.Err != KindNone {
			s.Errors++
			s.ErrorsByKind[r.Err.String()]++
			continue
		}
		s.OK++
		lat = append(lat, r.Latency)
		sum += r.Latency
	}
	if s.DurationS > 0 {
		s.OfferedRPS = float64(s.Scheduled) / s.DurationS
	}
	if s.ElapsedS > 0 {
		s.ThroughputRPS = float64(s.OK) / s.ElapsedS
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		s.MeanLatencyMs = ms(sum) / float64(len(lat))
		s.P50LatencyMs = ms(stats.Percentile(lat, 50))
		s.P90LatencyMs = ms(stats.Percentile(lat, 90))
		s.P99LatencyMs = ms(stats.Percentile(lat, 99))
		s.P999LatencyMs = ms(stats.Percentile(lat, 99.9))
		s.MaxLatencyMs = ms(lat[len(lat)-1])
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		s.LagP99Ms = ms(stats.Percentile(lags, 99))
		s.LagMaxMs = ms(lags[len(lags)-1])
	}
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
