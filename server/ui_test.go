package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/ui"
)

// The live page's history, as serve wires it (ui.StatesOf over the
// registry, the dispatcher and the meter): the model that took requests
// comes first, with its headline figures and where its fit comes from.
// The power source is the default (auto): given the metrics URL, it reads
// Triton's (here the emulator's) energy without power.source.
func TestServeLivePageHistory(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	base, admin, _ := startProxy(t, em.Addr(), func(c *config.Config) {
		c.Power.MetricsURL = "http://" + em.MetricsAddr() + "/metrics"
		c.Power.Interval = 20 * time.Millisecond
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 10 {
				if code, r, _ := post(t, base+"/v2/models/simple/infer", simpleBody(fmt.Sprint(i, j), i, 1)); code != http.StatusOK {
					t.Errorf("infer: %d %s", code, r.Error)
				}
			}
		}()
	}
	wg.Wait()

	var h ui.History
	testpoll.Until(t, "the live page's headline of simple", func() bool {
		code, body := getText(t, admin+"/ui/history.json")
		if code != http.StatusOK || json.Unmarshal([]byte(body), &h) != nil || len(h.Models) == 0 {
			return false
		}
		hl := h.Models[0].Headline
		return hl.Seconds > 0 && hl.SentBatch != nil && hl.RequestsPerJoule != nil
	})
	m := h.Models[0]
	if m.Model != "simple" || m.Headline.SentRPS <= 0 {
		t.Errorf("first model %s at %v rows/s sent, want simple, the only one that took requests", m.Model, m.Headline.SentRPS)
	}
	if m.FitSource == "" || len(m.Batches) == 0 || m.MaxBatch != emulator.SimpleMaxBatch {
		t.Errorf("simple: fit source %q, %d round trips, max batch %d", m.FitSource, len(m.Batches), m.MaxBatch)
	}
}
