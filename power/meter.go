package power

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
)

// Meter polls a Source, turns its readings into joules per GPU, and combines
// them with the batches the caller reports into idle and busy power and
// requests per joule. All methods are safe for concurrent use.
type Meter struct {
	src       Source
	opts      Options
	hasSource bool      // a source other than None
	measure   measuring // whether it yields figures (available.go)
	maxWin    time.Duration
	settle    time.Duration                                  // how long power readings lag behind the load
	tick      func(time.Duration) (<-chan time.Time, func()) // injectable for tests
	pollMu    sync.Mutex                                     // one Read at a time
	mu        sync.Mutex
	busy      map[string]*busyState // per GPU id, batches in flight
	anyBusy   int                   // in-flight batches that named no GPU
	cum       map[modelKey]*modelCum
	served    int64
	gpus      []*gpuState
	gpuIdx    map[string]int
	first     *sample
	hist      []sample // newest last; trimmed to the longest window
	srcErr    error    // the last poll's source-level failure, if any
	srcErrs   int64
}

// busyState tracks the union of the batch intervals on one GPU.
type busyState struct {
	inflight int
	since    time.Time
	acc      time.Duration
}

func (b *busyState) inc(t time.Time) {
	if b.inflight == 0 {
		b.since = t
	}
	b.inflight++
}

func (b *busyState) dec(t time.Time) {
	if b.inflight == 0 { // a Span ended twice: ignore rather than go negative
		return
	}
	b.inflight--
	if b.inflight == 0 && t.After(b.since) {
		b.acc += t.Sub(b.since)
	}
}

// at returns the busy time up to t.
func (b *busyState) at(t time.Time) time.Duration {
	d := b.acc
	if b.inflight > 0 && t.After(b.since) {
		d += t.Sub(b.since)
	}
	return d
}

type modelKey struct{ model, gpu string }

type modelCum struct {
	requests int64
	batchS   float64 // sum of batch durations, the weight energy is shared by
}

// gpuState is the Meter's running account of one GPU.
type gpuState struct {
	id           string
	last         Reading
	readings     int
	firstAt      time.Time // meter time of the first reading
	busyAtFirst  time.Duration
	prevBusy     time.Duration
	prevAt       time.Time
	lastBusyAt   time.Time // end of the newest interval that had a batch
	energyJ      float64
	counterN     int // intervals measured by the energy counter
	integratedN  int // intervals measured by integrating power
	unmeasured   time.Duration
	idleE, idleS float64 // energy and seconds of settled idle intervals
	errors       int64
	lastErr      string
}

// sample is the Meter's cumulative state at one poll; windows are
// differences between two samples.
type sample struct {
	at     time.Time
	gpus   []gpuPoint // by index into Meter.gpus
	models map[modelKey]modelCum
	served int64
}

type gpuPoint struct {
	present bool
	known   bool // at least two readings, so energyJ covers a span
	energyJ float64
	busy    time.Duration
}

// NewMeter returns a Meter for src. Call Run to poll it, or Poll to drive it
// by hand.
func NewMeter(src Source, opts Options) (*Meter, error) {
	if src == nil {
		return nil, errors.New("power: NewMeter: nil Source (use power.None{} to run without energy figures)")
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	none := false
	switch src.(type) {
	case None, *None:
		none = true
	}
	m := &Meter{
		src:       src,
		opts:      o,
		hasSource: !none,
		measure:   measuring{log: o.Logger},
		tick:      realTicker,
		busy:      make(map[string]*busyState),
		cum:       make(map[modelKey]*modelCum),
		gpuIdx:    make(map[string]int),
	}
	for _, w := range o.Windows {
		m.maxWin = max(m.maxWin, w)
	}
	m.settle = defaultSettle
	if s, ok := src.(settler); ok {
		m.settle = s.settle()
	}
	return m, nil
}

// settler is implemented by sources whose power readings lag the load by
// more than defaultSettle.
type settler interface{ settle() time.Duration }

// defaultSettle covers NVML's power reading, averaged over the last second
// on Ampere and later GPUs (nvml.h, nvmlDeviceGetPowerUsage).
const defaultSettle = time.Second

func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// Available reports whether the Meter measures: it has an energy source and
// the source yielded a figure at the last polls (available.go). Without
// one, every energy figure is absent (null in JSON, no Prometheus series).
func (m *Meter) Available() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hasSource && m.measure.on
}

