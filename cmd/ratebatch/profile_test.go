package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"testing"

	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
)

func TestProfileMeasuresTheUpstreamLine(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1}) // googlenet-p4: tau(b) = 0.3051*b + 1.052 ms
	csv := t.TempDir() + "/simple.csv"
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"profile", "--upstream", "http://" + em.Addr(), "--model", "simple",
		"--samples", "8", "--out", csv, "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
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
	// microseconds; about 0.09 ms under the race detector), well below the
	// round trip's. The emulator sleeps for tau(b), so a loaded machine's
	// late wake-ups add to both: the bounds allow 10% on the slope and
	// 0.35 ms on the intercept, and still catch a line from the wrong
	// statistic (the round trip's, or the queue's).
	if got.ServerAlpha == nil || math.Abs(*got.ServerAlpha-0.3051) > 0.03 || *got.ServerTau0 < 1.0 || *got.ServerTau0 > 1.4 {
		t.Fatalf("server line %s, want the emulator's 0.3051*b + 1.052", fmtLine(got.ServerAlpha, got.ServerTau0))
	}
	out.Reset()
	if code := run(context.Background(), []string{"fit", "--csv", csv, "--json"}, &out, &errb); code != 0 {
		t.Fatalf("fit of the profile CSV: exit %d: %s", code, errb.String())
	}
}

// fmtLine prints a line whose coefficients may be absent (null in JSON).
func fmtLine(alpha, tau0 *float64) string {
	if alpha == nil || tau0 == nil {
		return "absent"
	}
	return fmt.Sprintf("%.4f*b + %.4f", *alpha, *tau0)
}
