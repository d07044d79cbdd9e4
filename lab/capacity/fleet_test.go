package capacity

import (
	"math"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

func TestPlanFleet(t *testing.T) {
	m := Model{AlphaMs: 0.3051, Tau0Ms: 1.052} // googlenet-p4
	e := &batchcost.Energy{BetaMJ: 19.90, Zeta0MJ: 19.60}
	for _, c := range []struct{ rate, target float64 }{{5000, 5}, {20000, 3}, {100, 2}, {9000, 50}} {
		plans, err := m.PlanFleet(c.rate, c.target, e, 20)
		if err != nil {
			t.Fatal(err)
		}
		if len(plans) != 3 {
			t.Fatalf("%d plans", len(plans))
		}
		first := plans[0]
		// The fewest GPUs meets the target, one fewer would not.
		if !(first.LatencyBoundMs <= c.target) {
			t.Errorf("rate %v target %v: %d GPUs bound %v ms over the target", c.rate, c.target, first.GPUs, first.LatencyBoundMs)
		}
		if first.GPUs > 1 {
			fewer := c.rate / 1000 / float64(first.GPUs-1)
			if l, err := m.Latency(fewer); err == nil && l.PhiMs <= c.target {
				t.Errorf("rate %v target %v: %d GPUs would do, plan says %d", c.rate, c.target, first.GPUs-1, first.GPUs)
			}
		}
		for i, p := range plans {
			if p.GPUs != first.GPUs+i || math.Abs(p.RatePerGPU*float64(p.GPUs)-c.rate) > 1e-6*c.rate {
				t.Errorf("plan %+v does not split %v requests/s", p, c.rate)
			}
			if i > 0 {
				// More GPUs: lower latency, no fuller batches, fewer requests per joule.
				prev := plans[i-1]
				if !(p.LatencyBoundMs < prev.LatencyBoundMs) || p.MinMeanBatch > prev.MinMeanBatch || !(*p.MinRequestsPerJoule < *prev.MinRequestsPerJoule) {
					t.Errorf("rate %v: %+v after %+v", c.rate, p, prev)
				}
			}
		}
	}
}

func TestPlanFleetErrors(t *testing.T) {
	m := Model{AlphaMs: 0.3051, Tau0Ms: 1.052}
	for _, c := range []struct {
		rate, target, idle float64
		want               string
	}{
		{0, 5, 0, "rate"},
		{math.Inf(1), 5, 0, "rate"},
		{100, 1, 0, "lone request"},
		{100, 5, -1, "idle power"},
		{1e12, 5, 0, "more than"},
	} {
		if _, err := m.PlanFleet(c.rate, c.target, nil, c.idle); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error about %s", c, err, c.want)
		}
	}
}
