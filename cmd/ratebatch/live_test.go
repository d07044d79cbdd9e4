package main

import (
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/server/servertest"
)

// The CLI tests that need a live upstream or proxy start them here; the
// proxy's own end-to-end tests are in package server.

// startProxy runs `ratebatch serve` in-process against upstream until the
// test ends (servertest.Start) and returns its base and admin URLs.
func startProxy(t *testing.T, upstream string, edit func(*config.Config)) (base, admin string, stop func()) {
	t.Helper()
	p := servertest.Start(t, upstream, nil, edit)
	return p.Base, p.Admin, p.Stop
}
