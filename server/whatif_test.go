package server_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/lab/emulator/emulatortest"
)

// serve keeps the arrivals of a model that took calls, and GET /whatif
// says when there is too little of them to replay; whatif.arrivals 0 keeps
// none and serves neither endpoint.
func TestServeWhatIf(t *testing.T) {
	em := emulatortest.Start(t, emulator.Options{TimeScale: 1})
	base, admin, _ := startProxy(t, em.Addr(), nil)
	for i := range 20 {
		if code, r, _ := post(t, base+"/v2/models/simple/infer", simpleBody("w", i, 1)); code != http.StatusOK {
			t.Fatalf("infer: %d %s", code, r.Error)
		}
	}
	code, body := getText(t, admin+"/whatif?model=simple&minutes=1")
	// The window is aligned on the meter's samples, so it may leave out
	// the first calls; it holds some and at most the 20 sent.
	m := regexp.MustCompile(`too little traffic to say: (\d+) calls`).FindStringSubmatch(body)
	if code != http.StatusOK || !strings.Contains(body, `"enough": false`) || m == nil {
		t.Fatalf("/whatif after 20 calls: %d %.400s", code, body)
	}
	if n, _ := strconv.Atoi(m[1]); n < 1 || n > 20 {
		t.Errorf("/whatif after 20 calls counts %d calls, want 1 to 20", n)
	}
	if code, _ := getText(t, admin+"/arrivals?model=simple"); code != http.StatusUnauthorized {
		t.Errorf("/arrivals without the token: %d, want 401", code)
	}

	_, off, _ := startProxy(t, em.Addr(), func(c *config.Config) { c.WhatIf.Arrivals = 0 })
	for _, path := range []string{"/whatif?model=simple", "/arrivals?model=simple"} {
		if code, _ := getText(t, off+path); code != http.StatusNotFound {
			t.Errorf("%s with whatif.arrivals 0: %d, want 404", path, code)
		}
	}
}
