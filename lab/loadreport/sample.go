// Package report turns load runs through the proxy into the figures of the
// adaptive-batching paper: a summary table per policy and plots over time of
// the arrival rate, the chosen batch size, latency and requests per joule.
// Its inputs are a load run's records (package loadgen) and samples of the
// proxy's admin /status taken while the run lasted.
package loadreport

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Sample is the proxy's state for one model at one moment.
type Sample struct {
	T          float64 // seconds since the sampler started
	RatePerSec float64 // the monitor's arrival rate over its last window
	BatchSize  int     // the batch size the rule aims for
	QueueRows  int
	// BatchesSent and RowsSent are cumulative; their differences give the
	// mean batch size over an interval.
	BatchesSent, RowsSent int64
	// RequestsPerJoule is over the meter's shortest sliding window, and
	// TotalRequestsPerJoule since the proxy started; nil when unknown.
	RequestsPerJoule, TotalRequestsPerJoule *float64
	PowerW                                  *float64
	// EnergyWindow names the meter's sliding window RequestsPerJoule is
	// over ("10s"); empty when unknown (not kept in the CSV).
	EnergyWindow string
}

// status is the part of the admin /status document a sample reads.
type status struct {
	Models []struct {
		Model string `json:"model"`
		Rule  *struct {
			BatchSize  int     `json:"batch_size"`
			RatePerSec float64 `json:"rate_rps"`
		} `json:"rule"`
	} `json:"models"`
	Queues []struct {
		Model       string `json:"model"`
		QueuedRows  int    `json:"queued_rows"`
		BatchesSent int64  `json:"batches_sent"`
		RowsSent    int64  `json:"rows_sent"`
	} `json:"queues"`
	Energy *struct {
		Windows map[string]struct {
			Seconds          float64  `json:"seconds"`
			RequestsPerJoule *float64 `json:"requests_per_joule"`
			AvgPowerW        *float64 `json:"avg_power_watts"`
		} `json:"windows"`
		Models []struct {
			Model   string `json:"model"`
			Windows map[string]struct {
				Seconds          float64  `json:"seconds"`
				RequestsPerJoule *float64 `json:"requests_per_joule"`
			} `json:"windows"`
		} `json:"models"`
	} `json:"energy"`
}

// Sampler polls a proxy's admin /status for one model.
type Sampler struct {
	url    string
	model  string
	client *http.Client
	start  time.Time

	mu      sync.Mutex
	samples []Sample
	errs    int
}

// NewSampler samples model from the admin listener at adminURL
// (e.g. http://127.0.0.1:9002).
func NewSampler(adminURL, model string) *Sampler {
	return &Sampler{url: strings.TrimRight(adminURL, "/") + "/status", model: model,
		client: &http.Client{Timeout: 2 * time.Second}, start: time.Now()}
}

// Run polls every interval until ctx ends.
func (s *Sampler) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.Poll(ctx); err != nil {
				s.mu.Lock()
				s.errs++
				s.mu.Unlock()
			}
		}
	}
}

// Poll takes one sample and keeps it.
func (s *Sampler) Poll(ctx context.Context) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return Sample{}, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("sampling %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("sampling %s: status %d", s.url, resp.StatusCode)
	}
	var st status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&st); err != nil {
		return Sample{}, fmt.Errorf("sampling %s: %w", s.url, err)
	}
	smp := sampleOf(&st, s.model, time.Since(s.start).Seconds())
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	s.mu.Unlock()
	return smp, nil
}

func sampleOf(st *status, model string, t float64) Sample {
	smp := Sample{T: t}
	for _, m := range st.Models {
		if m.Model == model && m.Rule != nil {
			smp.RatePerSec, smp.BatchSize = m.Rule.RatePerSec, m.Rule.BatchSize
		}
	}
	for _, q := range st.Queues {
		if q.Model == model {
			smp.QueueRows, smp.BatchesSent, smp.RowsSent = q.QueuedRows, q.BatchesSent, q.RowsSent
		}
	}
	if st.Energy != nil {
		// The model's own share where the meter attributes energy to
		// models, else the whole device's figure.
		windows := st.Energy.Windows
		for _, m := range st.Energy.Models {
			if m.Model == model {
				for k, w := range m.Windows {
					cp := windows[k]
					cp.RequestsPerJoule = w.RequestsPerJoule
					windows[k] = cp
				}
			}
		}
		shortest := ""
		for k, w := range windows {
			if k != "total" && (shortest == "" || w.Seconds < windows[shortest].Seconds) {
				shortest = k
			}
		}
		if shortest != "" {
			smp.EnergyWindow = shortest
			smp.RequestsPerJoule = windows[shortest].RequestsPerJoule
			smp.PowerW = windows[shortest].AvgPowerW
		}
		smp.TotalRequestsPerJoule = windows["total"].RequestsPerJoule
	}
	return smp
}

// Samples returns the samples taken so far.
func (s *Sampler) Samples() []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Sample(nil), s.samples...)
}

// Latest is the newest sample, if any.
func (s *Sampler) Latest() (Sample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return Sample{}, false
	}
	return s.samples[len(s.samples)-1], true
}

// SamplesHeader is the first line of WriteSamplesCSV.
const SamplesHeader = "t_s,rate_rps,batch_size,queue_rows,batches_sent,rows_sent,requests_per_joule,total_requests_per_joule,power_w"

// WriteSamplesCSV writes samples; unknown figures are empty fields.
func WriteSamplesCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	cw.Write(strings.Split(SamplesHeader, ","))
	for _, s := range samples {
		cw.Write([]string{ftoa(s.T), ftoa(s.RatePerSec), strconv.Itoa(s.BatchSize), strconv.Itoa(s.QueueRows),
			strconv.FormatInt(s.BatchesSent, 10), strconv.FormatInt(s.RowsSent, 10),
			optional(s.RequestsPerJoule), optional(s.TotalRequestsPerJoule), optional(s.PowerW)})
	}
	cw.Flush()
	return cw.Error()
}

// ReadSamplesCSV reads what WriteSamplesCSV wrote.
func ReadSamplesCSV(r io.Reader) ([]Sample, error) {
	cr := csv.NewReader(r)
	rows, err := cr.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("samples CSV: %w", err)
	}
	if len(rows) == 0 || strings.Join(rows[0], ",") != SamplesHeader {
		return nil, fmt.Errorf("samples CSV: want header %q", SamplesHeader)
	}
	out := make([]Sample, 0, len(rows)-1)
	for i, f := range rows[1:] {
		var s Sample
		var errs [9]error
		s.T, errs[0] = strconv.ParseFloat(f[0], 64)
		s.RatePerSec, errs[1] = strconv.ParseFloat(f[1], 64)
		s.BatchSize, errs[2] = strconv.Atoi(f[2])
		s.QueueRows, errs[3] = strconv.Atoi(f[3])
		s.BatchesSent, errs[4] = strconv.ParseInt(f[4], 10, 64)
		s.RowsSent, errs[5] = strconv.ParseInt(f[5], 10, 64)
		s.RequestsPerJoule, errs[6] = parseOptional(f[6])
		s.TotalRequestsPerJoule, errs[7] = parseOptional(f[7])
		s.PowerW, errs[8] = parseOptional(f[8])
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("samples CSV line %d: %w", i+2, err)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

func optional(v *float64) string {
	if v == nil {
		return ""
	}
	return ftoa(*v)
}

func parseOptional(s string) (*float64, error) {
	if s == "" {
		return nil, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return nil, err
	}
	return &v, nil
}
