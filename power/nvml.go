//go:build cgo && !nonvml

package power

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlLib is the part of nvml.Interface this source uses; the real library
// and go-nvml's mock.Interface both satisfy it.
type nvmlLib interface {
	Init() nvml.Return
	Shutdown() nvml.Return
	DeviceGetCount() (int, nvml.Return)
	DeviceGetHandleByIndex(int) (nvml.Device, nvml.Return)
	DeviceGetHandleByUUID(string) (nvml.Device, nvml.Return)
}

// nvmlDevice is the part of nvml.Device this source uses.
type nvmlDevice interface {
	GetUUID() (string, nvml.Return)
	GetTotalEnergyConsumption() (uint64, nvml.Return)
	GetPowerUsage() (uint32, nvml.Return)
}

type nvmlGPU struct {
	id         string
	dev        nvmlDevice
	hasCounter bool // Volta and later: total energy in mJ since driver load
	hasPower   bool
	counter    mjCounter
}

type nvmlSource struct {
	lib       nvmlLib
	now       func() time.Time
	gpus      []*nvmlGPU
	closeOnce sync.Once
	closeErr  error
}

func init() {
	RegisterKind(Kind{Name: KindNVML, About: nvmlAbout, Open: openNVML})
}

func openNVML(o Options) (Source, error) { return newNVMLSource(nvml.New(), o) }

func newNVMLSource(lib nvmlLib, o Options) (*nvmlSource, error) {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, fmt.Errorf("power: nvml: %w (%v): install the NVIDIA driver on this host, or choose the triton or none energy source", ErrNoDriver, ret)
	default:
		return nil, fmt.Errorf("power: nvml: initialising the library: %w", ret)
	}
	s := &nvmlSource{lib: lib, now: o.Now}
	if err := s.selectGPUs(o.GPUs); err != nil {
		lib.Shutdown()
		return nil, err
	}
	return s, nil
}

func (s *nvmlSource) selectGPUs(sel []string) error {
	count, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("power: nvml: counting GPUs: %w", ret)
	}
	if len(sel) == 0 {
		if count == 0 {
			return errors.New("power: nvml: the driver reports no GPUs")
		}
		for i := range count {
			sel = append(sel, strconv.Itoa(i))
		}
	}
	seen := make(map[string]bool, len(sel))
	for _, name := range sel {
		var dev nvml.Device
		var ret nvml.Return
		if i, err := strconv.Atoi(name); err == nil {
			if i < 0 || i >= count {
				return fmt.Errorf("power: nvml: GPU index %d out of range: this host has %d GPUs (0..%d)", i, count, count-1)
			}
			dev, ret = s.lib.DeviceGetHandleByIndex(i)
		} else {
			dev, ret = s.lib.DeviceGetHandleByUUID(name)
		}
		if ret != nvml.SUCCESS {
			return fmt.Errorf("power: nvml: GPU %s: getting a handle: %w", name, ret)
		}
		g, err := probeGPU(name, dev)
		if err != nil {
			return err
		}
		if seen[g.id] {
			return fmt.Errorf("power: nvml: GPU %s selected twice", g.id)
		}
		seen[g.id] = true
		s.gpus = append(s.gpus, g)
	}
	return nil
}

// probeGPU learns which of the two figures the device offers. Only
// ERROR_NOT_SUPPORTED means "absent"; any other failure is reported, since
// guessing would silently change the method of measurement.
func probeGPU(name string, dev nvmlDevice) (*nvmlGPU, error) {
	g := &nvmlGPU{id: name, dev: dev}
	if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS && uuid != "" {
		g.id = uuid
	}
	switch _, ret := dev.GetTotalEnergyConsumption(); ret {
	case nvml.SUCCESS:
		g.hasCounter = true
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return nil, fmt.Errorf("power: nvml: GPU %s: reading the energy counter: %w", g.id, ret)
	}
	switch _, ret := dev.GetPowerUsage(); ret {
	case nvml.SUCCESS:
		g.hasPower = true
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return nil, fmt.Errorf("power: nvml: GPU %s: reading power usage: %w", g.id, ret)
	}
	if !g.hasCounter && !g.hasPower {
		return nil, fmt.Errorf("power: nvml: GPU %s offers neither an energy counter nor power readings: leave it out of the GPU selection", g.id)
	}
	return g, nil
}

func (s *nvmlSource) Name() string { return KindNVML }

func (s *nvmlSource) Read(ctx context.Context) ([]Reading, error) {
	out := make([]Reading, 0, len(s.gpus))
	var errs []error
	for _, g := range s.gpus {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		r, err := g.read(s.now())
		if r.HasEnergy || r.HasPower {
			out = append(out, r)
		}
		if err != nil {
			errs = append(errs, &GPUError{GPU: g.id, Err: err})
		}
	}
	return out, errors.Join(errs...)
}

func (g *nvmlGPU) read(t time.Time) (Reading, error) {
	r := Reading{Time: t, GPU: g.id}
	var errs []error
	if g.hasCounter {
		if mj, ret := g.dev.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			r.EnergyJ, r.Discontinuity = g.counter.observe(mj, t)
			r.HasEnergy = true
		} else {
			errs = append(errs, fmt.Errorf("energy counter: %w", ret))
		}
	}
	if g.hasPower {
		if mw, ret := g.dev.GetPowerUsage(); ret == nvml.SUCCESS {
			r.PowerW, r.HasPower = float64(mw)/1000, true
		} else {
			errs = append(errs, fmt.Errorf("power usage: %w", ret))
		}
	}
	return r, errors.Join(errs...)
}

// Close shuts NVML down once; later calls return the first result.
func (s *nvmlSource) Close() error {
	s.closeOnce.Do(func() {
		if ret := s.lib.Shutdown(); ret != nvml.SUCCESS {
			s.closeErr = fmt.Errorf("power: nvml: shutdown: %w", ret)
		}
	})
	return s.closeErr
}
