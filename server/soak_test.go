package server_test

// The soak: a high steady rate for minutes while the upstream misbehaves at
// random (failed batches, dropped connections, slow batches, hung batches,
// restarts). Nothing may be lost, the books must balance, the p99 of every
// window must stay bounded, and the proxy must end with the goroutines and
// memory it started with. CI runs it for a minute; RATEBATCH_SOAK=30m (see
// scripts/soak.sh) runs it longer.

import (
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/lab/loadgen"
	"github.com/ratebatch/ratebatch/lab/stats"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// soakSettings reads RATEBATCH_SOAK (a duration, default 60s) and
// RATEBATCH_SOAK_RATE (requests per second, default 300).
func soakSettings(t *testing.T) (time.Duration, float64) {
	d, rate := 60*time.Second, 300.0
	if v := os.Getenv("RATEBATCH_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d < 10*time.Second {
			t.Fatalf("RATEBATCH_SOAK=%q: want a duration of at least 10s, e.g. 30m", v)
		}
	}
	if v := os.Getenv("RATEBATCH_SOAK_RATE"); v != "" {
		var err error
		if rate, err = strconv.ParseFloat(v, 64); err != nil || !(rate > 0) {
			t.Fatalf("RATEBATCH_SOAK_RATE=%q: want a positive number of requests per second", v)
		}
	}
	return d, rate
}

// soakFaults draws a fault per batch: 1% fail with 500, 1% drop the
// connection (the proxy retries), 1% take 30 ms longer (ten times a full
// batch), and one in 4000 hangs until the proxy's upstream timeout. At
// most one batch hangs at a time (none within soakHangApart of the last):
// two at once would hold both instances, the whole GPU, for the upstream
// timeout, and every request of that half second would wait it out: two
// hangs forced at once read a worst window p99 of 372 ms, and a CI run
// (at 593431f) 650 ms, against 120-168 ms in four runs without. A whole
// GPU hung is the outlier detector's case (hung_min), tested in package
// dispatcher.
type soakFaults struct {
	mu       sync.Mutex
	rng      *rand.Rand
	n        map[string]int
	lastHang time.Time
}

// soakHangApart keeps hangs apart: the upstream timeout and a margin.
const soakHangApart = time.Second

func (f *soakFaults) fault(emulator.BatchInfo) emulator.Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch x := f.rng.Float64(); {
	case x < 0.01:
		f.n["status_500"]++
		return emulator.Fault{Status: 500, Message: "soak: injected failure"}
	case x < 0.02:
		f.n["drop"]++
		return emulator.Fault{Drop: true}
	case x < 0.03:
		f.n["slow"]++
		return emulator.Fault{Delay: 30 * time.Millisecond}
	case x < 0.03025 && time.Since(f.lastHang) >= soakHangApart:
		f.n["hang"]++
		f.lastHang = time.Now()
		return emulator.Fault{Hang: true}
	}
	return emulator.Fault{}
}

func (f *soakFaults) counts() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.n)
}

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	d, rate := soakSettings(t)
	faults := &soakFaults{rng: rand.New(rand.NewPCG(9, 9)), n: map[string]int{}}
	// Two instances, as a GPU with two model instances: a hung batch holds
	// one while the other serves.
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, Instances: 2, Jitter: 0.2, Seed: 7, Fault: faults.fault})
	addr := em.Addr()
	const upstreamTimeout = 500 * time.Millisecond
	lt := servertest.Start(t, addr, nil, func(c *config.Config) { c.Upstreams.Timeout = upstreamTimeout })
	offerLoad(t, lt.Base, loadgen.ConstantRate(rate/4), time.Second, 10) // warm up
	before := takeFootprint()
	base := settled(t, lt, "simple")

	// The upstream restarts every 20 s: down for 200 ms.
	stop := make(chan struct{})
	var restarts int
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Second):
			}
			em.Close()
			time.Sleep(200 * time.Millisecond)
			if err := em.Start(addr, ""); err != nil {
				t.Errorf("restarting the upstream: %v", err)
				return
			}
			restarts++
		}
	})
	res := offerLoad(t, lt.Base, loadgen.ConstantRate(rate), d, 11)
	close(stop)
	chaos.Wait()
	l := settled(t, lt, "simple").minus(base)
	s := res.Summary
	checkBooks(t, s, l, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout)

	// The books as exported on /metrics agree too.
	_, m := getText(t, lt.Admin+"/metrics")
	acc := metricValue(m, `ratebatch_requests_accepted_total{model="simple"}`)
	ans := metricValue(m, `ratebatch_requests_answered_total{model="simple",outcome="ok"}`) +
		metricValue(m, `ratebatch_requests_answered_total{model="simple",outcome="error"}`)
	if acc == 0 || acc != ans {
		t.Fatalf("/metrics: accepted %v != answered %v", acc, ans)
	}

	// Bounded p99 in every 10 s window, so slow decay shows too.
	windows := windowP99(res.Records, 10*time.Second)
	worst := slices.Max(windows)
	fc := faults.counts()
	t.Logf("soak %v at %.0f req/s: %d sent, %d ok, %d errors %v; p50 %.1f ms, p99 %.1f ms, max %.1f ms; worst 10 s window p99 %.1f ms (%d windows)",
		d, rate, s.Sent, s.OK, s.Errors, s.StatusCounts, s.P50LatencyMs, s.P99LatencyMs, s.MaxLatencyMs, worst, len(windows))
	t.Logf("faults injected: %v, %d upstream restarts; upstream errors seen by the proxy: %v", fc, restarts, l.upstream)
	if s.Sent < int64(float64(d/time.Second)*rate*0.9) {
		t.Fatalf("only %d requests sent: the load generator did not keep the rate", s.Sent)
	}
	// A full batch takes 3.5 ms; a request waits behind at most a slow
	// (30 ms) or restarted batch, and a hung one (500 ms) holds one of two
	// instances. The worst window (one with a restart, 200 ms down) read
	// 235 ms under -race alone on two cores; under -race beside the other
	// packages' tests (CI) it read 337 and 1072 ms, the machine's load,
	// not the proxy's decay: the bound holds without the detector (make
	// test-go runs this test so too).
	if worst > 250 {
		if raceEnabled {
			t.Logf("p99 of a 10 s window reached %.1f ms (bound 250 without the race detector)", worst)
		} else {
			t.Fatalf("p99 of a 10 s window reached %.1f ms, want <= 250", worst)
		}
	}
	if fc["status_500"] == 0 || fc["drop"] == 0 || l.upstream["connection_retry"] == 0 {
		t.Fatalf("faults %v, upstream errors %v: the soak did not exercise the faults", fc, l.upstream)
	}
	res.Records = nil // the records are the test's memory, not the proxy's
	expectNoLeak(t, before)
}

// windowP99 returns the p99 latency of the ok requests sent in each window
// (a window without any counts 0).
func windowP99(records []loadgen.Record, window time.Duration) []float64 {
	var lat [][]time.Duration
	for _, r := range records {
		if r.Err != loadgen.KindNone {
			continue
		}
		i := int(r.Start / window)
		for len(lat) <= i {
			lat = append(lat, nil)
		}
		lat[i] = append(lat[i], r.Latency)
	}
	out := make([]float64, len(lat))
	for i, l := range lat {
		slices.Sort(l)
		out[i] = float64(stats.Percentile(l, 99)) / float64(time.Millisecond)
	}
	if len(out) == 0 {
		return []float64{0}
	}
	return out
}
