package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/emulator"
	"github.com/ratebatch/ratebatch/loadgen"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/preset"
	"github.com/ratebatch/ratebatch/sim"
	"github.com/ratebatch/ratebatch/trace"
)

// simLiveScale slows the emulated googlenet-p4 down so that the loads of the
// comparison stay within what a shared test machine generates.
const simLiveScale = 4

// TestSimPredictsLive offers the same load (constant rho 0.3 and 0.7 of
// B_max's capacity, and paper300 played 10x faster) to the simulator and to
// the live proxy in front of the exact emulator, per policy, and compares
// mean batch size, requests per joule and mean latency (the live one less
// the client's HTTP hop to the proxy; the proxy's own round trip to the
// server beyond compute, as its monitor measures it, is the simulated
// server's per-batch overhead, as it holds the server like compute does).
// Both run the same monitor and rules, fed the same way (server statistics
// and round trips apart), on the same arrivals; the clock is the only
// difference.
func TestSimPredictsLive(t *testing.T) {
	if testing.Short() {
		t.Skip("live load")
	}
	d := 4 * time.Second
	pols := []string{policy.NameBatchMonitorPlus}
	loads := []string{"rho 0.7"}
	tolB, tolE, tolL := 0.10, 0.06, 0.25
	if long() {
		d = 20 * time.Second
		pols = []string{policy.NameAdhoc, policy.NameBatchMonitor, policy.NameBatchMonitorPlus}
		loads = []string{"rho 0.3", "rho 0.7", "paper300/10"}
		tolB, tolE, tolL = 0.05, 0.03, 0.10
	}
	base, _ := preset.Lookup("googlenet-p4")
	p := base
	p.MaxBatch = 8 // the emulator's simple model
	p.AlphaMs, p.Tau0Ms = base.AlphaMs*simLiveScale, base.Tau0Ms*simLiveScale
	// The live proxy starts from the same line as the simulator: a profile.
	csv := filepath.Join(t.TempDir(), "simple.csv")
	var b strings.Builder
	b.WriteString("batch_size,latency_ms\n")
	for n := 1; n <= p.MaxBatch; n++ {
		fmt.Fprintf(&b, "%d,%g\n", n, p.TauMs(n))
	}
	if err := os.WriteFile(csv, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := trace.Lookup(trace.Paper300)
	if err != nil {
		t.Fatal(err)
	}
	if tr, err = tr.Compress(10); err != nil {
		t.Fatal(err)
	}
	rateOf := func(load string) (loadgen.Rate, *trace.Series) {
		var rho float64
		if _, err := fmt.Sscanf(load, "rho %g", &rho); err == nil {
			return loadgen.ConstantRate(rho * 1000 * p.MuPerMs(p.MaxBatch)), nil
		}
		return tr, tr
	}
	start := func(pol string) (*emulator.Server, *liveTest) {
		em, err := emulator.New(emulator.Options{Profile: base, TimeScale: simLiveScale})
		if err != nil {
			t.Fatal(err)
		}
		if err := em.Start("127.0.0.1:0", ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { em.Close() })
		lt := startLive(t, em.Addr(), nil, func(c *config.Config) {
			c.Policy.Window, c.Policy.Name = time.Second, pol
			c.Models = map[string]config.Model{emulator.SimpleModel: {ProfileCSV: csv}}
		})
		return em, lt
	}

	// The HTTP overhead: a lone client through the proxy, less tau(1).
	em, lt := start(policy.NameAdhoc)
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Target: lt.base, Model: emulator.SimpleModel, Rate: loadgen.ConstantRate(1e6), Duration: time.Minute,
		Requests: 200, MaxInFlight: 1, OnFull: loadgen.WaitWhenFull, Binary: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Two parts: the proxy's round trip to the server beyond the batch's
	// compute (the monitor measures it; it holds the server like compute
	// does, so the simulator gets it as part of tau0), and the client's own
	// hop to the proxy (subtracted from the live latency).
	snap := modelSnapshot(t, lt, emulator.SimpleModel)
	if snap.OverheadMs == nil {
		t.Fatalf("no overhead measured: %+v", snap)
	}
	batchOverhead := *snap.OverheadMs
	overhead := res.Summary.MeanLatencyMs - p.TauMs(1) - batchOverhead
	lt.stop()
	em.Close()
	t.Logf("HTTP overhead: a lone client's mean %.3f ms through the proxy = tau(1) %.3f ms + proxy-server round trip beyond compute %.3f ms + client-proxy hop %.3f ms",
		res.Summary.MeanLatencyMs, p.TauMs(1), batchOverhead, overhead)
	t.Logf("%-12s %-14s %7s %7s %6s %7s %7s %6s %8s %8s %6s", "load", "policy", "b sim", "b live", "err", "rpj sim", "rpj liv", "err", "lat sim", "lat liv", "err")

	for li, load := range loads {
		for _, pol := range pols {
			rate, series := rateOf(load)
			em, lt := start(pol)
			dur := d
			if series != nil {
				dur = series.Duration()
			}
			live, err := loadgen.Run(context.Background(), loadgen.Config{
				Target: lt.base, Model: emulator.SimpleModel, Rate: rate, Duration: dur, Seed: uint64(li + 1), Binary: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			// Every batch is answered before the summary returns.
			bLive := meanBatch(t, lt)
			// The proxy's round trip beyond compute over this run (it moves
			// with the machine's load): the mean upstream round trip per
			// batch less the mean compute the emulator reports.
			runOverhead := batchOverhead
			if rt, n := histogram(t, lt, "ratebatch_upstream_duration_seconds"); n > 0 {
				st, _ := em.Stats(emulator.SimpleModel)
				var ns, cnt uint64
				for _, b := range st.BatchStats {
					ns += b.ComputeInput.NS + b.ComputeInfer.NS + b.ComputeOutput.NS
					cnt += b.ComputeInfer.Count
				}
				if cnt > 0 {
					runOverhead = 1000*rt/float64(n) - float64(ns)/float64(cnt)/1e6
				}
			}
			joules, _ := em.EnergyJoules()
			lt.stop()
			em.Close()
			if live.Summary.OK != live.Summary.Scheduled {
				t.Errorf("%s %s: %d ok of %d", load, pol, live.Summary.OK, live.Summary.Scheduled)
			}
			rpjLive := float64(live.Summary.OK) / joules
			latLive := live.Summary.MeanLatencyMs - overhead

			pl, err := policy.New(pol, policy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// The simulated server: the profile's compute, and the round
			// trip beyond it apart (sim.Config.Overhead), so the simulated
			// monitor learns from statistics and round trips as the live one.
			ovh := time.Duration(runOverhead * float64(time.Millisecond))
			// The very arrivals the live load drew: another draw of the same
			// rate differs in its bursts, which near saturation (batchmonitor's
			// fixed batch size) moves the mean latency more than any
			// difference between the simulator and the proxy.
			arrivals, err := loadgen.Schedule(rate, uint64(li+1), dur, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(arrivals) != int(live.Summary.Scheduled) {
				t.Fatalf("%s: the schedule has %d arrivals, the live run scheduled %d", load, len(arrivals), live.Summary.Scheduled)
			}
			c := sim.Config{Profile: p, Policy: pl, Seed: uint64(li + 1), Window: time.Second, Arrivals: arrivals, Overhead: max(ovh, 0)}
			sr, err := sim.Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			eb, ee, el := bLive/sr.MeanBatchSize-1, rpjLive / *sr.RequestsPerJoule - 1, latLive/sr.MeanLatencyMs-1
			t.Logf("%-12s %-14s %7.3f %7.3f %+5.1f%% %7.2f %7.2f %+5.1f%% %8.3f %8.3f %+5.1f%%  (overhead %.2f ms)", load, pol,
				sr.MeanBatchSize, bLive, 100*eb, *sr.RequestsPerJoule, rpjLive, 100*ee, sr.MeanLatencyMs, latLive, 100*el, runOverhead)
			if (math.Abs(eb) > tolB || math.Abs(ee) > tolE || math.Abs(el) > tolL) && !raceEnabled {
				t.Errorf("%s %s: live differs from the simulation beyond %.0f%% (batch), %.0f%% (requests per joule), %.0f%% (latency)",
					load, pol, 100*tolB, 100*tolE, 100*tolL)
			}
		}
	}
}

// histogram returns the sum and count of one of the proxy's histograms.
func histogram(t *testing.T, lt *liveTest, name string) (sum float64, count uint64) {
	t.Helper()
	fams, err := lt.p.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				sum += h.GetSampleSum()
				count += h.GetSampleCount()
			}
		}
	}
	return sum, count
}
