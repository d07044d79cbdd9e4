package power

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// A source registered from its own file (here, this test) opens by its
// name with the options it is given, defaults filled, and its meter
// integrates what it reads; it is listed with the built-in ones.
func TestRegisteredKindOpens(t *testing.T) {
	clock := newFakeClock()
	var given Options
	RegisterKind(Kind{Name: "kinds-test", About: "a script", Open: func(o Options) (Source, error) {
		given = o
		if len(o.GPUs) > 1 {
			return nil, fmt.Errorf("power: kinds-test: one GPU at most, got %d", len(o.GPUs))
		}
		return &scriptSource{clock: clock, next: []Reading{counterGPU("g0", 0, 100)}}, nil
	}})
	if !slices.Contains(KindNames(), "kinds-test") {
		t.Fatalf("KindNames() = %v lacks the registered source", KindNames())
	}
	src, err := Open("kinds-test", Options{GPUs: []string{"g0"}, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if given.Interval != defaultInterval || given.Timeout != defaultTimeout || given.Logger == nil {
		t.Errorf("the source was opened with %+v, want the defaults filled in", given)
	}
	m, err := NewMeter(src, Options{Interval: time.Second, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if snap := m.Snapshot(); !snap.Available || len(snap.GPUs) != 1 || snap.GPUs[0].GPU != "g0" {
		t.Fatalf("the meter of the registered source: %+v", snap)
	}
	// What only this source refuses, it refuses.
	if _, err := Open("kinds-test", Options{GPUs: []string{"g0", "g1"}}); err == nil || !strings.Contains(err.Error(), "one GPU") {
		t.Errorf("two GPUs: %v", err)
	}
	// The options every source shares are checked before it opens.
	if _, err := Open("kinds-test", Options{Interval: time.Millisecond}); err == nil || !strings.Contains(err.Error(), "Interval") {
		t.Errorf("a 1ms interval: %v", err)
	}
}

func TestUnknownKind(t *testing.T) {
	_, err := Open("nvlm", Options{})
	if !errors.Is(err, ErrUnknownKind) || !strings.Contains(err.Error(), "known: ") || !strings.Contains(err.Error(), KindTriton) {
		t.Fatalf("Open(nvlm): %v, want ErrUnknownKind naming the known sources", err)
	}
	for _, k := range []string{KindNone, KindTriton, KindNVML} {
		if !slices.Contains(KindNames(), k) {
			t.Errorf("%s is not registered (in every build, nvml as missing where it is not built)", k)
		}
	}
}

func TestRegisterKindRefusesMistakes(t *testing.T) {
	for name, k := range map[string]Kind{
		"no name":          {Open: func(Options) (Source, error) { return None{}, nil }},
		"no open":          {Name: "kinds-test-no-open"},
		"open and missing": {Name: "kinds-test-both", Open: func(Options) (Source, error) { return None{}, nil }, Missing: ErrNotBuilt},
		"twice":            {Name: KindNone, Open: func(Options) (Source, error) { return None{}, nil }},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: RegisterKind did not panic", name)
				}
			}()
			RegisterKind(k)
		}()
	}
}
