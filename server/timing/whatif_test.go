package timing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/preset"
	"github.com/ratebatch/ratebatch/lab/trace"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/server/servertest"
	"github.com/ratebatch/ratebatch/whatif"
)

// TestWhatIfPredictsLived: the what-if's replay of the setting in force
// (the default budget) over a run's minutes, against what the run lived
// over the same minutes, as the proxy measured it: mean and p99 latency
// inside the proxy, and the meter's requests per joule. Poisson at about
// half the emulated GPU's capacity; the long version adds a bursty trace
// and holds the done-when margins (10%, 10% and 3%).
func TestWhatIfPredictsLived(t *testing.T) {
	timing(t)
	d := 15 * time.Second
	tolMean, tolP99, tolRPJ := 0.20, 0.30, 0.05
	loads := []string{"poisson"}
	if servertest.Long() {
		d = 60 * time.Second
		tolMean, tolP99, tolRPJ = 0.10, 0.10, 0.03
		loads = append(loads, "mmpp")
	}
	for _, load := range loads {
		t.Run(load, func(t *testing.T) {
			base, _ := preset.Lookup(preset.DefaultPreset)
			em := emulatortest.Start(t, emulator.Options{Profile: base, TimeScale: simLiveScale, IdleWatts: 20})
			p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
				c.Power.MetricsURL = "http://" + em.MetricsAddr() + "/metrics"
				c.Power.Interval = 20 * time.Millisecond
				c.Policy.Window = time.Second
			})
			// The simple model's capacity at B_max 8 on the slowed line.
			mu := 1000 * 8 / (simLiveScale * (base.AlphaMs*8 + base.Tau0Ms))
			var rate loadgen.Rate = loadgen.ConstantRate(0.5 * mu)
			if load == "mmpp" {
				// The built-in two-state load (1400 and 200 req/s), scaled
				// to this GPU: 0.7 and 0.1 of its capacity.
				tr, err := trace.Lookup(trace.MMPP)
				if err != nil {
					t.Fatal(err)
				}
				if tr, err = tr.Scale(0.7 * mu / 1400); err != nil {
					t.Fatal(err)
				}
				rate = tr
				d = min(d, tr.Duration())
			}
			// Idle first, so that the meter learns the idle power (and the
			// energy line what the batches add to it); a warm-up teaches the
			// line and the energy line; the what-if window then holds the
			// measured load alone.
			testpoll.Until(t, "the idle power measured", func() bool {
				var st struct {
					Energy power.Snapshot `json:"energy"`
				}
				res, err := http.Get(p.Admin + "/status")
				if err != nil {
					return false
				}
				defer res.Body.Close()
				if json.NewDecoder(res.Body).Decode(&st) != nil {
					return false
				}
				for _, g := range st.Energy.GPUs {
					if g.IdlePowerW != nil {
						return true
					}
				}
				return false
			})
			warm := loadgen.Config{Target: p.Base, Model: emulator.SimpleModel, Rate: loadgen.ConstantRate(0.5 * mu), Duration: 5 * time.Second, Seed: 9, Binary: true}
			if _, err := loadgen.Run(context.Background(), warm); err != nil {
				t.Fatal(err)
			}
			testpoll.Until(t, "the energy line learnt", func() bool {
				m, ok := p.Models().Monitor(emulator.SimpleModel)
				return ok && m.Energy() != nil
			})
			time.Sleep(1100 * time.Millisecond) // a sample between the warm-up and the load
			start := time.Now()
			live, err := loadgen.Run(context.Background(), loadgen.Config{Target: p.Base, Model: emulator.SimpleModel, Rate: rate, Duration: d, Seed: 1, Binary: true})
			if err != nil {
				t.Fatal(err)
			}
			if live.Summary.OK != live.Summary.Scheduled {
				t.Fatalf("%d ok of %d", live.Summary.OK, live.Summary.Scheduled)
			}
			time.Sleep(1100 * time.Millisecond) // the last second's sample
			minutes := time.Since(start).Minutes()
			rep, _, err := whatif.Ask(context.Background(), http.DefaultClient, p.Admin, emulator.SimpleModel, minutes, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !rep.Enough {
				t.Fatalf("no what-if: %s", rep.Reason)
			}
			cur := rep.Points[0]
			l, c := rep.Lived, rep.CheckVsLived
			t.Logf("%s: %d calls over %.1f s; replay of %s: mean %.3f ms, p99 %.3f ms, %.3f req/J; lived: mean %.3f, p99 %.3f, %.3f req/J (ratios %.3f %.3f %.3f); took %.1f s",
				load, rep.Arrivals.Total, rep.Seconds, cur.Label, cur.MeanMs, cur.P99Ms, deref(cur.RequestsPerJoule), deref(l.MeanMs), deref(l.P99Ms),
				deref(l.RequestsPerJoule), deref(c.Mean), deref(c.P99), deref(c.RequestsPerJoule), rep.TookSeconds)
			t.Logf("line %+v; zeta %.4g*b + %.4g mJ, idle %.4g W", rep.Line, deref(rep.Line.BetaMJ), deref(rep.Line.Zeta0MJ), deref(rep.Line.IdleWatts))
			if !cur.Current || rep.Arrivals.Total < int(live.Summary.OK)*9/10 {
				t.Fatalf("the replay's first point %q, %d arrivals of the run's %d", cur.Label, rep.Arrivals.Total, live.Summary.OK)
			}
			for _, ck := range []struct {
				name string
				r    *float64
				tol  float64
			}{{"mean", c.Mean, tolMean}, {"p99", c.P99, tolP99}, {"requests per joule", c.RequestsPerJoule, tolRPJ}} {
				if ck.r == nil || math.Abs(*ck.r-1) > ck.tol {
					t.Errorf("%s: predicted over lived %s, want within %.0f%%", ck.name, ratioString(ck.r), 100*ck.tol)
				}
			}
		})
	}
}

func deref(v *float64) float64 {
	if v == nil {
		return math.NaN()
	}
	return *v
}

func ratioString(v *float64) string {
	if v == nil {
		return "missing"
	}
	return fmt.Sprintf("%.3f", *v)
}
