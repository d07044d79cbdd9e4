package policy

import (
	"math"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// guardHoldPlans is how many plans the budget stays work-conserving after
// the load last reached the near-overload line. The line is crossed by a
// window's count of arrivals, and at a load near it that count falls on
// either side from one second to the next; each plan would start on the
// queue the last left. Fifty plans are five seconds at the default window:
// what a plan near the line would save is not worth a backlog
// (docs/ALGORITHMS.md, "Near overload").
const guardHoldPlans = 50

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
func nearOverload(m smdp.Model, arrivals int, capVar, scv float64) bool {
	if arrivals <= 0 {
		return false
	}
	rel := math.Sqrt(1/float64(arrivals) + max(capVar, 0))
	return congestedRho(m.Rho(), scv)*(1+overloadSigmas*rel) >= 1-congestionMargin
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

// ewVariance is an exponentially weighted mean and variance of a series.
type ewVariance struct {
	n          int
	mean, vari float64
}

// ewWeight is the weight of a new value: a memory of about twenty plans
// (five seconds of 250-ms slices).
const ewWeight = 0.05

func (v *ewVariance) add(x float64) {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return
	}
	v.n++
	if v.n == 1 {
		v.mean = x
		return
	}
	d := x - v.mean
	v.mean += ewWeight * d
	v.vari = (1 - ewWeight) * (v.vari + ewWeight*d*d)
}

// variance is 0 until two values were seen.
func (v *ewVariance) variance() float64 { return v.vari }
