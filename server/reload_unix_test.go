//go:build unix

package server_test

import (
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/internal/testpoll"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// TestReloadOnSIGHUP sends the process SIGHUP and waits for the new
// configuration in /status.
func TestReloadOnSIGHUP(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{})
	file := filepath.Join(t.TempDir(), "ratebatch.yaml")
	p := servertest.Start(t, em.Addr(), nil, func(c *config.Config) {
		c.Policy.Name = "budget"
		c.Policy.Options = c.Policy.Options.With(policy.BudgetOptions{LatencyBudget: "1.10x"})
	})
	p.ReloadFrom(config.Source{File: file})
	reloadFile(t, file, em.Addr(), "3x", "")
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testpoll.Until(t, "config_version 2 with budget 3x", func() bool {
		st := readStatus(t, p.Admin)
		return st.ConfigVersion == 2 && st.budget() == "3x"
	})
}
