package power

import (
	"fmt"
	"sort"
	"time"
)

// TotalWindow names the cumulative figures, since the Meter's first poll,
// beside the sliding windows ("10s", "1m", ...).
const TotalWindow = "total"

// Figures are the energy figures of one span of time. Pointer fields are nil
// (JSON null) when the figure is unknown: no energy source, fewer than two
// readings, or a zero denominator. They are never filled with a guess.
type Figures struct {
	// Seconds is the span actually covered: a sliding window covers at
	// least its nominal length (it starts at the newest poll no later than
	// its start) unless the Meter has not run that long yet.
	Seconds float64 `json:"seconds"`
	// EnergyJ is the energy in joules; for a model, its attributed share.
	EnergyJ *float64 `json:"energy_joules"`
	// AvgPowerW is EnergyJ / Seconds in watts.
	AvgPowerW *float64 `json:"avg_power_watts"`
	// Requests is the number of requests served in the span.
	Requests         int64    `json:"requests"`
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	JoulesPerRequest *float64 `json:"joules_per_request"`
}

// Snapshot is the Meter's state for the status endpoint.
type Snapshot struct {
	Source string `json:"source"`
	// Available is set while the source yields figures; Unavailable says
	// why not, and what the policies do instead (available.go).
	Available       bool       `json:"available"`
	Unavailable     string     `json:"unavailable,omitempty"`
	Time            *time.Time `json:"time"` // of the newest poll; null before the first
	IntervalSeconds float64    `json:"interval_seconds"`
	// Error is the newest poll's failure that concerns no single GPU
	// (e.g. Triton's metrics endpoint unreachable).
	Error        string             `json:"error,omitempty"`
	SourceErrors int64              `json:"source_errors"`
	Windows      map[string]Figures `json:"windows"`
	GPUs         []GPUSnapshot      `json:"gpus"`
	Models       []ModelSnapshot    `json:"models"`
}

// GPUSnapshot is one GPU's figures. Idle and busy figures are cumulative.
type GPUSnapshot struct {
	GPU string `json:"gpu"`
	// Method is how its energy was measured: "counter" (the device's energy
	// counter), "power_integration" (trapezoidal integration of board
	// power), "mixed", or "" before the second reading.
	Method string   `json:"method"`
	PowerW *float64 `json:"power_watts"` // newest reading
	// IdlePowerW is the mean power over intervals with no batch in flight
	// (and none in the interval before).
	IdlePowerW *float64 `json:"idle_power_watts"`
	// BusyPowerW is the energy not explained by idle power, per second
	// with a batch in flight.
	BusyPowerW        *float64           `json:"busy_power_watts"`
	IdleEnergyJ       *float64           `json:"idle_energy_joules"`
	BusyEnergyJ       *float64           `json:"busy_energy_joules"`
	BusySeconds       float64            `json:"busy_seconds"`
	IdleSeconds       float64            `json:"idle_seconds"`
	UnmeasuredSeconds float64            `json:"unmeasured_seconds"`
	ReadErrors        int64              `json:"read_errors"`
	Error             string             `json:"error,omitempty"` // newest poll's failure
	Windows           map[string]Figures `json:"windows"`
}

// ModelSnapshot is one model's figures; its energy is the share of each
// GPU's energy in proportion to the model's batch time on that GPU.
type ModelSnapshot struct {
	Model        string             `json:"model"`
	BatchSeconds float64            `json:"batch_seconds"`
	Windows      map[string]Figures `json:"windows"`
}

