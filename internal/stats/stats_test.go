package stats

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100) // 1..100 ms
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	thousand := make([]time.Duration, 1000) // 1..1000 us
	for i := range thousand {
		thousand[i] = time.Duration(i+1) * time.Microsecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single", []time.Duration{7}, 99, 7},
		{"median of 100", hundred, 50, 50 * time.Millisecond},
		{"p99 of 100", hundred, 99, 99 * time.Millisecond},
		{"p100 of 100", hundred, 100, 100 * time.Millisecond},
		{"p0.5 of 100 is the first", hundred, 0.5, time.Millisecond},
		{"p99.9 of 1000", thousand, 99.9, 999 * time.Microsecond},
		{"p99.95 of 1000 rounds up", thousand, 99.95, 1000 * time.Microsecond},
		{"p50 of two is the lower", []time.Duration{1, 2}, 50, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Fatalf("Percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestPercentileFloat(t *testing.T) {
	tests := []struct {
		sorted []float64
		p      float64
		want   float64
	}{
		{nil, 99, 0},
		{[]float64{1.5, 2.5, 3.5}, 50, 2.5},
		{[]float64{1.5, 2.5, 3.5}, 99, 3.5},
	}
	for _, tt := range tests {
		if got := Percentile(tt.sorted, tt.p); got != tt.want {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
		}
	}
}
