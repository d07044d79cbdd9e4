package server_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// power.source triton against a Triton without GPU metrics (a CPU host:
// its metrics page has no nv_gpu_power_usage): /status says the energy is
// not available and why, ratebatch_power_available reads 0, a WARN says it
// once and what the policies do instead, and the default policy's
// objective on /status and /ui is requests per GPU-second, not per joule.
func TestServeSaysWhenEnergyIsNotMeasured(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	cpu := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP nv_inference_count Number of inferences performed\n# TYPE nv_inference_count counter\nnv_inference_count{model=\"simple\",version=\"1\"} 12\n")
	}))
	defer cpu.Close()
	logs := &syncBuffer{}
	lt := servertest.Start(t, em.Addr(), slog.New(slog.NewTextHandler(logs, nil)), func(c *config.Config) {
		c.Power.Source = "triton"
		c.Power.MetricsURL = cpu.URL + "/metrics"
		c.Power.Interval = 20 * time.Millisecond
		onlySimple(c, em)
	})
	for i := range 5 {
		if code, r, _ := post(t, lt.Base+"/v2/models/simple/infer", simpleBody(fmt.Sprint(i), i, 1)); code != 200 {
			t.Fatalf("status %d: %s", code, r.Error)
		}
	}
	var st struct {
		Energy struct {
			Available   bool   `json:"available"`
			Unavailable string `json:"unavailable"`
		} `json:"energy"`
		EnergyFit map[string]string `json:"energy_fit"`
		Models    []struct {
			Model string `json:"model"`
			Rule  *struct {
				Objective string `json:"objective"`
			} `json:"rule"`
		} `json:"models"`
	}
	var body string
	testpoll.Until(t, "/status to say energy is not available and why, and the fit to say so", func() bool {
		_, body = getText(t, lt.Admin+"/status")
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return !st.Energy.Available && strings.Contains(st.Energy.Unavailable, "no nv_energy_consumption or nv_gpu_power_usage series") &&
			strings.HasPrefix(st.EnergyFit["*"], "energy not measured (")
	})
	objective := ""
	for _, m := range st.Models {
		if m.Model == "simple" && m.Rule != nil {
			objective = m.Rule.Objective
		}
	}
	if !strings.HasPrefix(objective, "requests per GPU-second") {
		t.Errorf("simple's objective %q, want requests per GPU-second: %s", objective, body)
	}
	if _, m := getText(t, lt.Admin+"/metrics"); metricValue(m, "ratebatch_power_available") != 0 || !strings.Contains(m, "ratebatch_power_available 0") {
		t.Error("ratebatch_power_available is not 0")
	}
	logged(t, logs, `level=WARN msg="energy not measured: joule figures are absent, and energy-aware policies`)
	if n := strings.Count(logs.String(), "energy not measured"); n != 1 {
		t.Errorf("%d WARN lines about the energy, want 1:\n%s", n, logs)
	}
	testpoll.Until(t, "/ui's history to carry the reason and the objective", func() bool {
		_, h := getText(t, lt.Admin+"/ui/history.json")
		return strings.Contains(h, `"energy_unavailable":"power: triton:`) && strings.Contains(h, `"objective":"requests per GPU-second`)
	})
}