// windowName labels a window: "10s", "1m", "1h", or Go's duration syntax.
func windowName(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// Snapshot returns the figures as of the newest poll.
//
// It stays one function: the figures of the whole meter, the GPUs and the
// models read under one lock from the same polls.
func (m *Meter) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	snap := Snapshot{
		Source:          m.src.Name(),
		Available:       m.hasSource && m.measure.on,
		Unavailable:     m.unavailable(),
		IntervalSeconds: m.opts.Interval.Seconds(),
		SourceErrors:    m.srcErrs,
		Windows:         make(map[string]Figures),
	}
	if m.srcErr != nil {
		snap.Error = m.srcErr.Error()
	}
	names := []string{TotalWindow}
	for _, w := range m.opts.Windows {
		names = append(names, windowName(w))
	}
	var spans []span
	if len(m.hist) > 0 {
		end := &m.hist[len(m.hist)-1]
		t := end.at
		snap.Time = &t
		spans = append(spans, m.span(m.first, end))
		for _, w := range m.opts.Windows {
			spans = append(spans, m.span(m.windowStart(end.at.Add(-w)), end))
		}
	}

	for i, g := range m.gpus {
		gs := GPUSnapshot{
			GPU:               g.id,
			Method:            g.method(),
			UnmeasuredSeconds: g.unmeasured.Seconds(),
			ReadErrors:        g.errors,
			Error:             g.lastErr,
			Windows:           make(map[string]Figures, len(names)),
		}
		if g.readings > 0 && g.last.HasPower {
			gs.PowerW = ptr(g.last.PowerW)
		}
		if len(spans) > 0 {
			g.idleBusy(&gs, &m.hist[len(m.hist)-1], i)
		}
		for j, name := range names {
			gs.Windows[name] = figuresAt(spans, j, func(s *span) Figures { return s.gpu[i] })
		}
		snap.GPUs = append(snap.GPUs, gs)
	}

	models := m.modelNames()
	for _, model := range models {
		ms := ModelSnapshot{Model: model, Windows: make(map[string]Figures, len(names))}
		for k, c := range m.cum {
			if k.model == model {
				ms.BatchSeconds += c.batchS
			}
		}
		for j, name := range names {
			ms.Windows[name] = figuresAt(spans, j, func(s *span) Figures { return s.model[model] })
		}
		snap.Models = append(snap.Models, ms)
	}
	for j, name := range names {
		snap.Windows[name] = figuresAt(spans, j, func(s *span) Figures { return s.all })
	}
	return snap
}

func figuresAt(spans []span, j int, pick func(*span) Figures) Figures {
	if j >= len(spans) {
		return Figures{}
	}
	return pick(&spans[j])
}

func (m *Meter) modelNames() []string {
	seen := make(map[string]bool)
	var names []string
	for k := range m.cum {
		if !seen[k.model] {
			seen[k.model] = true
			names = append(names, k.model)
		}
	}
	sort.Strings(names)
	return names
}

// windowStart returns the newest sample at or before t, or the oldest kept.
func (m *Meter) windowStart(t time.Time) *sample {
	i := sort.Search(len(m.hist), func(i int) bool { return m.hist[i].at.After(t) })
	if i == 0 {
		return &m.hist[0]
	}
	return &m.hist[i-1]
}

func (g *gpuState) method() string {
	switch {
	case g.counterN > 0 && g.integratedN > 0:
		return "mixed"
	case g.counterN > 0:
		return "counter"
	case g.integratedN > 0:
		return "power_integration"
	}
	return ""
}

// idleBusy fills the cumulative idle/busy split of GPU i as of sample end.
func (g *gpuState) idleBusy(gs *GPUSnapshot, end *sample, i int) {
	if i >= len(end.gpus) || !end.gpus[i].present {
		return
	}
	busy := (end.gpus[i].busy - g.busyAtFirst).Seconds()
	total := end.at.Sub(g.firstAt).Seconds()
	idle := max(0, total-busy)
	gs.BusySeconds, gs.IdleSeconds = busy, idle
	if g.idleS > 0 {
		gs.IdlePowerW = ptr(g.idleE / g.idleS)
	}
	if !end.gpus[i].known {
		return
	}
	e := end.gpus[i].energyJ
	switch {
	case busy <= 0: // never busy: all of it was idle
		gs.IdleEnergyJ, gs.BusyEnergyJ = ptr(e), ptr(0.0)
	case idle <= 0: // never idle: all of it was busy
		gs.IdleEnergyJ, gs.BusyEnergyJ = ptr(0.0), ptr(e)
		gs.BusyPowerW = ptr(e / busy)
	case gs.IdlePowerW != nil:
		idleE := min(e, *gs.IdlePowerW*idle)
		gs.IdleEnergyJ, gs.BusyEnergyJ = ptr(idleE), ptr(e-idleE)
		gs.BusyPowerW = ptr((e - idleE) / busy)
	}
}

