//go:build cgo && !nonvml

package power

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU scripts one device: energy and power are called with the read
// number (0 = the probe at Open) and return the raw NVML values.
type fakeGPU struct {
	uuid   string
	energy func(n int) (uint64, nvml.Return) // mJ
	power  func(n int) (uint32, nvml.Return) // mW
}

func (f fakeGPU) device() *mock.Device {
	var ne, np int
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return f.uuid, nvml.SUCCESS },
		GetTotalEnergyConsumptionFunc: func() (uint64, nvml.Return) {
			defer func() { ne++ }()
			return f.energy(ne)
		},
		GetPowerUsageFunc: func() (uint32, nvml.Return) {
			defer func() { np++ }()
			return f.power(np)
		},
	}
}

func fakeLib(initRet nvml.Return, gpus ...fakeGPU) *mock.Interface {
	devs := make([]*mock.Device, len(gpus))
	for i, g := range gpus {
		devs[i] = g.device()
	}
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return initRet },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
		DeviceGetHandleByUUIDFunc: func(uuid string) (nvml.Device, nvml.Return) {
			for i, g := range gpus {
				if g.uuid == uuid {
					return devs[i], nvml.SUCCESS
				}
			}
			return nil, nvml.ERROR_NOT_FOUND
		},
	}
}

func seqEnergy(mj ...uint64) func(int) (uint64, nvml.Return) {
	return func(n int) (uint64, nvml.Return) { return mj[min(n, len(mj)-1)], nvml.SUCCESS }
}

func constPower(mw uint32) func(int) (uint32, nvml.Return) {
	return func(int) (uint32, nvml.Return) { return mw, nvml.SUCCESS }
}

