package membudget

import (
	"os"
	"path/filepath"
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
