package profiler

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/regression"
)

// TestProfileMeasuresTheUpstreamLine profiles the emulator as `ratebatch
// profile --upstream URL --model simple --samples 8 --json` does (warm-up
// 3, binary tensors), then fits the samples it writes as `fit --csv` would.
func TestProfileMeasuresTheUpstreamLine(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1}) // googlenet-p4: tau(b) = 0.3051*b + 1.052 ms
	res, err := Run(context.Background(), Options{Upstream: "http://" + em.Addr(), Model: "simple", Samples: 8, Warmup: 3,
		Binary: true, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := res.WriteJSON(&out, "simple"); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Alpha       float64  `json:"alpha_ms"`
		Tau0        float64  `json:"tau0_ms"`
		ServerAlpha *float64 `json:"server_alpha_ms"`
		ServerTau0  *float64 `json:"server_tau0_ms"`
		N           int      `json:"n"`
		Sizes       []struct {
			Batch int `json:"batch_size"`
		} `json:"sizes"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if len(got.Sizes) != 8 || got.N != 64 {
		t.Fatalf("measured %d sizes, %d samples; want 8 sizes (max_batch_size) of 8", len(got.Sizes), got.N)
	}
	// The round trip adds HTTP time to tau0; the slope is the emulator's.
	if got.Alpha < 0.2 || got.Alpha > 0.45 || got.Tau0 < 1.0 || got.Tau0 > 4 {
		t.Fatalf("fitted tau(b) = %.3f*b + %.3f ms, want about 0.305*b + 1.05 (+ HTTP overhead)", got.Alpha, got.Tau0)
	}
	// The server's own statistics give its compute line, without HTTP: the
	// emulator's line plus its own input and output handling (a few tens of
	// microseconds), 0.307*b + 1.11 ms on a quiet machine against a round
	// trip of 0.315*b + 1.65. The emulator sleeps for tau(b), and on a
	// loaded CI host late wake-ups add to both lines alike (0.266*b + 1.55
	// once), so the bounds are held against the round trip of the same
	// run: the compute line must lie below it by part of the HTTP time
	// (a line from the round trip's statistic would not) and above the
	// emulator's own intercept (one from the queue's would not).
	if got.ServerAlpha == nil || *got.ServerAlpha < 0.2 || *got.ServerAlpha > 0.45 || *got.ServerTau0 < 1.0 ||
		4**got.ServerAlpha+*got.ServerTau0 > 4*got.Alpha+got.Tau0-0.1 {
		t.Fatalf("server line %s against the round trip's %.4f*b + %.4f: want the emulator's 0.3051*b + 1.052 (+ late wake-ups), below the round trip",
			fmtLine(got.ServerAlpha, got.ServerTau0), got.Alpha, got.Tau0)
	}
	// The samples as the profile CSV holds them fit again.
	var csv bytes.Buffer
	if err := regression.WriteCSV(&csv, res.Samples); err != nil {
		t.Fatal(err)
	}
	samples, err := regression.ReadCSV(&csv)
	if err != nil {
		t.Fatalf("reading the profile CSV back: %v", err)
	}
	if _, err := regression.FitSamples(samples, regression.Options{}); err != nil {
		t.Fatalf("fit of the profile CSV: %v", err)
	}
}

// fmtLine prints a line whose coefficients may be absent (null in JSON).
func fmtLine(alpha, tau0 *float64) string {
	if alpha == nil || tau0 == nil {
		return "absent"
	}
	return fmt.Sprintf("%.4f*b + %.4f", *alpha, *tau0)
}
