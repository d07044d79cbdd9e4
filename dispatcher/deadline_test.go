package dispatcher

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratebatch/ratebatch/policy"
)

// A batch's upstream call is bounded by its callers' own deadlines (a gRPC
// caller's), not by the proxy's: an upstream slower than the configured
// limit (here 100 ms for 1 s) answers a caller whose deadline allows
// it; a caller whose deadline passes first gets 504 without the model
// being blamed; a caller with no deadline (an HTTP caller) waits as long
// as Triton takes when no limit is configured, and is cut at the
// configured limit otherwise, which counts as the model's timeout.
func TestBatchBoundedByItsCallersDeadline(t *testing.T) {
	tests := []struct {
		name     string
		limit    time.Duration // upstream_client.timeout
		deadline time.Duration // the caller's; 0: none
		status   int           // 0: answered
		failing  bool
	}{
		{"deadline past the limit", 100 * time.Millisecond, 3 * time.Second, 0, false},
		{"deadline before the answer", 100 * time.Millisecond, 200 * time.Millisecond, http.StatusGatewayTimeout, false},
		{"no deadline, no limit", 0, 0, 0, false},
		{"no deadline, the limit", 100 * time.Millisecond, 0, http.StatusGatewayTimeout, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStandIn(t)
			const slow = time.Second
			s.delay.Store(int64(slow))
			up, err := NewHTTPUpstream(s.URL, 8, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			m := NewMetrics(nil)
			d := startModel(t, Options{Upstream: up, Metrics: m, Outlier: Outlier{ConsecutiveErrors: 1, ProbeInterval: time.Hour}},
				ModelSpec{Name: "simple", MaxBatch: 8, QueueRows: 64, Planner: newPlanner(policy.Fill{Policy: "test", Batch: 1})})
			ctx := context.Background()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			start := time.Now()
			r := d.Submit(ctx, "simple", wired(t, call(t, 1, 1), false))
			took := time.Since(start)
			if tt.status == 0 {
				if r.Err != nil || r.Wire == nil {
					t.Fatalf("after %v: %v, want Triton's answer", took, r.Err)
				}
				r.Release()
				if took < slow {
					t.Fatalf("answered in %v, before the upstream's %v", took, slow)
				}
			} else if status(r.Err) != tt.status || took >= slow {
				t.Fatalf("after %v: %v, want %d before the upstream's answer", took, r.Err, tt.status)
			}
			if f, why := d.Failing("simple"); f != tt.failing {
				t.Fatalf("failing %v (%s), want %v", f, why, tt.failing)
			}
			if tt.deadline > 0 && tt.status != 0 {
				if n := testutil.ToFloat64(m.UpstreamErrors.WithLabelValues("simple", "deadline")); n != 1 {
					t.Fatalf("upstream errors of kind deadline: %v, want 1", n)
				}
			}
		})
	}
}