func unsupportedEnergy(int) (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
func unsupportedPower(int) (uint32, nvml.Return)  { return 0, nvml.ERROR_NOT_SUPPORTED }

func TestNVMLReadings(t *testing.T) {
	tests := []struct {
		name string
		gpu  fakeGPU
		want []Reading // Time and GPU are not compared
	}{
		{
			name: "energy counter present",
			// probe, then three reads: 1 000 mJ, +2 000, +3 500
			gpu: fakeGPU{"GPU-a", seqEnergy(0, 1_000, 3_000, 6_500), constPower(150_000)},
			want: []Reading{
				{EnergyJ: 0, HasEnergy: true, PowerW: 150, HasPower: true},
				{EnergyJ: 2, HasEnergy: true, PowerW: 150, HasPower: true},
				{EnergyJ: 5.5, HasEnergy: true, PowerW: 150, HasPower: true},
			},
		},
		{
			name: "energy counter absent (pre-Volta): power only",
			gpu:  fakeGPU{"GPU-b", unsupportedEnergy, constPower(71_250)},
			want: []Reading{{PowerW: 71.25, HasPower: true}, {PowerW: 71.25, HasPower: true}},
		},
		{
			name: "power absent: counter only",
			gpu:  fakeGPU{"GPU-c", seqEnergy(0, 10_000, 11_000), unsupportedPower},
			want: []Reading{{EnergyJ: 0, HasEnergy: true}, {EnergyJ: 1, HasEnergy: true}},
		},
		{
			name: "counter wraps past 2^64",
			gpu:  fakeGPU{"GPU-d", seqEnergy(0, math.MaxUint64-999, 1_000, 4_000), constPower(100_000)},
			want: []Reading{
				{EnergyJ: 0, HasEnergy: true, PowerW: 100, HasPower: true},
				{EnergyJ: 2, HasEnergy: true, PowerW: 100, HasPower: true},
				{EnergyJ: 5, HasEnergy: true, PowerW: 100, HasPower: true},
			},
		},
		{
			name: "counter resets (driver reload)",
			gpu:  fakeGPU{"GPU-e", seqEnergy(0, 9_000_000_000, 9_000_200_000, 50_000, 150_000), constPower(200_000)},
			want: []Reading{
				{EnergyJ: 0, HasEnergy: true, PowerW: 200, HasPower: true},
				{EnergyJ: 200, HasEnergy: true, PowerW: 200, HasPower: true},
				{EnergyJ: 200, HasEnergy: true, Discontinuity: true, PowerW: 200, HasPower: true},
				{EnergyJ: 300, HasEnergy: true, PowerW: 200, HasPower: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			s, err := newNVMLSource(fakeLib(nvml.SUCCESS, tt.gpu), Options{Now: clock.Now})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			for i, want := range tt.want {
				clock.Advance(time.Second)
				rs, err := s.Read(context.Background())
				if err != nil {
					t.Fatalf("read %d: %v", i, err)
				}
				if len(rs) != 1 {
					t.Fatalf("read %d: %d readings, want 1", i, len(rs))
				}
				got := rs[0]
				if got.GPU != tt.gpu.uuid || !got.Time.Equal(clock.Now()) {
					t.Errorf("read %d: GPU %q at %v, want %q at %v", i, got.GPU, got.Time, tt.gpu.uuid, clock.Now())
				}
				got.GPU, got.Time = "", time.Time{}
				if !approx(got.EnergyJ, want.EnergyJ, 1e-9) || got.HasEnergy != want.HasEnergy ||
					got.Discontinuity != want.Discontinuity || !approx(got.PowerW, want.PowerW, 1e-9) || got.HasPower != want.HasPower {
					t.Errorf("read %d: got %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

func TestNVMLOpenErrors(t *testing.T) {
	ok := fakeGPU{"GPU-ok", seqEnergy(0), constPower(1)}
	tests := []struct {
		name    string
		lib     *mock.Interface
		gpus    []string
		is      error  // errors.Is target, if any
		mention string // the message must name what was wrong
	}{
		{"no driver library", fakeLib(nvml.ERROR_LIBRARY_NOT_FOUND), nil, ErrNoDriver, "install the NVIDIA driver"},
		{"driver not loaded", fakeLib(nvml.ERROR_DRIVER_NOT_LOADED), nil, ErrNoDriver, "ERROR_DRIVER_NOT_LOADED"},
		{"other init failure", fakeLib(nvml.ERROR_NO_PERMISSION), nil, nvml.ERROR_NO_PERMISSION, "initialising"},
		{"no GPUs", fakeLib(nvml.SUCCESS), nil, nil, "no GPUs"},
		{"index out of range", fakeLib(nvml.SUCCESS, ok), []string{"3"}, nil, "index 3 out of range"},
		{"unknown UUID", fakeLib(nvml.SUCCESS, ok), []string{"GPU-nope"}, nvml.ERROR_NOT_FOUND, "GPU-nope"},
		{"selected twice", fakeLib(nvml.SUCCESS, ok), []string{"0", "GPU-ok"}, nil, "selected twice"},
		{"neither figure", fakeLib(nvml.SUCCESS, fakeGPU{"GPU-x", unsupportedEnergy, unsupportedPower}), nil, nil, "neither an energy counter nor power"},
		{"probe fails", fakeLib(nvml.SUCCESS, fakeGPU{"GPU-y", func(int) (uint64, nvml.Return) { return 0, nvml.ERROR_GPU_IS_LOST }, constPower(1)}), nil, nvml.ERROR_GPU_IS_LOST, "GPU-y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newNVMLSource(tt.lib, Options{GPUs: tt.gpus, Now: time.Now})
			if err == nil {
				t.Fatal("open succeeded, want an error")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("error %q is not %v", err, tt.is)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
			if tt.lib.InitFunc() == nvml.SUCCESS && len(tt.lib.ShutdownCalls()) != 1 {
				t.Errorf("Shutdown called %d times after a failed open, want 1", len(tt.lib.ShutdownCalls()))
			}
		})
	}
}

func TestNVMLSelectAndClose(t *testing.T) {
	lib := fakeLib(nvml.SUCCESS,
		fakeGPU{"GPU-0", seqEnergy(0), constPower(1_000)},
		fakeGPU{"GPU-1", seqEnergy(0), constPower(2_000)},
		fakeGPU{"GPU-2", seqEnergy(0), constPower(3_000)})
	s, err := newNVMLSource(lib, Options{GPUs: []string{"2", "GPU-0"}, Now: time.Now})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.GPU)
	}
	if strings.Join(got, ",") != "GPU-2,GPU-0" {
		t.Errorf("read GPUs %v, want [GPU-2 GPU-0] in the order selected", got)
	}
	for range 2 {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(lib.ShutdownCalls()); n != 1 {
		t.Errorf("Shutdown called %d times, want 1", n)
	}
}

// One GPU failing must not stop the others, and the failure must name it.
func TestNVMLErrorsMidRun(t *testing.T) {
	failFrom := 3 // read number (the probe is 0) from which GPU-bad fails
	bad := fakeGPU{
		uuid:   "GPU-bad",
		energy: func(n int) (uint64, nvml.Return) { return uint64(n) * 100_000, nvml.SUCCESS },
		power: func(n int) (uint32, nvml.Return) {
			if n >= failFrom {
				return 0, nvml.ERROR_GPU_IS_LOST
			}
			return 100_000, nvml.SUCCESS
		},
	}
	good := fakeGPU{"GPU-good", func(n int) (uint64, nvml.Return) { return uint64(n) * 200_000, nvml.SUCCESS }, constPower(200_000)}
	clock := newFakeClock()
	src, err := newNVMLSource(fakeLib(nvml.SUCCESS, good, bad), Options{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	m := newTestMeter(t, src, clock)
	var lastErr error
	for range 6 {
		clock.Advance(time.Second)
		lastErr = m.Poll(context.Background())
	}
	var ge *GPUError
	if !errors.As(lastErr, &ge) || ge.GPU != "GPU-bad" || !errors.Is(lastErr, nvml.ERROR_GPU_IS_LOST) {
		t.Fatalf("Poll error %v: want a *GPUError for GPU-bad wrapping ERROR_GPU_IS_LOST", lastErr)
	}
	snap := m.Snapshot()
	byID := map[string]GPUSnapshot{}
	for _, g := range snap.GPUs {
		byID[g.GPU] = g
	}
	// 6 reads, 5 intervals of 200 J on the good GPU, all by its counter.
	g := byID["GPU-good"]
	checkApprox(t, "GPU-good energy", g.Windows[TotalWindow].EnergyJ, 1000, 1e-9)
	if g.Error != "" || g.ReadErrors != 0 {
		t.Errorf("GPU-good shows error %q (%d): the bad GPU's failure leaked", g.Error, g.ReadErrors)
	}
	// The bad GPU's counter still works, so its energy keeps counting; the
	// power failure is surfaced on every poll from read 3 on.
	b := byID["GPU-bad"]
	checkApprox(t, "GPU-bad energy", b.Windows[TotalWindow].EnergyJ, 500, 1e-9)
	if b.ReadErrors != 4 || !strings.Contains(b.Error, "ERROR_GPU_IS_LOST") {
		t.Errorf("GPU-bad: %d read errors, error %q; want 4 and ERROR_GPU_IS_LOST", b.ReadErrors, b.Error)
	}
	if b.PowerW != nil {
		t.Errorf("GPU-bad power %v W: want null, the newest reading has no power", *b.PowerW)
	}
}

// On this host (no NVIDIA driver in CI) the real library must fail cleanly.
func TestNVMLWithoutDriver(t *testing.T) {
	s, err := Open(KindNVML, Options{})
	if err == nil {
		s.Close()
		t.Skip("an NVIDIA driver is present on this host")
	}
	t.Logf("Open(nvml): %v", err)
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open(nvml) without a driver: %v; want an error wrapping ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "triton or none") {
		t.Errorf("error %q does not say what to do instead", err)
	}
}

// The same curve through go-nvml's mock: power in whole milliwatts
// (integration error plus at most 0.5 mW of rounding per sample), and the
// energy counter in whole millijoules (exact to 1 mJ, whatever the step).
func TestNVMLIntegrationAccuracy(t *testing.T) {
	c := testCurve{}
	// Euler-Maclaurin's leading term for span 61 s and step h.
	leading := func(h float64) float64 { return math.Abs(h * h / 12 * (c.slope(61) - c.slope(0))) }
	tests := []struct {
		name    string
		counter bool
		h       time.Duration
		span    float64 // s, a whole number of steps
		tol     float64 // J
	}{
		{"power 500ms", false, 500 * time.Millisecond, 61, leading(0.5)*1.05 + 0.0005*61},
		{"power 250ms", false, 250 * time.Millisecond, 61, leading(0.25)*1.05 + 0.0005*61},
		{"counter 1s", true, time.Second, 61, 0.001},
		{"counter 5s", true, 5 * time.Second, 60, 0.001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			start := clock.Now()
			since := func() float64 { return clock.Now().Sub(start).Seconds() }
			gpu := fakeGPU{uuid: "GPU-curve",
				power: func(int) (uint32, nvml.Return) { return uint32(math.Round(c.power(since()) * 1000)), nvml.SUCCESS },
				energy: func(int) (uint64, nvml.Return) {
					if !tt.counter {
						return 0, nvml.ERROR_NOT_SUPPORTED
					}
					// 12 345 J since driver load, plus the curve's energy.
					return uint64(math.Round((12345 + c.energy(since())) * 1000)), nvml.SUCCESS
				},
			}
			src, err := newNVMLSource(fakeLib(nvml.SUCCESS, gpu), Options{Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			exact := c.energy(tt.span)
			got := integrate(t, tt.h, tt.span, src, clock)
			t.Logf("%s: %.3f J vs exact %.3f J: error %+.4f J", tt.name, got, exact, got-exact)
			if math.Abs(got-exact) > tt.tol {
				t.Errorf("energy %.4f J, exact %.4f J: error %.4f J exceeds %.4f J", got, exact, got-exact, tt.tol)
			}
		})
	}
}
