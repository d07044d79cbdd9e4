package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
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
