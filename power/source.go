package power

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// Reading is one GPU's state at one instant, as a Source saw it.
type Reading struct {
	Time time.Time
	// GPU identifies the device: its UUID where the source knows it.
	GPU string
	// EnergyJ is counter-derived energy in joules since the source started
	// watching this GPU. Only differences between consecutive readings of
	// one GPU mean anything, and only when both have HasEnergy set and the
	// later one has no Discontinuity.
	EnergyJ   float64
	HasEnergy bool
	// Discontinuity reports that the device counter reset or jumped since
	// the previous reading, so the energy in between is unknown from the
	// counter; the Meter integrates power over that interval instead.
	Discontinuity bool
	// PowerW is the board power in watts at Time.
	PowerW   float64
	HasPower bool
}

// Source reads every GPU it watches. Read returns the readings it could take
// even when some GPUs failed; the failures come back joined in the error,
// each as a *GPUError so that one broken GPU does not hide the others.
// Read is called by one goroutine at a time (the Meter serialises polls).
type Source interface {
	Name() string
	Read(ctx context.Context) ([]Reading, error)
	Close() error
}

// GPUError is a failure to read one GPU.
type GPUError struct {
	GPU string
	Err error
}

func (e *GPUError) Error() string { return "GPU " + e.GPU + ": " + e.Err.Error() }
func (e *GPUError) Unwrap() error { return e.Err }

var (
	// ErrNoDriver means the NVML library could not be loaded: this host has
	// no NVIDIA driver, or the driver is not loaded.
	ErrNoDriver = errors.New("NVIDIA driver not available")
	// ErrNotBuilt means the binary was built without NVML (the nonvml build
	// tag, or CGO_ENABLED=0).
	ErrNotBuilt = errors.New("NVML support not compiled in")
)

// The built-in sources' kinds (RegisterKind).
const (
	KindNVML   = "nvml"
	KindTriton = "triton"
	KindNone   = "none"
)

// nvmlAbout is what the nvml source reads, in every build.
const nvmlAbout = "this host's GPUs"

// Options configures a Source and the Meter that polls it. Zero values take
// the defaults documented on each field.
type Options struct {
	// Interval is the sampling period (default 1s, at least 10ms). Power is
	// integrated between samples, so its error grows with the square of the
	// interval (docs/ENERGY.md).
	Interval time.Duration
	// Windows are the sliding windows reported besides the cumulative
	// figures (default 10s, 1m, 5m).
	Windows []time.Duration
	// GPUs selects devices: NVML accepts indices ("0") or UUIDs, Triton
	// accepts UUIDs (its gpu_uuid label). Empty means every GPU.
	GPUs []string
	// TritonMetricsURL is Triton's metrics endpoint, for example
	// http://127.0.0.1:8002/metrics. Required by the triton source.
	TritonMetricsURL string
	// Timeout bounds one scrape of the Triton endpoint (default 2s).
	Timeout time.Duration
	// HTTPClient scrapes the Triton endpoint (default: a fresh client).
	HTTPClient *http.Client
	// Now is the clock (default time.Now). Tests inject their own.
	Now func() time.Time
	// Logger says when the source stops yielding figures and when it
	// yields them again (default: discarded).
	Logger *slog.Logger
}

const (
	defaultInterval = time.Second
	minInterval     = 10 * time.Millisecond
	defaultTimeout  = 2 * time.Second
)

var defaultWindows = []time.Duration{10 * time.Second, time.Minute, 5 * time.Minute}

// withDefaults validates o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.Interval == 0 {
		o.Interval = defaultInterval
	}
	if o.Interval < minInterval {
		return o, fmt.Errorf("power: Interval %v: must be at least %v", o.Interval, minInterval)
	}
	if o.Windows == nil {
		o.Windows = defaultWindows
	}
	seen := make(map[string]bool, len(o.Windows))
	for _, w := range o.Windows {
		if w < o.Interval {
			return o, fmt.Errorf("power: Windows: window %v is shorter than the sampling Interval %v", w, o.Interval)
		}
		name := windowName(w)
		if seen[name] {
			return o, fmt.Errorf("power: Windows: window %v given twice", w)
		}
		seen[name] = true
	}
	if o.Timeout == 0 {
		o.Timeout = defaultTimeout
	}
	if o.Timeout < 0 {
		return o, fmt.Errorf("power: Timeout %v: must be positive", o.Timeout)
	}
	for i, g := range o.GPUs {
		if strings.TrimSpace(g) == "" {
			return o, fmt.Errorf("power: GPUs[%d] is empty: want an index or a UUID", i)
		}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

func init() {
	RegisterKind(Kind{Name: KindNone, About: "no energy figures", Open: func(Options) (Source, error) { return None{}, nil }})
}

// None is the source of a proxy that cannot measure energy: it has no GPUs,
// and a Meter polling it reports every energy figure as absent.
type None struct{}

func (None) Name() string                                { return KindNone }
func (None) Read(ctx context.Context) ([]Reading, error) { return nil, nil }
func (None) Close() error                                { return nil }
