package loadgen

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ratebatch/ratebatch/kserve/grpcwire"
)

// WriteSummary prints s as the load command's summary lines. Over gRPC
// (grpc true) the answers, which Summary counts under the HTTP status of
// their code (grpcwire.HTTPStatus), are printed as gRPC codes
// (grpcwire.Code); codes that share an HTTP status (UNKNOWN, INTERNAL and
// DATA_LOSS all count as 500) print as the one Code gives back.
func WriteSummary(w io.Writer, s Summary, grpc bool) {
	fmt.Fprintf(w, "scheduled %d, sent %d, dropped_by_client %d; ok %d, errors %d%s\n",
		s.Scheduled, s.Sent, s.Dropped, s.OK, s.Errors, CountsText(s.ErrorsByKind))
	statuses := make(map[string]int64, len(s.StatusCounts))
	for code, n := range s.StatusCounts {
		if grpc {
			statuses[grpcwire.Code(code).String()] += n
		} else {
			statuses[fmt.Sprint(code)] = n
		}
	}
	if len(statuses) > 0 {
		kind := "HTTP"
		if grpc {
			kind = "gRPC"
		}
		fmt.Fprintf(w, "%s status%s\n", kind, CountsText(statuses))
	}
	fmt.Fprintf(w, "offered %.1f req/s over %.1f s; throughput %.1f ok/s over %.1f s\n",
		s.OfferedRPS, s.DurationS, s.ThroughputRPS, s.ElapsedS)
	fmt.Fprintf(w, "latency ms (ok answers): mean %.3f, p50 %.3f, p90 %.3f, p99 %.3f, p99.9 %.3f, max %.3f\n",
		s.MeanLatencyMs, s.P50LatencyMs, s.P90LatencyMs, s.P99LatencyMs, s.P999LatencyMs, s.MaxLatencyMs)
	fmt.Fprintf(w, "client send lag ms: p99 %.3f, max %.3f\n", s.LagP99Ms, s.LagMaxMs)
}

// WriteVerified prints the verdict of Config.Verify on s: every answer
// checked out, or how many did not.
func WriteVerified(w io.Writer, s Summary) {
	if bad := s.Unverified(); bad > 0 {
		fmt.Fprintf(w, "verify: %d of %d answers failed verification\n", bad, s.OK+bad)
		return
	}
	fmt.Fprintf(w, "verify: all %d answers verified against their own inputs\n", s.OK)
}

// CountsText renders counts as " (a 3, b 1)", largest first; "" when empty.
func CountsText(counts map[string]int64) string {
	if len(counts) == 0 {
		return ""
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(counts[b], counts[a]), strings.Compare(a, b))
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, counts[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// WriteProgress prints one line of a run's progress (Config.Progress).
func WriteProgress(w io.Writer, s Snapshot) {
	fmt.Fprintf(w, "%6.1fs target %7.1f/s sent %7.1f/s ok %7.1f/s p50 %7.3f ms p99 %7.3f ms in flight %d dropped %d errors %d\n",
		s.Elapsed.Seconds(), s.TargetRPS, s.SentRPS, s.OKRPS, s.P50LatencyMs, s.P99LatencyMs, s.InFlight, s.Dropped, s.Errors)
}

// WriteJSON writes r's Summary as the load command's indented JSON: the
// summary's keys, the first verification error, and with warmup the
// warm-up's own summary, which the rest leaves out.
func (r Result) WriteJSON(w io.Writer, warmup bool) error {
	out := struct {
		Summary
		FirstVerifyError string   `json:"first_verify_error,omitempty"`
		Warmup           *Summary `json:"warmup,omitempty"`
	}{Summary: r.Summary, FirstVerifyError: r.FirstVerifyError}
	if warmup {
		out.Warmup = &r.Warmup
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// WriteText prints the run of c as the load command's text: a line naming
// the load (load describes the arrivals), the summary, and with c.Verify
// the verdict.
func (r Result) WriteText(w io.Writer, c Config, load string) {
	form := "JSON"
	switch {
	case c.GRPC:
		form = "gRPC"
	case c.Binary:
		form = "binary"
	}
	fmt.Fprintf(w, "load: %s for %v against %s, model %s (%s, %d row(s)/request, %d distinct bodies, seed %d)\n",
		load, c.Duration, c.Target, c.Model, form, c.Rows, r.Payloads, c.Seed)
	WriteSummary(w, r.Summary, c.GRPC)
	if c.Verify {
		WriteVerified(w, r.Summary)
	}
}
