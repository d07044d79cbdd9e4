package main

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ratebatch/ratebatch/config"
	"github.com/ratebatch/ratebatch/lab/emulator"
	"github.com/ratebatch/ratebatch/server"
)

// The CLI tests that need a live upstream or proxy start them here; the
// proxy's own end-to-end tests are in package server.

// startEmulator serves an emulator on loopback until the test ends.
func startEmulator(t *testing.T, o emulator.Options) *emulator.Server {
	t.Helper()
	em, err := emulator.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := em.Start("127.0.0.1:0", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { em.Close() })
	return em
}

// startProxy runs `ratebatch serve` in-process against upstream until the
// test ends and waits until it has discovered the model simple.
func startProxy(t *testing.T, upstream string, edit func(*config.Config)) (base, admin string, stop func()) {
	t.Helper()
	cfg := config.Default()
	cfg.Upstream = "http://" + upstream
	cfg.Listen, cfg.AdminListen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Policy.Window = 100 * time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := server.New(&cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := s.Dispatcher().Model("simple"); ok {
			return "http://" + s.Addr().String(), "http://" + s.AdminAddr().String(), stop
		}
		if time.Now().After(deadline) {
			t.Fatal("proxy did not discover the upstream's models")
		}
	}
}
