package loadgen

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
)

// checkAccount asserts the invariants every run keeps, whatever the server
// did: scheduled = sent + dropped, sent = ok + errors, one record per
// arrival, and records that agree with the counts.
func checkAccount(t *testing.T, res Result) {
	t.Helper()
	s := res.Summary
	if s.Scheduled != s.Sent+s.Dropped {
		t.Errorf("scheduled %d != sent %d + dropped %d", s.Scheduled, s.Sent, s.Dropped)
	}
	if s.Sent != s.OK+s.Errors {
		t.Errorf("sent %d != ok %d + errors %d", s.Sent, s.OK, s.Errors)
	}
	if int64(len(res.Records)) != s.Scheduled {
		t.Errorf("%d records for %d arrivals", len(res.Records), s.Scheduled)
	}
	var byKind int64
	for _, n := range s.ErrorsByKind {
		byKind += n
	}
	if byKind != s.Errors {
		t.Errorf("errors by kind add up to %d, errors %d", byKind, s.Errors)
	}
	for i, r := range res.Records {
		if r.Err == KindNone && (r.Status != 200 || r.Latency <= 0) {
			t.Fatalf("record %d: ok with status %d, latency %v", i, r.Status, r.Latency)
		}
		if r.Err == KindDropped && (r.Latency != 0 || r.Status != 0) {
			t.Fatalf("record %d: dropped with status %d, latency %v", i, r.Status, r.Latency)
		}
	}
}

// countArrivals is how many arrivals the sampler draws for cfg: Run must
// schedule exactly these, however the server answers (open loop).
func countArrivals(t *testing.T, cfg Config) int64 {
	return int64(len(draw(t, cfg.Rate, cfg.Seed, cfg.Duration)))
}

// Both wire forms reach the server as such, answers verify, and the load is
// exactly the sampler's.
func TestRunVerifiesBothForms(t *testing.T) {
	tests := []struct {
		name   string
		binary bool
		rows   int
	}{
		{"json", false, 1},
		{"binary", true, 1},
		{"json 4 rows", false, 4},
		{"binary 4 rows", true, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, nil)
			cfg := Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(400), Duration: 300 * time.Millisecond,
				Seed: 5, Rows: tt.rows, Binary: tt.binary, Verify: true}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkAccount(t, res)
			s := res.Summary
			if want := countArrivals(t, cfg); s.Scheduled != want {
				t.Errorf("scheduled %d, want the sampler's %d", s.Scheduled, want)
			}
			if s.OK != s.Scheduled || s.Errors != 0 || s.Dropped != 0 {
				t.Fatalf("account %+v (first verify error %q), want every request ok", s, res.FirstVerifyError)
			}
			bin, js := srv.binaryBodies.Load(), srv.jsonBodies.Load()
			if tt.binary && (bin != s.Sent || js != 0) || !tt.binary && (js != s.Sent || bin != 0) {
				t.Fatalf("server saw %d binary and %d JSON bodies for %d sent, binary=%v", bin, js, s.Sent, tt.binary)
			}
			if s.P50LatencyMs <= 0 || s.P99LatencyMs < s.P50LatencyMs || s.MaxLatencyMs < s.P99LatencyMs {
				t.Fatalf("latencies p50 %v p99 %v max %v out of order", s.P50LatencyMs, s.P99LatencyMs, s.MaxLatencyMs)
			}
		})
	}
}

// Under failing and hanging servers the account still balances, and each
// failure is reported under its own kind, as often as the server did it.
func TestRunAccountsForFailures(t *testing.T) {
	tests := []struct {
		name    string
		faults  func(int64) fault
		fault   fault
		kind    string
		verify  bool
		timeout time.Duration
	}{
		{"503s", every(4, answer503), answer503, "http_status", false, 0},
		{"hangs time out", every(5, answerHang), answerHang, "timeout", false, 150 * time.Millisecond},
		{"closed connections", every(6, answerClose), answerClose, "connection", false, 0},
		{"wrong answers", every(3, answerWrong), answerWrong, "mismatch", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newFakeServer(t, tt.faults)
			cfg := Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(300), Duration: 400 * time.Millisecond,
				Seed: 11, Timeout: tt.timeout, Verify: tt.verify}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkAccount(t, res)
			s := res.Summary
			did := srv.counts(tt.fault)
			if did == 0 {
				t.Fatalf("the server never faulted; the test proves nothing")
			}
			got := s.ErrorsByKind[tt.kind]
			if tt.fault == answerHang {
				// On a loaded machine an answered request may also miss
				// the short timeout; every hung one must time out.
				if got < did || s.Errors != got || s.OK+got != s.Sent {
					t.Fatalf("errors %d, timeouts %d (all: %v), ok %d of %d sent; the server hung %d", s.Errors, got, s.ErrorsByKind, s.OK, s.Sent, did)
				}
				return
			}
			if got != did || s.Errors != did {
				t.Fatalf("errors %d, %s %d (all: %v); the server faulted %d times", s.Errors, tt.kind, got, s.ErrorsByKind, did)
			}
			if s.OK != srv.counts(answerOK) {
				t.Fatalf("ok %d, the server answered %d", s.OK, srv.counts(answerOK))
			}
			if tt.fault == answer503 && s.StatusCounts[503] != did {
				t.Fatalf("status counts %v, want %d 503s", s.StatusCounts, did)
			}
			if tt.verify && res.FirstVerifyError == "" {
				t.Fatalf("mismatches without a first verify error")
			}
		})
	}
}

