package regression

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// CSV column names of a latency profile: one row per observed batch.
const (
	ColumnBatch   = "batch_size"
	ColumnLatency = "latency_ms"
)

// ReadCSV reads latency samples from CSV with a header row naming the
// columns batch_size and latency_ms, in any order; other columns are ignored
// so that profiles may carry more. Lines starting with # are comments.
func ReadCSV(r io.Reader) ([]Sample, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("profile csv: empty, want a header %s,%s", ColumnBatch, ColumnLatency)
	}
	if err != nil {
		return nil, fmt.Errorf("profile csv: %w", err)
	}
	bi, li := -1, -1
	for i, h := range header {
		switch strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))) {
		case ColumnBatch:
			bi = i
		case ColumnLatency:
			li = i
		}
	}
	if bi < 0 || li < 0 {
		return nil, fmt.Errorf("profile csv: header %q must name columns %s and %s", strings.Join(header, ","), ColumnBatch, ColumnLatency)
	}
	var out []Sample
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("profile csv: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) <= max(bi, li) {
			return nil, fmt.Errorf("profile csv line %d: %d fields, want at least %d", line, len(rec), max(bi, li)+1)
		}
		b, err := strconv.Atoi(strings.TrimSpace(rec[bi]))
		if err != nil {
			return nil, fmt.Errorf("profile csv line %d: %s %q is not an integer", line, ColumnBatch, rec[bi])
		}
		ms, err := strconv.ParseFloat(strings.TrimSpace(rec[li]), 64)
		if err != nil {
			return nil, fmt.Errorf("profile csv line %d: %s %q is not a number", line, ColumnLatency, rec[li])
		}
		s := Sample{Batch: b, LatencyMs: ms}
		if err := s.validate(); err != nil {
			return nil, fmt.Errorf("profile csv line %d: %w", line, err)
		}
		out = append(out, s)
	}
}

// WriteCSV writes samples in the format ReadCSV reads.
func WriteCSV(w io.Writer, samples []Sample) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{ColumnBatch, ColumnLatency}); err != nil {
		return fmt.Errorf("profile csv: %w", err)
	}
	for _, s := range samples {
		rec := []string{strconv.Itoa(s.Batch), strconv.FormatFloat(s.LatencyMs, 'g', -1, 64)}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("profile csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("profile csv: %w", err)
	}
	return nil
}