// Source returns the polled source.
func (m *Meter) Source() Source { return m.src }

// Run polls the source every Interval until ctx is done, then returns nil.
// Read failures do not stop it: they show in Snapshot and the metrics.
// A panic while polling (a driver's, a malformed metrics page's) is
// recovered and polling starts again after a pause (guard.Loop).
func (m *Meter) Run(ctx context.Context) error {
	guard.Loop(ctx, nil, "power", m.run)
	return nil
}

func (m *Meter) run(ctx context.Context) {
	c, stop := m.tick(m.opts.Interval)
	defer stop()
	m.Poll(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c:
			m.Poll(ctx)
		}
	}
}

// Poll reads the source once and accounts for the readings. It returns the
// read error, which is also kept for Snapshot.
func (m *Meter) Poll(ctx context.Context) error {
	m.pollMu.Lock()
	defer m.pollMu.Unlock()
	readings, err := m.src.Read(ctx)
	at := m.opts.Now()

	m.mu.Lock()
	defer m.mu.Unlock()
	gpuErr := make(map[string]string)
	var srcErr []error
	eachError(err, func(e error) {
		var ge *GPUError
		if errors.As(e, &ge) {
			gpuErr[ge.GPU] = joinMsg(gpuErr[ge.GPU], ge.Err.Error())
			return
		}
		srcErr = append(srcErr, e)
	})
	m.srcErr = errors.Join(srcErr...)
	if m.srcErr != nil {
		m.srcErrs++
	}
	for _, r := range readings {
		m.account(r, at)
	}
	for id, msg := range gpuErr {
		g := m.gpu(id, at)
		g.errors++
		g.lastErr = msg
	}
	for _, g := range m.gpus {
		if _, failed := gpuErr[g.id]; !failed && m.srcErr == nil {
			g.lastErr = ""
		}
	}
	m.record(at)
	if m.hasSource {
		m.measure.poll(m.src.Name(), yielded(readings), len(readings), err)
	}
	if err != nil {
		return fmt.Errorf("power: reading %s: %w", m.src.Name(), err)
	}
	return nil
}

func joinMsg(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// eachError calls fn for every leaf of a tree of joined errors.
func eachError(err error, fn func(error)) {
	if err == nil {
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			eachError(e, fn)
		}
		return
	}
	fn(err)
}

// gpu returns the state of GPU id, creating it on first sight.
func (m *Meter) gpu(id string, at time.Time) *gpuState {
	if i, ok := m.gpuIdx[id]; ok {
		return m.gpus[i]
	}
	g := &gpuState{id: id}
	m.gpuIdx[id] = len(m.gpus)
	m.gpus = append(m.gpus, g)
	m.busyOf(id, at)
	return g
}

// busyOf returns GPU id's busy state; a new one inherits the batches in
// flight that named no GPU, since those may be running on it.
func (m *Meter) busyOf(id string, at time.Time) *busyState {
	b := m.busy[id]
	if b == nil {
		b = &busyState{inflight: m.anyBusy, since: at}
		m.busy[id] = b
	}
	return b
}