// With the pool full, arrivals are dropped and counted, not queued. The
// server holds every request longer than the run sends, so exactly
// MaxInFlight requests go out and every other arrival is dropped.
func TestRunDropsWhenFull(t *testing.T) {
	srv := newFakeServer(t, func(int64) fault { return answerHang })
	cfg := Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(500), Duration: 300 * time.Millisecond,
		Seed: 2, Timeout: time.Second, MaxInFlight: 3}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAccount(t, res)
	s := res.Summary
	if s.Sent != 3 || s.ErrorsByKind["timeout"] != 3 || s.Dropped != s.Scheduled-3 {
		t.Fatalf("account %+v, want 3 sent (all timing out) and the rest dropped", s)
	}
	if want := countArrivals(t, cfg); s.Scheduled != want {
		t.Fatalf("scheduled %d, want the sampler's %d: a full pool must not slow the schedule", s.Scheduled, want)
	}
	if p := srv.peak.Load(); p != 3 {
		t.Fatalf("server saw %d requests at once, want MaxInFlight = 3", p)
	}
}

// WaitWhenFull delays arrivals instead: nothing dropped, the delay shows as lag.
func TestRunWaitsWhenFull(t *testing.T) {
	srv := newFakeServer(t, nil)
	srv.delay = 2 * time.Millisecond
	cfg := Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(1000), Duration: 200 * time.Millisecond,
		Seed: 3, MaxInFlight: 1, OnFull: WaitWhenFull}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAccount(t, res)
	s := res.Summary
	if s.Dropped != 0 || s.OK != s.Scheduled || s.Scheduled != countArrivals(t, cfg) {
		t.Fatalf("account %+v, want every arrival sent and ok", s)
	}
	if srv.peak.Load() != 1 {
		t.Fatalf("server saw %d at once, want 1", srv.peak.Load())
	}
	// 1000/s against one 2-ms slot: arrivals queue up for long.
	if s.LagMaxMs < 50 {
		t.Fatalf("max lag %.1f ms, want the queueing to show (> 50 ms)", s.LagMaxMs)
	}
}

// Requests caps the arrivals: with one slot and a rate far above the
// server's, the run is a closed loop of exactly that many requests that
// ends long before its nominal duration.
func TestRunRequestsMakesAClosedLoop(t *testing.T) {
	srv := newFakeServer(t, nil)
	srv.delay = time.Millisecond
	for _, n := range []int{1, 7, 40} {
		cfg := Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(1e6), Duration: time.Hour,
			Requests: n, Seed: 5, MaxInFlight: 1, OnFull: WaitWhenFull}
		start := time.Now()
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkAccount(t, res)
		if s := res.Summary; s.Scheduled != int64(n) || s.OK != int64(n) {
			t.Fatalf("Requests %d: scheduled %d ok %d", n, s.Scheduled, s.OK)
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("Requests %d: the run waited for its nominal duration", n)
		}
	}
	if srv.peak.Load() != 1 {
		t.Fatalf("server saw %d at once, want 1", srv.peak.Load())
	}
}

// Canceling the context ends the run at once: requests in flight are
// abandoned and counted as canceled, and the error says so.
func TestRunCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The server hangs every request and cancels the run at the fifth.
	srv := newFakeServer(t, func(n int64) fault {
		if n == 5 {
			cancel()
		}
		return answerHang
	})
	began := time.Now()
	res, err := Run(ctx, Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(200), Duration: time.Minute,
		Seed: 1, Timeout: time.Minute})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Fatalf("canceled run took %v to return", took)
	}
	checkAccount(t, res)
	s := res.Summary
	if s.Sent < 5 || s.ErrorsByKind["canceled"] != s.Sent {
		t.Fatalf("account %+v, want at least 5 sent, every one canceled", s)
	}
	if s.DurationS > 20 {
		t.Fatalf("sending window %.1fs, want it to end at the cancel", s.DurationS)
	}
}

