package emulator

import (
	"context"
	"sync"
	"time"
)

// instancePool holds a model's execution instances. Like Triton without a
// dynamic batcher, a request that finds every instance busy waits in FIFO
// order, and one instance executes one batch at a time.
type instancePool struct {
	mu      sync.Mutex
	free    int
	waiters []chan struct{} // FIFO; a waiter's channel is closed when it is granted an instance
}

func newInstancePool(n int) *instancePool { return &instancePool{free: n} }

// acquire takes an instance, waiting in line behind earlier callers. It
// returns ctx.Err() if ctx ends first, and then holds nothing.
func (p *instancePool) acquire(ctx context.Context) error {
	p.mu.Lock()
	if p.free > 0 && len(p.waiters) == 0 {
		p.free--
		p.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-ch:
		// Granted while giving up: pass the instance on.
		p.releaseLocked()
	default:
		for i, w := range p.waiters {
			if w == ch {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				break
			}
		}
	}
	return ctx.Err()
}

// release returns an instance, handing it to the longest waiter if any.
func (p *instancePool) release() {
	p.mu.Lock()
	p.releaseLocked()
	p.mu.Unlock()
}

func (p *instancePool) releaseLocked() {
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters[0] = nil
		p.waiters = p.waiters[1:]
		close(ch)
		return
	}
	p.free++
}

// queued is the number of requests waiting for an instance.
func (p *instancePool) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters)
}

// gpu accounts for the energy and utilisation of the one emulated device
// every model runs on. Energy follows the batch service model: a batch of b
// rows costs zeta(b) mJ spread evenly over its execution time, and the idle
// power is drawn all the time, busy or not.
type gpu struct {
	clock     Clock
	idleWatts float64

	mu      sync.Mutex
	start   time.Time
	doneMJ  float64 // energy of finished batches
	running map[uint64]run
	nextID  uint64

	busyTotal time.Duration // time with at least one batch running, finished spans
	busySince time.Time     // start of the current busy span when len(running) > 0

	// utilisation is sampled per interval, like Triton's GPU metrics.
	utilAt   time.Time
	utilBusy time.Duration
	util     float64
}

type run struct {
	start  time.Time
	dur    time.Duration
	zetaMJ float64
}

// utilInterval is the shortest window nv_gpu_utilization is computed over;
// Triton samples GPU metrics per interval (2 s by default) for the same reason.
const utilInterval = time.Second

func newGPU(clock Clock, idleWatts float64) *gpu {
	now := clock.Now()
	return &gpu{clock: clock, idleWatts: idleWatts, start: now, utilAt: now, running: map[uint64]run{}}
}

// begin records a batch that runs for dur from now and costs zetaMJ.
func (g *gpu) begin(dur time.Duration, zetaMJ float64) uint64 {
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.running) == 0 {
		g.busySince = now
	}
	g.nextID++
	g.running[g.nextID] = run{start: now, dur: dur, zetaMJ: zetaMJ}
	return g.nextID
}

// end finishes a batch. A batch cut short (the server closed) is charged
// for the share of its time it ran.
func (g *gpu) end(id uint64) {
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.running[id]
	if !ok {
		return
	}
	delete(g.running, id)
	g.doneMJ += r.energyMJ(now)
	if len(g.running) == 0 {
		g.busyTotal += now.Sub(g.busySince)
	}
}

// energyMJ is the energy the batch has consumed by now.
func (r run) energyMJ(now time.Time) float64 {
	if r.dur <= 0 {
		return r.zetaMJ
	}
	f := float64(now.Sub(r.start)) / float64(r.dur)
	switch {
	case f < 0:
		f = 0
	case f > 1:
		f = 1
	}
	return r.zetaMJ * f
}

// sample is the device's state at one instant.
type gpuSample struct {
	EnergyJ     float64 // since the emulator started, idle included
	PowerW      float64 // idle + sum over running batches of zeta/tau
	Utilization float64 // share of the last interval with a batch running, 0..1
}

func (g *gpu) sample() gpuSample {
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	mJ := g.doneMJ
	powerW := g.idleWatts
	for _, r := range g.running {
		mJ += r.energyMJ(now)
		if r.dur > 0 && now.Sub(r.start) < r.dur {
			// mJ per ms is J per s: watts.
			powerW += r.zetaMJ / (float64(r.dur) / float64(time.Millisecond))
		}
	}
	busy := g.busyTotal
	if len(g.running) > 0 {
		busy += now.Sub(g.busySince)
	}
	if win := now.Sub(g.utilAt); win >= utilInterval {
		g.util = min(1, max(0, float64(busy-g.utilBusy)/float64(win)))
		g.utilAt, g.utilBusy = now, busy
	}
	return gpuSample{
		EnergyJ:     mJ/1000 + g.idleWatts*now.Sub(g.start).Seconds(),
		PowerW:      powerW,
		Utilization: g.util,
	}
}
