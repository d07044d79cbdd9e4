package power

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// The dispatcher calls Begin and End once per batch.
func BenchmarkBeginEnd(b *testing.B) {
	m, err := NewMeter(&scriptSource{clock: newFakeClock()}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	m.Poll(context.Background())
	b.ReportAllocs()
	for b.Loop() {
		m.Begin("resnet50", "").End(8)
	}
}

func BenchmarkBeginEndParallel(b *testing.B) {
	m, err := NewMeter(&scriptSource{clock: newFakeClock()}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Begin("resnet50", "").End(8)
		}
	})
}

func benchMeter(b *testing.B, gpus, models int) (*Meter, *scriptSource, *fakeClock) {
	clock := newFakeClock()
	src := &scriptSource{clock: clock}
	for i := range gpus {
		src.next = append(src.next, counterGPU(fmt.Sprintf("GPU-%d", i), 0, 100))
	}
	m, err := NewMeter(src, Options{Now: clock.Now})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 300 { // a full 5m window at 1 s
		for j := range models {
			m.Begin(fmt.Sprintf("model-%d", j), "").End(4)
		}
		for k := range src.next {
			src.next[k].EnergyJ = float64(100 * i)
		}
		m.Poll(context.Background())
		clock.Advance(time.Second)
	}
	return m, src, clock
}

func BenchmarkPoll(b *testing.B) {
	m, _, clock := benchMeter(b, 8, 4)
	b.ReportAllocs()
	for b.Loop() {
		clock.Advance(time.Second)
		m.Poll(context.Background())
	}
}

func BenchmarkSnapshot(b *testing.B) {
	m, _, _ := benchMeter(b, 8, 4)
	b.ReportAllocs()
	for b.Loop() {
		m.Snapshot()
	}
}

func BenchmarkParseTritonPage(b *testing.B) {
	var page strings.Builder
	for i := range 8 {
		fmt.Fprintf(&page, "nv_gpu_utilization{gpu_uuid=\"GPU-%d\"} 0.5\n", i)
		fmt.Fprintf(&page, "nv_gpu_power_usage{gpu_uuid=\"GPU-%d\"} 251.5\n", i)
		fmt.Fprintf(&page, "nv_energy_consumption{gpu_uuid=\"GPU-%d\"} 3594017.4\n", i)
	}
	for i := range 50 {
		fmt.Fprintf(&page, "nv_inference_request_success{model=\"m%d\",version=\"1\"} 1234\n", i)
	}
	text := page.String()
	want := func(n string) bool { return n == tritonEnergy || n == tritonPower }
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if err := parseExposition(strings.NewReader(text), want, func(string, []labelPair, float64) {}); err != nil && err != io.EOF {
			b.Fatal(err)
		}
	}
}
