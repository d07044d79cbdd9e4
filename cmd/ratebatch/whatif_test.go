package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// A proxy's recent arrivals, exported by GET /arrivals, replay with
// `ratebatch load --trace` against another server (here the emulator
// itself, as a staging Triton): as many calls, in the same bursts. And
// `ratebatch whatif` prints the what-if of those minutes in 100 columns.
func TestArrivalsReplayWithLoadAndWhatIf(t *testing.T) {
	if raceEnabled {
		t.Skip("the bursts a load keeps, and the line a proxy learns from them, are timings: make test runs this without the race detector")
	}
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1, IdleWatts: 20})
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Power.MetricsURL = "http://" + em.MetricsAddr() + "/metrics"
		c.Power.Interval = 20 * time.Millisecond
		c.WhatIf.MinArrivals = 100
	})
	dir := t.TempDir()
	// Production: bursts of 400 calls a second for 500 ms, then 20 a
	// second for 500 ms, for 8 s.
	var prod strings.Builder
	prod.WriteString("time_s,rate_rps\n")
	for s := 0.0; s < 8; s++ {
		fmt.Fprintf(&prod, "%g,400\n%g,400\n%g,20\n%g,20\n", s, s+0.4999, s+0.5, s+0.9999)
	}
	fmt.Fprintf(&prod, "8,20\n")
	prodCSV := filepath.Join(dir, "prod.csv")
	if err := os.WriteFile(prodCSV, []byte(prod.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"load", "--target", p.Base, "--model", "simple", "--binary", "--trace", prodCSV, "--seed", "3",
		"--csv", filepath.Join(dir, "prod.load.csv")}, &out, &errb); code != 0 {
		t.Fatalf("load through the proxy: exit %d: %s", code, errb.String())
	}
	sent := countRecords(t, filepath.Join(dir, "prod.load.csv"))

	// The export needs the token.
	req, _ := http.NewRequest(http.MethodGet, p.Admin+"/arrivals?model=simple&minutes=1&bin=100ms", nil)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("/arrivals without the token: %v %v, want 401", res.StatusCode, err)
	}
	req.Header.Set("Authorization", "Bearer test-token")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	exported, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("/arrivals: %d %s", res.StatusCode, exported)
	}
	arrivalsCSV := filepath.Join(dir, "simple.arrivals.csv")
	if err := os.WriteFile(arrivalsCSV, exported, 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run(context.Background(), []string{"load", "--target", "http://" + em.Addr(), "--model", "simple", "--binary", "--trace", arrivalsCSV,
		"--seed", "4", "--csv", filepath.Join(dir, "staging.load.csv")}, &out, &errb); code != 0 {
		t.Fatalf("load --trace of the export: exit %d: %s", code, errb.String())
	}
	starts := startTimes(t, filepath.Join(dir, "staging.load.csv"))
	// Poisson within each bin: as many calls within 5 standard deviations.
	if d := float64(len(starts) - sent); d*d > 25*float64(sent) {
		t.Errorf("the export replayed %d calls, production sent %d", len(starts), sent)
	}
	// The bursts come back: the calls in the first half of each second of
	// the production trace's time outnumber those in the second half.
	first := bursts(starts)
	t.Logf("production sent %d calls; the export replayed %d, %.0f%% in the bursts", sent, len(starts), 100*first)
	if first < 0.8 {
		t.Errorf("%.0f%% of the replayed calls in the bursts' halves, want about 95%%", 100*first)
	}

	out.Reset()
	errb.Reset()
	// The replay takes its share of a core: minutes under the race detector
	// on a busy machine, not a timing this test asserts.
	if code := run(context.Background(), []string{"whatif", "--admin", p.Admin, "--model", "simple", "--minutes", "1", "--timeout", "10m"}, &out, &errb); code != 0 {
		t.Fatalf("whatif: exit %d: %s", code, errb.String())
	}
	table := out.String()
	for _, want := range []string{"what-if for model simple", "in force: budget", "adhoc", "maxbatch delay", "recommended:", "assumptions:"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	for i, line := range strings.Split(table, "\n") {
		if len([]rune(line)) > 100 {
			t.Errorf("line %d is %d columns wide: %q", i+1, len([]rune(line)), line)
		}
	}
}

func countRecords(t *testing.T, path string) int { return len(startTimes(t, path)) }

// startTimes are the send times (ms from the start) of a load's records.
func startTimes(t *testing.T, path string) []float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) < 2 {
		t.Fatalf("%s: %v, %d rows", path, err, len(rows))
	}
	var out []float64
	for _, r := range rows[1:] {
		v, err := strconv.ParseFloat(r[0], 64)
		if err != nil {
			t.Fatalf("%s: start %q", path, r[0])
		}
		out = append(out, v)
	}
	return out
}

// bursts is the largest share of calls sent within half of every second,
// over the phases of that half: about half for calls sent evenly, near
// all for the production trace's bursts.
func bursts(startsMs []float64) float64 {
	if len(startsMs) == 0 {
		return 0
	}
	// The export starts where the record began, not on a second of the
	// production trace: the bursts come back at the trace's period, at a
	// phase the test does not know. The share is the best over phases, in
	// steps of 50 ms.
	best := 0
	for phase := 0; phase < 1000; phase += 50 {
		in := 0
		for _, s := range startsMs {
			if ms := (int(s-startsMs[0]) + phase) % 1000; ms < 500 {
				in++
			}
		}
		best = max(best, in)
	}
	return float64(best) / float64(len(startsMs))
}
