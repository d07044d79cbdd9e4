package power

import (
	"math"
	"testing"
	"time"
)

func TestMJCounter(t *testing.T) {
	type obs struct {
		raw      uint64
		after    time.Duration // since the previous observation
		wantJ    float64
		wantDisc bool
	}
	tests := []struct {
		name string
		obs  []obs
	}{
		{"steady", []obs{{1_000, 0, 0, false}, {3_000, time.Second, 2, false}, {6_500, time.Second, 5.5, false}}},
		{"wrap past 2^64", []obs{
			{math.MaxUint64 - 499, 0, 0, false},
			{1_500, time.Second, 2.0, false}, // 500 mJ to the wrap, 1500 after it
			{2_500, time.Second, 3.0, false},
		}},
		{"driver reload resets the counter", []obs{
			{5_000_000_000, 0, 0, false},
			{5_000_100_000, time.Second, 100, false},
			{40_000, time.Second, 100, true}, // unknown from the counter
			{90_000, time.Second, 150, false},
		}},
		{"implausible jump", []obs{
			{1_000, 0, 0, false},
			{1_000 + 1e12, time.Second, 0, true}, // 1e9 J in a second
			{1_000 + 1e12 + 300_000, time.Second, 300, false},
		}},
		{"lump after a long gap is believed", []obs{
			{0, 0, 0, false},
			{300_000_000, 10 * time.Minute, 300_000, false}, // 500 W for 10 min
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c mjCounter
			now := time.Unix(0, 0)
			for i, o := range tt.obs {
				now = now.Add(o.after)
				got, disc := c.observe(o.raw, now)
				if !approx(got, o.wantJ, 1e-9) || disc != o.wantDisc {
					t.Errorf("observation %d (raw %d): got %v J, discontinuity %v; want %v J, %v", i, o.raw, got, disc, o.wantJ, o.wantDisc)
				}
			}
		})
	}
}

func TestJCounter(t *testing.T) {
	type obs struct {
		raw      float64
		restart  bool
		wantJ    float64
		wantDisc bool
	}
	tests := []struct {
		name string
		obs  []obs
	}{
		{"steady", []obs{{100, false, 0, false}, {160.5, false, 60.5, false}}},
		{"triton restart", []obs{{5000, false, 0, false}, {5100, false, 100, false}, {30, false, 100, true}, {90, false, 160, false}}},
		{"restart through zero forgets the baseline", []obs{{5000, false, 0, false}, {0, true, 0, false}, {40, false, 0, false}, {100, false, 60, false}}},
		{"32-bit truncation upstream", []obs{{1000, false, 0, false}, {1000 + 1.8e16, false, 0, true}, {1000 + 1.8e16 + 64, false, 64, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c jCounter
			now := time.Unix(0, 0)
			for i, o := range tt.obs {
				now = now.Add(time.Second)
				if o.restart {
					c.restart()
					continue
				}
				got, disc := c.observe(o.raw, now)
				if !approx(got, o.wantJ, 1e-9) || disc != o.wantDisc {
					t.Errorf("observation %d (raw %v): got %v J, discontinuity %v; want %v J, %v", i, o.raw, got, disc, o.wantJ, o.wantDisc)
				}
			}
		})
	}
}