func TestRunProgress(t *testing.T) {
	srv := newFakeServer(t, nil)
	var mu sync.Mutex
	var snaps []Snapshot
	res, err := Run(context.Background(), Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(500),
		Duration: 500 * time.Millisecond, Seed: 1, ProgressInterval: 100 * time.Millisecond,
		Progress: func(s Snapshot) { mu.Lock(); snaps = append(snaps, s); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(snaps) < 3 {
		t.Fatalf("%d snapshots in 0.5s at 0.1s intervals, want at least 3", len(snaps))
	}
	var withLatency int
	for i, s := range snaps {
		if i > 0 && (s.Elapsed <= snaps[i-1].Elapsed || s.Sent < snaps[i-1].Sent) {
			t.Fatalf("snapshot %d goes back: %+v after %+v", i, s, snaps[i-1])
		}
		if s.OK+s.Errors > s.Sent || s.Sent+s.Dropped > s.Scheduled || s.OK > res.Summary.OK {
			t.Fatalf("snapshot %d does not balance: %+v", i, s)
		}
		if s.Elapsed < 500*time.Millisecond && s.TargetRPS != 500 {
			t.Fatalf("snapshot %d: target %v req/s, want 500", i, s.TargetRPS)
		}
		if s.P50LatencyMs > 0 {
			withLatency++
			// Latencies come from the interval's ok answers.
			if s.P99LatencyMs < s.P50LatencyMs || s.OKRPS <= 0 {
				t.Fatalf("snapshot %d: p50 %v p99 %v ok/s %v", i, s.P50LatencyMs, s.P99LatencyMs, s.OKRPS)
			}
		}
	}
	if withLatency == 0 {
		t.Fatalf("no snapshot reported latencies: %+v", snaps)
	}
}

// A trace drives the run: arrivals follow the series (the sampler's count
// exactly), and per-segment counts of the records match the series.
func TestRunFollowsTrace(t *testing.T) {
	srv := newFakeServer(t, nil)
	rate := stepRate{every: 250 * time.Millisecond, rates: []float64{100, 1000}}
	cfg := Config{Target: srv.URL, Model: "simple", Rate: rate, Duration: 500 * time.Millisecond, Seed: 8}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAccount(t, res)
	if want := countArrivals(t, cfg); res.Summary.Scheduled != want {
		t.Fatalf("scheduled %d, want %d", res.Summary.Scheduled, want)
	}
	var first, second int
	for _, r := range res.Records {
		if due := r.Start - r.Lag; due < 250*time.Millisecond {
			first++
		} else {
			second++
		}
	}
	// Expected 25 and 250; Poisson sd 5 and 16.
	if first < 5 || first > 50 || second < 180 || second > 320 {
		t.Fatalf("arrivals per segment %d, %d; want about 25, 250", first, second)
	}
}

// A run lasts its duration even when the arrivals end early: the window
// is the one asked, so rates over it mean what they say.
func TestRunLastsItsDuration(t *testing.T) {
	srv := newFakeServer(t, nil)
	began := time.Now()
	res, err := Run(context.Background(), Config{Target: srv.URL, Model: "simple", Seed: 1, Duration: 300 * time.Millisecond,
		Rate: stepRate{every: 100 * time.Millisecond, rates: []float64{300, 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 300*time.Millisecond {
		t.Fatalf("run returned after %v, before its 300ms window ended", took)
	}
	if res.Summary.Scheduled == 0 || res.Summary.DurationS != 0.3 {
		t.Fatalf("summary %+v, want arrivals and a 0.3 s window", res.Summary)
	}
}

func TestRunWritesCSV(t *testing.T) {
	srv := newFakeServer(t, every(2, answer503))
	res, err := Run(context.Background(), Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(200),
		Duration: 200 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, res.Records); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if int64(len(lines)) != res.Summary.Scheduled+1 || lines[0] != CSVHeader {
		t.Fatalf("%d lines starting %q for %d requests", len(lines), lines[0], res.Summary.Scheduled)
	}
	var failed int64
	for _, l := range lines[1:] {
		if strings.HasSuffix(l, ",503,http_status") {
			failed++
		}
	}
	if failed != res.Summary.StatusCounts[503] || failed == 0 {
		t.Fatalf("%d CSV lines with 503, summary %d", failed, res.Summary.StatusCounts[503])
	}
	back, err := ReadCSV(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != len(res.Records) {
		t.Fatalf("read back %d records of %d", len(back), len(res.Records))
	}
	for i := range back {
		w := res.Records[i]
		if back[i].Status != w.Status || back[i].Err != w.Err || (back[i].Latency-w.Latency).Abs() > time.Microsecond ||
			(back[i].Start-w.Start).Abs() > time.Microsecond {
			t.Fatalf("record %d read back as %+v, wrote %+v", i, back[i], w)
		}
	}
	for _, bad := range []string{"", "a,b\n", CSVHeader + "\n1,2,200,bogus\n", CSVHeader + "\n-1,2,200,\n"} {
		if _, err := ReadCSV(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadCSV(%q) accepted", bad)
		}
	}
}

// A target that refuses connections fails every request as "connection";
// the inputs are given, so no metadata request is needed.
func TestRunServerDown(t *testing.T) {
	srv := newFakeServer(t, nil)
	srv.Close()
	res, err := Run(context.Background(), Config{Target: srv.URL, Model: "simple", Inputs: simpleMetadata.Inputs,
		Rate: ConstantRate(200), Duration: 100 * time.Millisecond, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	checkAccount(t, res)
	if s := res.Summary; s.Sent == 0 || s.ErrorsByKind["connection"] != s.Sent {
		t.Fatalf("account %+v, want every request a connection error", s)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	srv := newFakeServer(t, nil)
	ok := Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(10), Duration: time.Second}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no duration", func(c *Config) { c.Duration = 0 }, "duration must be positive"},
		{"no rate", func(c *Config) { c.Rate = nil }, "no arrival rate"},
		{"zero rate", func(c *Config) { c.Rate = ConstantRate(0) }, "must be positive"},
		{"no model", func(c *Config) { c.Model = "" }, "no model name"},
		{"bad target", func(c *Config) { c.Target = "ftp://x" }, "scheme must be http"},
		{"negative rows", func(c *Config) { c.Rows = -1 }, "rows per request"},
		{"negative timeout", func(c *Config) { c.Timeout = -time.Second }, "timeout must be positive"},
		{"huge pool", func(c *Config) { c.MaxInFlight = 1 << 20 }, "at most 65536"},
		{"unknown policy", func(c *Config) { c.OnFull = 7 }, "full-pool policy"},
		{"negative warm-up", func(c *Config) { c.Warmup = -time.Second }, "warm-up must be between"},
		{"unknown model", func(c *Config) { c.Model = "nope" }, "status 404"},
		{"unverifiable model", func(c *Config) { c.Model = "nope"; c.Verify = true }, `cannot verify model "nope"`},
		{"rows without batch dimension", func(c *Config) {
			c.Rows = 2
			c.Inputs = []kserve.TensorMetadata{{Name: "X", Datatype: "INT32", Shape: []int64{16}}}
		}, "no batch dimension"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := ok
			tt.change(&cfg)
			_, err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	if n := srv.n.Load(); n != 0 {
		t.Fatalf("bad configs sent %d requests", n)
	}
}

// A warm-up reaches the server on the run's client, but stays out of the
// records and the summary, which are those of the same run without it;
// Result.Warmup accounts for it.
func TestRunWarmup(t *testing.T) {
	srv := newFakeServer(t, nil)
	cfg := Config{Target: srv.URL, Model: "simple", Rate: ConstantRate(400), Duration: 300 * time.Millisecond, Seed: 9}
	cold, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cold.Warmup.Scheduled != 0 || cold.Warmup.Sent != 0 {
		t.Fatalf("a run without warm-up accounts for one: %+v", cold.Warmup)
	}
	before := srv.n.Load()
	cfg.Warmup = 200 * time.Millisecond
	warm, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAccount(t, warm)
	if warm.Summary.Scheduled != cold.Summary.Scheduled || int64(len(warm.Records)) != warm.Summary.Scheduled {
		t.Fatalf("with a warm-up the run scheduled %d (%d records), without %d: the warm-up changed the run's arrivals",
			warm.Summary.Scheduled, len(warm.Records), cold.Summary.Scheduled)
	}
	w := warm.Warmup
	if w.OK < 40 || w.OK != w.Scheduled {
		t.Fatalf("warm-up of 200 ms at 400/s: %+v", w)
	}
	if got, want := srv.n.Load()-before, warm.Summary.Sent+w.Sent; got != want {
		t.Fatalf("server saw %d requests, the run and its warm-up sent %d", got, want)
	}
	// Each record's arrival (its send time less its lag, or a dropped
	// one's start) is the cold run's: same seed, same schedule.
	due := func(r Record) time.Duration { return r.Start - r.Lag }
	for i := range warm.Records {
		if due(warm.Records[i]) != due(cold.Records[i]) {
			t.Fatalf("arrival %d at %v with a warm-up, %v without", i, due(warm.Records[i]), due(cold.Records[i]))
		}
	}
}