// span holds the figures between two samples.
type span struct {
	all   Figures
	gpu   []Figures
	model map[string]Figures
}

// It stays one function: one pass sharing each GPU's energy among the models
// by their batch time, the sums it fills read together.
func (m *Meter) span(s, e *sample) span {
	out := span{gpu: make([]Figures, len(m.gpus)), model: make(map[string]Figures)}
	known := make(map[string]int, len(m.gpus)) // GPU id -> index
	for i, g := range m.gpus {
		known[g.id] = i
	}
	// Per (model, GPU) differences; batches naming an unknown GPU count as
	// unattributed ("").
	type diff struct {
		requests int64
		batchS   float64
	}
	d := make(map[modelKey]diff)
	for k, c := range e.models {
		b := s.models[k]
		if _, ok := known[k.gpu]; !ok {
			k.gpu = ""
		}
		x := d[k]
		x.requests += c.requests - b.requests
		x.batchS += c.batchS - b.batchS
		d[k] = x
	}
	models := make(map[string]bool)
	var globalW float64
	globalByModel := make(map[string]float64)
	requestsByModel := make(map[string]int64)
	for k, x := range d {
		models[k.model] = true
		globalW += x.batchS
		globalByModel[k.model] += x.batchS
		requestsByModel[k.model] += x.requests
	}

	energyByModel := make(map[string]float64)
	anyKnown := false
	var energy float64
	for i, g := range m.gpus {
		var requests int64
		for k, x := range d {
			if k.gpu == g.id || (k.gpu == "" && len(m.gpus) == 1) {
				requests += x.requests
			}
		}
		ep := pointAt(e, i)
		if !ep.known {
			out.gpu[i] = Figures{Requests: requests}
			continue
		}
		e0, t0 := 0.0, g.firstAt
		if sp := pointAt(s, i); sp.present {
			e0, t0 = sp.energyJ, s.at
		}
		ej := ep.energyJ - e0
		secs := e.at.Sub(t0).Seconds()
		out.gpu[i] = figures(secs, ej, true, requests)
		anyKnown = true
		energy += ej

		// Share this GPU's energy by batch time on it; a GPU with no batch
		// time in the span shares by batch time overall.
		var w float64
		share := make(map[string]float64)
		for k, x := range d {
			if k.gpu == g.id || k.gpu == "" {
				share[k.model] += x.batchS
				w += x.batchS
			}
		}
		if w == 0 {
			share, w = globalByModel, globalW
		}
		if w > 0 {
			for model, ws := range share {
				energyByModel[model] += ej * ws / w
			}
		}
	}
	secs := e.at.Sub(s.at).Seconds()
	out.all = figures(secs, energy, anyKnown, e.served-s.served)
	for model := range models {
		out.model[model] = figures(secs, energyByModel[model], anyKnown, requestsByModel[model])
	}
	return out
}

func pointAt(s *sample, i int) gpuPoint {
	if i < len(s.gpus) {
		return s.gpus[i]
	}
	return gpuPoint{}
}

func figures(secs, energy float64, known bool, requests int64) Figures {
	f := Figures{Seconds: secs, Requests: requests}
	if !known {
		return f
	}
	f.EnergyJ = ptr(energy)
	if secs > 0 {
		f.AvgPowerW = ptr(energy / secs)
	}
	if energy > 0 {
		f.RequestsPerJoule = ptr(float64(requests) / energy)
	}
	if requests > 0 {
		f.JoulesPerRequest = ptr(energy / float64(requests))
	}
	return f
}

func ptr[T any](v T) *T { return &v }