// account adds the interval since the GPU's previous reading.
func (m *Meter) account(r Reading, at time.Time) {
	g := m.gpu(r.GPU, at)
	busyNow := m.busyOf(r.GPU, at).at(at)
	if g.readings == 0 {
		g.last, g.readings = r, 1
		g.firstAt, g.busyAtFirst, g.prevBusy, g.prevAt = at, busyNow, busyNow, at
		g.lastBusyAt = at // what ran before is unknown: treat it as busy
		return
	}
	dt := r.Time.Sub(g.last.Time)
	if dt <= 0 { // not newer than what we have: nothing to integrate
		return
	}
	var dE float64
	measured := true
	switch p := g.last; {
	case p.HasEnergy && r.HasEnergy && !r.Discontinuity:
		dE = r.EnergyJ - p.EnergyJ
		g.counterN++
	case p.HasPower && r.HasPower:
		dE = (p.PowerW + r.PowerW) / 2 * dt.Seconds() // trapezoid
		g.integratedN++
	default:
		measured = false
		g.unmeasured += dt
	}
	g.energyJ += dE
	// An interval counts towards idle power only if no batch ran in it nor
	// in the settle time before it: power readings lag (NVML averages over
	// 1 s on Ampere and later, Triton republishes every 2 s), so the first
	// idle intervals after a batch still carry busy power.
	if busyNow != g.prevBusy {
		g.lastBusyAt = at
	} else if measured && g.prevAt.Sub(g.lastBusyAt) >= m.settle {
		g.idleE += dE
		g.idleS += dt.Seconds()
	}
	g.prevBusy, g.prevAt = busyNow, at
	g.last = r
	g.readings++
}

func (m *Meter) record(at time.Time) {
	s := sample{
		at:     at,
		gpus:   make([]gpuPoint, len(m.gpus)),
		models: make(map[modelKey]modelCum, len(m.cum)),
		served: m.served,
	}
	for i, g := range m.gpus {
		s.gpus[i] = gpuPoint{
			present: g.readings > 0,
			known:   g.readings > 1,
			energyJ: g.energyJ,
			busy:    m.busyOf(g.id, at).at(at),
		}
	}
	for k, c := range m.cum {
		s.models[k] = *c
	}
	if m.first == nil {
		f := s
		m.first = &f
	}
	m.hist = append(m.hist, s)
	// Keep the newest sample at or before (now - longest window) as the base
	// of that window; drop everything older.
	cut := at.Add(-m.maxWin)
	for len(m.hist) > 2 && !m.hist[1].at.After(cut) {
		m.hist = m.hist[1:]
	}
	if cap(m.hist) > 4*len(m.hist)+64 { // let the dropped prefix be collected
		m.hist = slices.Clone(m.hist)
	}
}

// Span is one batch in flight, from Meter.Begin to Span.End.
type Span struct {
	m     *Meter
	model string
	gpu   string
	start time.Time
}

// Begin notes that a batch for model started on gpu (its UUID, or "" when
// the caller cannot know which GPU serves it). Call End on the result
// exactly once, when the batch's response arrived or failed.
func (m *Meter) Begin(model, gpu string) Span { return m.begin(model, gpu, m.opts.Now()) }

// begin notes that a batch for model started on gpu at now.
func (m *Meter) begin(model, gpu string, now time.Time) Span {
	m.mu.Lock()
	if gpu == "" {
		m.anyBusy++
		for _, b := range m.busy {
			b.inc(now)
		}
	} else {
		m.busyOf(gpu, now).inc(now)
	}
	m.mu.Unlock()
	return Span{m: m, model: model, gpu: gpu, start: now}
}

// End closes the batch; served is how many of its requests got a result,
// the numerator of requests per joule. The zero Span ignores End.
func (s Span) End(served int) {
	if s.m == nil {
		return
	}
	now := s.m.opts.Now()
	s.m.end(s.model, s.gpu, now, now.Sub(s.start), served)
}

// end closes a batch of model on gpu at now, which took took.
func (m *Meter) end(model, gpu string, now time.Time, took time.Duration, served int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gpu == "" {
		if m.anyBusy > 0 {
			m.anyBusy--
			for _, b := range m.busy {
				b.dec(now)
			}
		}
	} else {
		m.busyOf(gpu, now).dec(now)
	}
	k := modelKey{model, gpu}
	c := m.cum[k]
	if c == nil {
		c = new(modelCum)
		m.cum[k] = c
	}
	if served > 0 {
		c.requests += int64(served)
		m.served += int64(served)
	}
	if took > 0 {
		c.batchS += took.Seconds()
	}
}
