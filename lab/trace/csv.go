package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// CSV column names of a rate series.
const (
	ColumnTime = "time_s"
	ColumnRate = "rate_rps"
)

// ReadCSV reads a series from CSV with a header naming the columns time_s
// and rate_rps (seconds from the start, requests per second), in any order.
// Lines starting with # are comments. The rows must satisfy New.
func ReadCSV(r io.Reader, name string) (*Series, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("trace csv %q: empty, want a header %s,%s", name, ColumnTime, ColumnRate)
	}
	if err != nil {
		return nil, fmt.Errorf("trace csv %q: %w", name, err)
	}
	ti, ri := -1, -1
	for i, h := range header {
		switch strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))) {
		case ColumnTime:
			ti = i
		case ColumnRate:
			ri = i
		}
	}
	if ti < 0 || ri < 0 {
		return nil, fmt.Errorf("trace csv %q: header %q must name columns %s and %s", name, strings.Join(header, ","), ColumnTime, ColumnRate)
	}
	var pts []Point
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("trace csv %q: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) <= max(ti, ri) {
			return nil, fmt.Errorf("trace csv %q line %d: %d fields, want at least %d", name, line, len(rec), max(ti, ri)+1)
		}
		sec, err := strconv.ParseFloat(strings.TrimSpace(rec[ti]), 64)
		if err != nil || math.IsNaN(sec) || math.IsInf(sec, 0) || sec < 0 || sec > 1e9 {
			return nil, fmt.Errorf("trace csv %q line %d: %s %q is not a time in seconds >= 0", name, line, ColumnTime, rec[ti])
		}
		rate, err := strconv.ParseFloat(strings.TrimSpace(rec[ri]), 64)
		if err != nil {
			return nil, fmt.Errorf("trace csv %q line %d: %s %q is not a number", name, line, ColumnRate, rec[ri])
		}
		pts = append(pts, Point{At: time.Duration(sec * float64(time.Second)), RatePerSec: rate})
	}
	return New(name, pts)
}

// WriteCSV writes the series in the format ReadCSV reads.
func WriteCSV(w io.Writer, s *Series) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{ColumnTime, ColumnRate}); err != nil {
		return fmt.Errorf("trace csv: %w", err)
	}
	for _, p := range s.points {
		rec := []string{strconv.FormatFloat(p.At.Seconds(), 'g', -1, 64), strconv.FormatFloat(p.RatePerSec, 'g', -1, 64)}
		if err := cw.Write(rec); err != nil {
			return fmt.Errorf("trace csv: %w", err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("trace csv: %w", err)
	}
	return nil
}
