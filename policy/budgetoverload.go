package policy

import (
	"math"
	"time"
)

// guardHoldPlans is how many plans the budget stays work-conserving after
// the load's count last reached the near-overload line. The line is
// crossed by a count of arrivals, and at a load near it that count falls
// on either side from one second to the next; each plan would start on
// the queue the last left. Fifty plans are twelve and a half seconds at
// the default window:
// what a plan near the line would save is not worth a backlog
// (docs/ALGORITHMS.md, "Near overload").
const guardHoldPlans = 50

// capacityHoldPlans is how many plans the budget stays work-conserving
// after the capacity's spread alone took the load to the line: the
// spread's memory (ewWeight), over which the capacity's rho moves with it
// from plan to plan. A fresh proxy's fit moves as it settles, and its
// spread reaches the line at loads its count tells from it well; the
// guard then lasts as long as the spread does and its memory, not
// guardHoldPlans more.
const capacityHoldPlans = int(1 / ewWeight)

// overloadSigmas is how many standard errors of the load the budget keeps
// between the load it plans for and overload.
const overloadSigmas = 3

// nearOverload reports whether the load cannot be told from overload:
// rho plus overloadSigmas standard errors reaches 1. The load's relative
// error has two parts: the window's Poisson count of arrivals (1/sqrt(n))
// and the capacity's spread, capVar the variance of the log of the
// throughput of full batches from window to window (the fit and the
// overheads are measured too).
//
// Near saturation a plan's latency moves as 1/(1-rho)^2 with the rate, so
// a rate a few per cent off plans a wait the queue cannot pay for, and the
// saving there is small; ad-hoc is within every budget. Live the capacity
// moves too, as the fit and the overheads move with the host's load
// (docs/ALGORITHMS.md, "Near overload").
//
// The margin ends short of the model's capacity, at 1 - congestionMargin:
// a wait near saturation raises the number of calls in flight, and a
// proxy on a busy host serves many calls in flight more slowly, so a
// plan that waits can tip the load into a backlog that ad-hoc at the same
// rate never enters (below, congestionMargin).
//
// A server whose batches vary (scv, Estimate.ServiceSCV) queues as an
// exact one at a higher load, congestedRho, and the test reads that load.
func nearOverload(rho float64, arrivals int, capVar, scv float64) bool {
	if arrivals <= 0 {
		return false
	}
	rel := math.Sqrt(1/float64(arrivals) + max(capVar, 0))
	return congestedRho(rho, scv)*(1+overloadSigmas*rel) >= 1-congestionMargin
}

// loadTrack is the arrival rate over the last seconds, while it holds:
// each plan's window rate weighted by the time since the plan before and
// decayed by 1 - ewWeight a plan (a memory of about twenty plans, five
// seconds at the default window). One window's count of a steady Poisson
// load is off by 1/sqrt(n), and at a few hundred requests a second three
// of those standard errors reach the capacity line from a load at 0.7 of
// the capacity; five seconds' count is off by less than half as much.
type loadTrack struct {
	last      time.Time
	secs, sum float64 // decayed seconds, and window rates times seconds
}

// add takes the window's rate at now.
func (l *loadTrack) add(now time.Time, rate float64, window time.Duration) {
	if !l.last.IsZero() && now.After(l.last) && window > 0 {
		dt := min(now.Sub(l.last), window).Seconds()
		l.secs = (1-ewWeight)*l.secs + dt
		l.sum = (1-ewWeight)*l.sum + dt*rate
	}
	l.last = now
}

// reset forgets the rate: it stepped.
func (l *loadTrack) reset() { *l = loadTrack{} }

// guardLoad is the load the near-overload test reads for the slice with
// estimate e and model load rho: the tracked rate's rho and the arrivals
// it rests on, once two windows' seconds are tracked and the window's
// count is within overloadSigmas standard errors of the tracked rate;
// the window's own rho and count otherwise (a load that rises, or one
// not tracked long enough). The arrivals are the tracked rate times its
// decayed seconds, fewer than an exponential memory's effective count
// (twice as many), so the standard error is overstated, never under.
func (l *loadTrack) guardLoad(e Estimate, rho float64) (float64, int, time.Duration) {
	if l.secs < 2*e.Window.Seconds() || !(e.RatePerSec > 0) || !(l.secs > 0) {
		return rho, e.Arrivals, e.Window
	}
	rate := l.sum / l.secs
	mu := rate * e.Window.Seconds()
	if float64(e.Arrivals) > mu+overloadSigmas*math.Sqrt(mu) {
		return rho, e.Arrivals, e.Window
	}
	n := int(rate * l.secs)
	if n <= e.Arrivals {
		return rho, e.Arrivals, e.Window
	}
	return rho * rate / e.RatePerSec, n, time.Duration(l.secs * float64(time.Second))
}

// congestedRho is the load at which a queue of exact service times waits
// as long as one of service times with squared coefficient of variation
// scv waits at rho: Poisson arrivals wait rho/(1-rho) (1+scv)/2 service
// times (Pollaczek-Khinchine), so rho' / (1-rho') = (1+scv) rho/(1-rho).
func congestedRho(rho, scv float64) float64 {
	if rho >= 1 || scv <= 0 || math.IsNaN(scv) {
		return rho
	}
	x := (1 + scv) * rho / (1 - rho)
	return x / (1 + x)
}

// congestionMargin is the share of the modelled capacity a plan keeps free
// (the capacity line is at 1 - congestionMargin of it). Two reasons:
//
//   - The proxy's own congestion: on a host shared by the proxy, the
//     server and the clients, the waits' longer latencies raise the calls
//     in flight, the throughput of full batches falls below the model's
//     and a backlog forms that ad-hoc at the same rate never enters.
//   - Capacity under an absolute p99 bound, as MLPerf's server scenario
//     and a fleet's sizing measure it (scripts/capacity-p99.sh): it is
//     found where ad-hoc's p99 climbs steeply with the rate, and there a
//     hold that lives a little over its plan costs a share of the
//     capacity several times its share of the p99. Holding nowhere near
//     that edge, the default serves at least ad-hoc's rate under any bound
//     that puts the edge there.
//
// It gives up what a plan saves near capacity, which is little (a few per
// cent: TestBudgetNeedsAMaterialSaving logs it; docs/ALGORITHMS.md, "Near
// overload").
const congestionMargin = 0.20

// ewSpread is an exponentially weighted variance of a series from one
// value to the next: half the mean squared step (von Neumann's estimate),
// which reads a series' noise as its variance, as a variance about the
// mean does, but not its drift. A fresh proxy's fit settles over its
// first seconds and the capacity it gives moves in one direction as it
// does; about a lagging mean that drift reads as a spread, which held the
// guard at loads whose count the line tells from it well. The plans
// divide by the capacity as it is read now, so what the guard must allow
// for is how far it moves from one plan to the next.
type ewSpread struct {
	n          int
	last, vari float64
}

// ewWeight is the weight of a new value: a memory of about twenty plans
// (five seconds of 250-ms slices).
const ewWeight = 0.05

func (v *ewSpread) add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return
	}
	v.n++
	if v.n > 1 {
		d := x - v.last
		v.vari = (1-ewWeight)*v.vari + ewWeight*d*d/2
	}
	v.last = x
}

// variance is 0 until two values were seen.
func (v *ewSpread) variance() float64 { return v.vari }
