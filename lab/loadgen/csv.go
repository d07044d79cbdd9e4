package loadgen

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// CSVHeader is the first line WriteCSV writes.
const CSVHeader = "start_ms,latency_ms,status,error"

// WriteCSV writes one line per record, in arrival order: when it was sent
// (ms from the start of the run), its latency (ms, microsecond resolution),
// the HTTP status (0 when none) and the error kind (empty when ok). A dropped
// request appears with latency 0, status 0 and error dropped_by_client.
func WriteCSV(w io.Writer, records []Record) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	line := make([]byte, 0, 64)
	if _, err := bw.WriteString(CSVHeader + "\n"); err != nil {
		return fmt.Errorf("write CSV header: %w", err)
	}
	for i := range records {
		r := &records[i]
		line = strconv.AppendFloat(line[:0], ms(r.Start), 'f', 3, 64)
		line = append(line, ',')
		line = strconv.AppendFloat(line, ms(r.Latency), 'f', 3, 64)
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(r.Status), 10)
		line = append(line, ',')
		line = append(line, r.Err.String()...)
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return fmt.Errorf("write CSV line %d: %w", i+2, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	return nil
}

// ReadCSV reads records written by WriteCSV (ms resolution, as written).
func ReadCSV(r io.Reader) ([]Record, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 4
	cr.ReuseRecord = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("load CSV header: %w", err)
	}
	if strings.Join(head, ",") != CSVHeader {
		return nil, fmt.Errorf("load CSV header %q, want %q", strings.Join(head, ","), CSVHeader)
	}
	kinds := make(map[string]ErrorKind, numKinds)
	for k := ErrorKind(0); k < numKinds; k++ {
		kinds[k.String()] = k
	}
	var out []Record
	for line := 2; ; line++ {
		f, err := cr.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("load CSV: %w", err)
		}
		start, err1 := strconv.ParseFloat(f[0], 64)
		lat, err2 := strconv.ParseFloat(f[1], 64)
		status, err3 := strconv.Atoi(f[2])
		kind, ok := kinds[f[3]]
		if err := errors.Join(err1, err2, err3); err != nil || !ok || start < 0 || lat < 0 {
			return nil, fmt.Errorf("load CSV line %d: want start_ms,latency_ms,status,error with known error kind, got %q", line, strings.Join(f, ","))
		}
		out = append(out, Record{Start: fromMs(start), Latency: fromMs(lat), Status: status, Err: kind})
	}
}

func fromMs(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
