package membudget

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"testing"
)

func TestHoldsNeverPassTheLimit(t *testing.T) {
	b := New(1000)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 1000 {
				h := Hold{B: b}
				if h.Grow(300) {
					if u := b.Used(); u > 1000 {
						t.Errorf("used %d past the limit", u)
					}
					h.Grow(350)
				}
				h.Release()
			}
		})
	}
	wg.Wait()
	if b.Used() != 0 || b.Peak() > 1000 || b.Peak() < 300 {
		t.Fatalf("used %d, peak %d", b.Used(), b.Peak())
	}
}

func TestHoldGrowForceRelease(t *testing.T) {
	b := New(100)
	h := Hold{B: b}
	if !h.Grow(60) || !h.Grow(40) || h.Held() != 60 {
		t.Fatalf("held %d after growing to 60 then asking 40", h.Held())
	}
	other := Hold{B: b}
	if other.Grow(41) {
		t.Fatal("41 more fitted into 40 left")
	}
	if !other.Grow(40) {
		t.Fatal("40 did not fit into 40 left")
	}
	h.Force(50) // an answer: past the limit
	if b.Used() != 150 {
		t.Fatalf("used %d, want 150", b.Used())
	}
	small := Hold{B: b}
	if small.Grow(1) {
		t.Fatal("admitted while over the limit")
	}
	h.Release()
	other.Release()
	if b.Used() != 0 || b.Peak() != 150 {
		t.Fatalf("used %d peak %d after release", b.Used(), b.Peak())
	}
	var none *Budget
	nh := Hold{B: none}
	if !nh.Grow(1 << 40) {
		t.Fatal("a nil budget refused")
	}
}

func TestCgroupLimit(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	tests := []struct {
		name    string
		files   []string
		want    int64
		wantHas bool
	}{
		{"v2 limit", []string{write("a", "1073741824\n")}, 1 << 30, true},
		{"v2 max", []string{write("b", "max\n"), write("c", "5")}, 0, false},
		{"v1 unlimited", []string{filepath.Join(dir, "none"), write("d", "9223372036854771712\n")}, 0, false},
		{"v1 limit after a missing v2", []string{filepath.Join(dir, "none"), write("e", "536870912")}, 512 << 20, true},
		{"nothing", []string{filepath.Join(dir, "none")}, 0, false},
	}
	for _, tt := range tests {
		if got, ok := cgroupLimit(tt.files); got != tt.want || ok != tt.wantHas {
			t.Errorf("%s: %d %v, want %d %v", tt.name, got, ok, tt.want, tt.wantHas)
		}
	}
}

// TestLimitRuntime: the soft limit is the budget plus the headroom and
// the collector's GOGC is raised under it, unless the environment sets
// either (GOMEMLIMIT leaves both to it, GOGC its own value).
func TestLimitRuntime(t *testing.T) {
	const budget = 64 << 20
	tests := []struct {
		name            string
		env             map[string]string
		wantLimit       int64
		wantGC, startGC int
	}{
		{"serve's defaults", nil, budget + runtimeHeadroom, runtimeGCPercent, 100},
		{"GOGC kept", map[string]string{"GOGC": "50"}, budget + runtimeHeadroom, 50, 50},
		{"GOMEMLIMIT wins", map[string]string{"GOMEMLIMIT": "1GiB"}, 0, 100, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("GOGC", "")
			t.Setenv("GOMEMLIMIT", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			// The runtime's settings are the process's: each case starts
			// from its own and leaves them as it found them.
			limit0 := debug.SetMemoryLimit(-1)
			gc0 := debug.SetGCPercent(tt.startGC)
			t.Cleanup(func() { debug.SetMemoryLimit(limit0); debug.SetGCPercent(gc0) })
			debug.SetMemoryLimit(math.MaxInt64)

			if got := LimitRuntime(New(budget)); got != tt.wantLimit {
				t.Errorf("LimitRuntime = %d, want %d", got, tt.wantLimit)
			}
			wantRuntime := tt.wantLimit
			if wantRuntime == 0 {
				wantRuntime = math.MaxInt64
			}
			if got := debug.SetMemoryLimit(-1); got != wantRuntime {
				t.Errorf("runtime's soft limit %d, want %d", got, wantRuntime)
			}
			if got := debug.SetGCPercent(tt.startGC); got != tt.wantGC {
				t.Errorf("GOGC %d, want %d", got, tt.wantGC)
			}
		})
	}
	if LimitRuntime(nil) != 0 {
		t.Error("a nil budget set a limit")
	}
}
