package sim

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Overheads is a live proxy's time outside the server's compute beyond
// Config.Overhead, which a simulation adds so that its latencies are the
// ones a client of the live proxy sees (docs/SIMULATION.md, "The live
// overheads").
type Overheads struct {
	// PerRow is the round trip's growth beyond compute per row of a batch
	// (the proxy's /status: rule.outside.overhead_per_row_ms; its
	// overhead_ms is Config.Overhead). It may be negative (a server whose
	// timer rounds small batches up); a batch's overhead stays >= 0.
	PerRow time.Duration
	// Extra is the proxy's hold of the instance around a batch and each
	// caller's wait after it, lone and merged (rule.outside).
	Extra smdp.Extra
	// Client is each request's time the proxy does not see: the client's
	// and the network's, and the proxy's reading and writing of the HTTP
	// exchange (the client's mean latency less the proxy's queue wait,
	// round trip and wait after the batch, in an ad-hoc run).
	Client time.Duration
}

// Validate reports a negative part.
func (o Overheads) Validate() error {
	if o.Client < 0 {
		return fmt.Errorf("live overheads: client time must be >= 0, got %v", o.Client)
	}
	return o.Extra.Validate()
}

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
