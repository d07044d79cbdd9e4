package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/replay"
)

// Overheads is a live proxy's time outside the server's compute
// (replay.Overheads), as --overheads gives it.
type Overheads = replay.Overheads

// overheadKeys are the keys ParseOverheads reads, as /status names them.
var overheadKeys = []string{"overhead_ms", "overhead_per_row_ms", "hold_lone_ms", "hold_merged_ms", "after_lone_ms", "after_merged_ms", "client_ms"}

// ParseOverheads reads the live overheads as the sim command's --overheads
// takes them: comma-separated key=value pairs in milliseconds, the keys
// as the proxy's /status writes them under rule.outside (overhead_ms,
// overhead_per_row_ms, hold_lone_ms, hold_merged_ms, after_lone_ms,
// after_merged_ms) and client_ms. overhead_ms is returned apart: it is
// Config.Overhead, the constant part of the round trip beyond compute.
func ParseOverheads(s string) (o Overheads, overhead time.Duration, err error) {
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok {
			return o, 0, fmt.Errorf("overheads: %q is not key=value (keys: %s)", part, strings.Join(overheadKeys, ", "))
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		k = strings.TrimSpace(k)
		if err != nil || !(x >= 0 || k == "overhead_per_row_ms") || x > 1e6 || x < -1e6 {
			return o, 0, fmt.Errorf("overheads: %s=%q: want a number of milliseconds >= 0", k, v)
		}
		d := msDur(x)
		switch k {
		case "overhead_ms":
			overhead = d
		case "overhead_per_row_ms":
			o.PerRow = d
		case "hold_lone_ms":
			o.Extra.HoldLoneMs = x
		case "hold_merged_ms":
			o.Extra.HoldMergedMs = x
		case "after_lone_ms":
			o.Extra.AfterLoneMs = x
		case "after_merged_ms":
			o.Extra.AfterMergedMs = x
		case "client_ms":
			o.Client = d
		default:
			return o, 0, fmt.Errorf("overheads: unknown key %q (keys: %s)", k, strings.Join(overheadKeys, ", "))
		}
	}
	return o, overhead, nil
}
