package sim

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

func TestParseOverheads(t *testing.T) {
	o, over, err := ParseOverheads("overhead_ms=1.2, overhead_per_row_ms=-0.05,hold_lone_ms=0.04,hold_merged_ms=0.1,after_lone_ms=0.01,after_merged_ms=0.08,client_ms=0.3")
	want := Overheads{PerRow: -50 * time.Microsecond, Client: 300 * time.Microsecond,
		Extra: smdp.Extra{HoldLoneMs: 0.04, HoldMergedMs: 0.1, AfterLoneMs: 0.01, AfterMergedMs: 0.08}}
	if err != nil || o != want || over != 1200*time.Microsecond {
		t.Fatalf("got %+v, %v, %v; want %+v, 1.2ms", o, over, err, want)
	}
	for _, bad := range []string{"client_ms", "client_ms=-1", "hold_lone_ms=x", "speed=3", "after_merged_ms=NaN"} {
		if _, _, err := ParseOverheads(bad); err == nil {
			t.Errorf("ParseOverheads(%q) accepted", bad)
		}
	}
}

// On the same arrivals, an ad-hoc run with the live overheads' latency-only
// parts (no hold, so the batches are the same) is slower by exactly the
// client time and each row's wait after its batch, and its monitor learns
// the wait as the live one does.
func TestLiveOverheadsAddToLatency(t *testing.T) {
	p, err := preset.Lookup("googlenet-p4")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Profile: p, Policy: policy.Adhoc{}, RatePerSec: 0.5 * 1000 * p.MuPerMs(p.MaxBatch), Requests: 20000, Seed: 3}
	base, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Live = Overheads{Client: 500 * time.Microsecond, Extra: smdp.Extra{AfterLoneMs: 0.1, AfterMergedMs: 0.2}}
	live, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if live.Batches != base.Batches {
		t.Fatalf("batches %d, want the same %d", live.Batches, base.Batches)
	}
	d := live.MeanLatencyMs - base.MeanLatencyMs
	if !(d > 0.6-1e-6 && d < 0.7+1e-6) {
		t.Errorf("latency moved by %.4g ms, want 0.5 + between 0.1 and 0.2", d)
	}
	cfg.Live = Overheads{Extra: smdp.Extra{HoldLoneMs: 0.3, HoldMergedMs: 0.3}}
	held, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !(held.MeanLatencyMs > base.MeanLatencyMs) || math.IsNaN(held.MeanLatencyMs) {
		t.Errorf("a hold of 0.3 ms per batch: latency %.4g, want above %.4g", held.MeanLatencyMs, base.MeanLatencyMs)
	}
}
