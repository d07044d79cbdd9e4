package server_test

import (
	"context"
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/power"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// testpower is an energy source added as docs/ARCHITECTURE.md's
// "Extending" says a source is added: its Source and its RegisterKind
// call in one file (this one), nothing else edited. Its one GPU draws
// 50 W.
const testPower = "testpower"

func init() {
	power.RegisterKind(power.Kind{Name: testPower, About: "a test's 50 W GPU", Open: func(o power.Options) (power.Source, error) {
		return &wattSource{start: o.Now()}, nil
	}})
}

type wattSource struct{ start time.Time }

func (*wattSource) Name() string { return testPower }
func (*wattSource) Close() error { return nil }
func (s *wattSource) Read(context.Context) ([]power.Reading, error) {
	now := time.Now()
	return []power.Reading{{Time: now, GPU: "test-gpu", EnergyJ: 50 * now.Sub(s.start).Seconds(), HasEnergy: true, PowerW: 50, HasPower: true}}, nil
}

// An energy source registered in a test file is a power.source value
// (listed in its help, accepted by validation), and serve opens it: its
// meter reads the source's GPU.
func TestPowerSourceRegisteredInATestIsOpened(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	config.BindFlags(fs)
	if u := fs.Lookup("power-source").Usage; !strings.Contains(u, testPower+" (a test's 50 W GPU)") {
		t.Errorf("--power-source's help does not list %s: %s", testPower, u)
	}
	em := emulatortest.Start(t, emulator.Options{})
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Power.Source, c.Power.Interval = testPower, 20*time.Millisecond
	})
	var st struct {
		Energy struct {
			Source    string `json:"source"`
			Available bool   `json:"available"`
			GPUs      []struct {
				GPU    string   `json:"gpu"`
				PowerW *float64 `json:"power_watts"`
			} `json:"gpus"`
		} `json:"energy"`
	}
	testpoll.Until(t, "the meter to read the test source's GPU", func() bool {
		_, body := getText(t, p.Admin+"/status")
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		return st.Energy.Available && len(st.Energy.GPUs) == 1
	})
	if e := st.Energy; e.Source != testPower || e.GPUs[0].GPU != "test-gpu" || e.GPUs[0].PowerW == nil || *e.GPUs[0].PowerW != 50 {
		t.Errorf("/status energy: %+v", e)
	}
}
