package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/monitor"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/server"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// reloadFile writes a configuration file that says what servertest.Run
// configures, with budget as policy.latency_budget and extra appended.
func reloadFile(t *testing.T, path, upstream, budget, extra string) {
	t.Helper()
	writeFile(t, path, fmt.Appendf(nil, `upstream: http://%s
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
admin_token: test-token
shutdown_grace: 5s
policy:
  name: budget
  window: 100ms
  latency_budget: %s
%s`, upstream, budget, extra))
}

// liveStatus is what the reload tests read of /status.
type liveStatus struct {
	ConfigVersion int            `json:"config_version"`
	ConfigLoaded  time.Time      `json:"config_loaded"`
	Config        map[string]any `json:"config"`
	Models        []struct {
		Model string `json:"model"`
		Rule  *struct {
			Policy  string `json:"policy"`
			Note    string `json:"note"`
			Samples int    `json:"samples"`
		} `json:"rule"`
	} `json:"models"`
}

func readStatus(t *testing.T, admin string) liveStatus {
	t.Helper()
	code, body := getText(t, admin+"/status")
	var st liveStatus
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("GET /status: %d %.300s", code, body)
	}
	return st
}

func (s liveStatus) budget() any {
	pol, _ := s.Config["policy"].(map[string]any)
	return pol["latency_budget"]
}

// TestReloadUnderLoad reloads a configuration that changes the latency
// budget and the queue limit of every model while clients keep sending:
// every request is answered 200, /status shows the new version and
// budget, and each model keeps its monitor and what it learnt.
func TestReloadUnderLoad(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	file := filepath.Join(t.TempDir(), "ratebatch.yaml")
	reloadFile(t, file, em.Addr(), "1.10x", "")
	log := server.NewLogger(config.Log{Level: "info", Format: "text"}, io.Discard)
	p := servertest.Start(t, em.Addr(), log, func(c *config.Config) {
		c.Policy.Name = "budget"
		c.Policy.Options = c.Policy.Options.With(policy.BudgetOptions{LatencyBudget: "1.10x"})
	})
	p.ReloadFrom(config.Source{File: file})
	if v := readStatus(t, p.Admin).ConfigVersion; v != 1 {
		t.Fatalf("config_version %d at start, want 1", v)
	}

	var sent, failed atomic.Int64
	halt := keepSending(t, 8, func(c, i int) {
		id := fmt.Sprintf("c%d-%d", c, i)
		sent.Add(1)
		code, r, _ := post(t, p.Base+"/v2/models/simple/infer", simpleBody(id, i, 1))
		if err := checkSimple(r, id, i, 1); code != http.StatusOK || err != nil {
			failed.Add(1)
			t.Errorf("%s: %d %q %v", id, code, r.Error, err)
		}
	})
	var mon *monitor.Monitor
	before := p.Models().Monitors()
	for _, m := range before {
		if m.Snapshot().Model == "simple" {
			mon = m
		}
	}
	if mon == nil {
		t.Fatal("no monitor of simple")
	}
	testpoll.Until(t, "the monitor to learn from some batches", func() bool { return mon.Snapshot().Samples > 0 })
	learnt := mon.Snapshot().Samples

	reloadFile(t, file, em.Addr(), "2x", "limits:\n  queue_rows: 2048\nlog:\n  level: debug\n")
	if err := p.Reload(context.Background()); err != nil {
		t.Fatalf("reload: %v", err)
	}
	after := sent.Load()
	testpoll.Until(t, "the rule planned under budget 2x", func() bool {
		n := mon.Snapshot().Note
		return strings.Contains(n, "budget 2x")
	})
	testpoll.Until(t, "requests answered after the reload", func() bool { return sent.Load() > after+200 })
	halt()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d requests failed across the reload", failed.Load(), sent.Load())
	}

	st := readStatus(t, p.Admin)
	if st.ConfigVersion != 2 || st.budget() != "2x" {
		t.Errorf("after the reload: config_version %d, policy.latency_budget %v; want 2, 2x", st.ConfigVersion, st.budget())
	}
	if p.Config().Limits.QueueRows != 2048 || p.Config().Log.Level != "debug" || !log.Enabled(context.Background(), slog.LevelDebug) {
		t.Errorf("after the reload: queue_rows %d, log.level %s, debug logged %v; want 2048, debug, true",
			p.Config().Limits.QueueRows, p.Config().Log.Level, log.Enabled(context.Background(), slog.LevelDebug))
	}
	if now := p.Models().Monitors(); !sameMonitors(now, before) {
		t.Fatal("the reload replaced a model's monitor")
	}
	if s := mon.Snapshot(); s.Samples < learnt || s.Policy != "budget" {
		t.Errorf("after the reload: policy %s, %d samples; want budget and at least the %d learnt before", s.Policy, s.Samples, learnt)
	}
}

// TestReloadRefusesBadFile refuses a file with mistakes whole, names each
// mistake, and keeps the running configuration; an option that cannot
// change live is named and kept at its running value.
func TestReloadRefusesBadFile(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	file := filepath.Join(t.TempDir(), "ratebatch.yaml")
	var logs syncBuffer
	p := servertest.Start(t, em.Addr(), slog.New(slog.NewTextHandler(&logs, nil)), func(c *config.Config) {
		c.Policy.Name = "budget"
		c.Policy.Options = c.Policy.Options.With(policy.BudgetOptions{LatencyBudget: "1.10x"})
	})
	p.ReloadFrom(config.Source{File: file})

	reloadFile(t, file, em.Addr(), "2x", "limits:\n  queue_rows: -1\nmodels:\n  simple:\n    policy: nonsense\n")
	err := p.Reload(context.Background())
	for _, want := range []string{"limits.queue_rows", "models.simple.policy"} {
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(logs.String(), want) {
			t.Errorf("reload of a bad file: error %v, log %q; want both to name %s", err, logs.String(), want)
		}
	}
	st := readStatus(t, p.Admin)
	if st.ConfigVersion != 1 || st.budget() != "1.10x" || p.Config().Limits.QueueRows != config.Default().Limits.QueueRows {
		t.Errorf("after a refused reload: config_version %d, budget %v, queue_rows %d; want the running ones",
			st.ConfigVersion, st.budget(), p.Config().Limits.QueueRows)
	}

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := p.Reload(context.Background()); err == nil {
		t.Error("reload of a missing file succeeded")
	}

	// listen changes only at restart: named, and kept.
	reloadFile(t, file, em.Addr(), "1.5x", "")
	data, _ := os.ReadFile(file)
	writeFile(t, file, bytes.Replace(data, []byte("listen: 127.0.0.1:0"), []byte("listen: 127.0.0.1:1"), 1))
	listen := p.Config().Listen
	if err := p.Reload(context.Background()); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if b := policy.OptionsOf[policy.BudgetOptions](p.Config().Policy.Options); p.Config().Listen != listen || b.LatencyBudget != "1.5x" {
		t.Errorf("after reloading a new listen: listen %q, budget %q; want %q kept and 1.5x", p.Config().Listen, b.LatencyBudget, listen)
	}
	if !strings.Contains(logs.String(), "restart") || !strings.Contains(logs.String(), "listen") {
		t.Errorf("no log line names listen as needing a restart: %q", logs.String())
	}
}

// sameMonitors reports whether a and b hold the same monitors.
func sameMonitors(now, before []*monitor.Monitor) bool {
	// Every monitor there before is still there: a model discovery found
	// meanwhile (the emulator serves several) adds one, which is no
	// replacement.
	for _, m := range before {
		if !slices.Contains(now, m) {
			return false
		}
	}
	return true
}
