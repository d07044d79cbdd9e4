package power_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/ratebatch/ratebatch/power"
)

// steadyGPU is a Source whose one GPU draws 60 W idle and 240 W busy, with
// an energy counter the example advances.
type steadyGPU struct {
	now    func() time.Time
	energy float64
}

func (s *steadyGPU) Name() string { return "example" }
func (s *steadyGPU) Close() error { return nil }
func (s *steadyGPU) Read(context.Context) ([]power.Reading, error) {
	return []power.Reading{{Time: s.now(), GPU: "GPU-8f1c", EnergyJ: s.energy, HasEnergy: true}}, nil
}

func ExampleMeter() {
	t := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return t }
	src := &steadyGPU{now: now}
	m, err := power.NewMeter(src, power.Options{Interval: time.Second, Windows: []time.Duration{10 * time.Second}, Now: now})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	m.Poll(ctx)
	// 5 s idle, then a batch of 32 requests that runs for 5 s.
	var span power.Span
	for i := range 10 {
		if i == 5 {
			span = m.Begin("resnet50", "")
		}
		t = t.Add(time.Second)
		if i >= 5 {
			src.energy += 240
		} else {
			src.energy += 60
		}
		if i == 9 {
			span.End(32)
		}
		m.Poll(ctx)
	}
	snap := m.Snapshot()
	g := snap.GPUs[0]
	fmt.Printf("idle %.0f W, busy %.0f W\n", *g.IdlePowerW, *g.BusyPowerW)
	total := snap.Windows[power.TotalWindow]
	fmt.Printf("%d requests, %.0f J: %.4f requests/J\n", total.Requests, *total.EnergyJ, *total.RequestsPerJoule)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(snap.Models)
	// Output:
	// idle 60 W, busy 240 W
	// 32 requests, 1500 J: 0.0213 requests/J
	// [
	//   {
	//     "model": "resnet50",
	//     "batch_seconds": 5,
	//     "windows": {
	//       "10s": {
	//         "seconds": 10,
	//         "energy_joules": 1500,
	//         "avg_power_watts": 150,
	//         "requests": 32,
	//         "requests_per_joule": 0.021333333333333333,
	//         "joules_per_request": 46.875
	//       },
	//       "total": {
	//         "seconds": 10,
	//         "energy_joules": 1500,
	//         "avg_power_watts": 150,
	//         "requests": 32,
	//         "requests_per_joule": 0.021333333333333333,
	//         "joules_per_request": 46.875
	//       }
	//     }
	//   }
	// ]
}
