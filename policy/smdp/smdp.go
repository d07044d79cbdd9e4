// Package smdp computes SMDP-optimal batching policies (ALGORITHMS.md
// section 3) and evaluates any deterministic batching policy exactly on the
// same model, so that "cost of each policy vs the optimum" comes from one
// set of numbers.
//
// The model is a batch service queue with Poisson arrivals (rate lambda),
// batch time tau(a) = alpha*a + tau0 (deterministic, or Gamma-distributed
// around it with a given squared coefficient of variation, ServiceSCV) and
// batch energy zeta(a) = beta*a + zeta0. A decision is taken when a batch completes or a
// request arrives to an idle server; the state is the number of requests in
// the system and the action is 0 (wait) or a batch size 1..min(s, B_max).
// The objective is the long-run w1*(mean latency, ms) + w2*(mean power, W).
//
// The infinite state space is cut at SMax: an overflow state S_o stands for
// "SMax requests or more". It costs and moves like state SMax, pays an extra
// abstract cost Co per millisecond spent there, and allows every action
// 0..B_max. Solve finds the optimal policy by relative value iteration on the
// uniformized chain; Evaluate computes a policy's exact average cost from
// the stationary distribution of its embedded chain.
//
// Structure of the optimum. Across the published presets, loads and
// weights the tests cover, the serve/wait decision of the solved policy is
// a control limit L (wait iff fewer than L requests), the policy serves
// everything at L, and L grows with w2, as section 3 says. Section 3's
// "then serve min(s, B_max)" holds in the states the queue actually visits
// but not everywhere: with tau linear, serving n requests as two batches
// lowers their summed latency once n > 2*tau0/alpha, so in long queues the
// optimum may send fewer than min(s, B_max). Those states are rare; the
// pure control-limit policy (ControlLimit) with the same L stays close to
// the optimum (TestSolvedPolicyHasControlLimit bounds the gap).
//
// Units: milliseconds, millijoules, requests per millisecond. A cost rate is
// therefore w1*ms + w2*W (mJ/ms = W).
package smdp

import (
	"fmt"
	"math"

	"github.com/ratebatch/ratebatch/policy/batchcost"
)

// Model is the batch service queue: the linear latency and energy lines of
// one model on one GPU and the arrival rate.
type Model struct {
	batchcost.Latency
	batchcost.Energy         // zero when unknown
	MaxBatch         int     // B_max
	LambdaPerMs      float64 // Poisson arrival rate
	// Extra is the live proxy's own time around a batch (zero: none).
	Extra Extra
	// ServiceSCV is the squared coefficient of variation of a batch's time
	// on its instance, as a server's statistics show it; 0, a
	// deterministic batch time. With it a batch's time is taken as
	// Gamma-distributed around ServiceMs with a variance that grows in
	// proportion to its mean (SpreadScaleMs), matched to this SCV at the
	// batch size ad-hoc serves at the load, so the arrivals during a batch
	// are negative binomial (Poisson mixed over the batch time) and their
	// latency area grows by lambda*Var(T)/2, the Pollaczek-Khinchine second
	// moment: a server whose batches sometimes run several times slower
	// queues more at the same mean line, ad-hoc as every other rule
	// (docs/ALGORITHMS.md, "A server's spread in the plan").
	ServiceSCV float64
}

// SpreadScaleMs is the Gamma scale theta of the batch times: a batch of
// mean time T has variance theta*T (a sum of independent pieces, as a
// batch's rows and its fixed part are), so the SCV falls as 1/T with the
// batch size. theta is ServiceSCV times the mean time of the batch
// ad-hoc batching serves at this load (b = lambda*T(b), between 1 and
// B_max), where the measured SCV of the server's batches comes from. A
// variance in proportion to the mean keeps the arrivals during a batch of
// a+1 those of a batch of a plus an independent count, which the value
// iteration's convolution needs (expecter); a constant SCV would cost it
// 10 to 40 times the time.
func (m Model) SpreadScaleMs() float64 {
	if !(m.ServiceSCV > 0) {
		return 0
	}
	top := m.ServiceMs(m.MaxBatch)
	alpha := m.AlphaMs
	c0 := top - alpha*float64(m.MaxBatch) // intercept, with a merged batch's hold
	b := batchcost.Latency{AlphaMs: alpha, Tau0Ms: c0}.AdhocBatch(m.LambdaPerMs, m.MaxBatch)
	return m.ServiceSCV * (c0 + alpha*b)
}

// MaxServiceSCV bounds Model.ServiceSCV: beyond it the arrivals during one
// batch spread so far that the model's truncation at SMax, not the
// server, decides the plan. Measured servers read 0.003 (exact emulator)
// to 0.3 (rough emulator, PyTriton).
const MaxServiceSCV = 4

// Extra is the time a live proxy spends around a batch outside tau(b),
// as it measures it (docs/ALGORITHMS.md, "Costs outside tau(b)"). It
// depends on whether a batch holds one request or several: a lone request
// goes to the server as it came and its answer back as it came, while a
// batch of several is merged, its answer decoded and split, and each of
// its callers but the one that ran it woken.
//
// Hold is instance time: the server takes the next batch only after it,
// so it lengthens the batch (tau(b) + Hold) for the queue as for the
// latency. After is each request's delay between its batch freeing the
// instance and its answer reaching its caller: latency only.
type Extra struct {
	HoldLoneMs, HoldMergedMs   float64
	AfterLoneMs, AfterMergedMs float64
}

// HoldMs is the instance time beyond tau(a) of a batch of a requests.
func (x Extra) HoldMs(a int) float64 {
	if a <= 1 {
		return x.HoldLoneMs
	}
	return x.HoldMergedMs
}

// AfterMs is a request's delay after its batch of a requests.
func (x Extra) AfterMs(a int) float64 {
	if a <= 1 {
		return x.AfterLoneMs
	}
	return x.AfterMergedMs
}

// IsZero reports whether the model counts no time outside tau(b).
func (x Extra) IsZero() bool { return x == Extra{} }

// Validate reports a negative or non-finite part.
func (x Extra) Validate() error {
	for _, v := range [...]float64{x.HoldLoneMs, x.HoldMergedMs, x.AfterLoneMs, x.AfterMergedMs} {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("time outside tau(b) must be finite and >= 0 ms, got %+v", x)
		}
	}
	return nil
}

// ServiceMs is how long a batch of a requests holds the server: tau(a)
// and the proxy's hold around it.
func (m Model) ServiceMs(a int) float64 { return m.TauMs(a) + m.Extra.HoldMs(a) }

// ServiceMuPerMs is the throughput of batches of a requests, a/ServiceMs(a).
func (m Model) ServiceMuPerMs(a int) float64 { return float64(a) / m.ServiceMs(a) }

// ModelFor builds a Model at the load rho = lambda / mu(B_max) from a
// model's latency line, its energy line and B_max. An energy line that is
// zero (a profile that published none) yields a model whose power part is
// meaningless: w2 should then be 0.
func ModelFor(lat batchcost.Latency, en batchcost.Energy, maxBatch int, rho float64) Model {
	m := Model{Latency: lat, Energy: en, MaxBatch: maxBatch}
	m.LambdaPerMs = rho * m.ServiceMuPerMs(m.MaxBatch)
	return m
}

// Rho is the load lambda / mu(B_max); the queue is stable only below 1.
func (m Model) Rho() float64 { return m.LambdaPerMs / m.ServiceMuPerMs(m.MaxBatch) }

// Validate reports the first parameter that makes the model unusable,
// including an unstable load.
func (m Model) Validate() error {
	if err := m.Latency.Validate(); err != nil {
		return err
	}
	if err := m.Energy.Validate(); err != nil {
		return err
	}
	if err := m.Extra.Validate(); err != nil {
		return err
	}
	switch {
	case m.MaxBatch < 1:
		return fmt.Errorf("max batch (B_max) must be >= 1, got %d", m.MaxBatch)
	case !(m.LambdaPerMs > 0) || math.IsInf(m.LambdaPerMs, 0):
		return fmt.Errorf("arrival rate must be a finite number > 0 requests/ms, got %v", m.LambdaPerMs)
	case !(m.ServiceSCV >= 0 && m.ServiceSCV <= MaxServiceSCV):
		return fmt.Errorf("service time's squared coefficient of variation must be in [0, %v], got %v", MaxServiceSCV, m.ServiceSCV)
	}
	if rho := m.Rho(); !(rho < 1) {
		return fmt.Errorf("load rho = %.4g >= 1 is unstable: arrivals (%.4g req/ms) reach the throughput of full batches (B_max=%d: %.4g req/ms)",
			rho, m.LambdaPerMs, m.MaxBatch, m.ServiceMuPerMs(m.MaxBatch))
	}
	return nil
}

// Options are the objective weights and the solver's numerical settings.
type Options struct {
	W1      float64 // weight of mean latency (per ms); must be > 0
	W2      float64 // weight of mean power (per W); >= 0
	Co      float64 // abstract cost rate in the overflow state (cost per ms); >= 0
	Epsilon float64 // RVI stops when span(J_new - J) < Epsilon
	SMax    int     // largest exact state; S_o stands for SMax requests
	IterMax int     // RVI iteration cap
}

// Defaults of ALGORITHMS.md section 3.
const (
	DefaultEpsilon = 0.01
	DefaultIterMax = 10000
	DefaultSMax    = 200
	// DeltaAccept is the overflow share below which the finite
	// approximation is accepted.
	DeltaAccept = 0.001
)

// DefaultCo is the abstract overflow cost used when none is chosen: the
// average cost of ad-hoc batching on the same model (evaluated with Co = 0).
//
// Why: the overflow state caps the holding cost at SMax requests, so without
// a large enough Co a policy that never serves again once the queue reaches
// S_o looks cheap (bounded latency, zero power) although its real latency
// grows without limit; with weight on power that artifact can even win the
// optimization. Charging S_o at least what a feasible policy (ad-hoc, stable
// whenever rho < 1) costs on average makes every moment spent idle in S_o
// dearer than the optimum's average, so the optimum never parks there.
func DefaultCo(m Model, w1, w2 float64, sMax int) (float64, error) {
	o := Options{W1: w1, W2: w2, Epsilon: DefaultEpsilon, SMax: sMax, IterMax: DefaultIterMax}
	ev, err := Evaluate(m, o, AdHoc(m, sMax))
	if err != nil {
		return 0, fmt.Errorf("default overflow cost: %w", err)
	}
	return ev.G, nil
}

// DefaultOptions returns the section-3 defaults (SMax 200, epsilon 0.01,
// 10000 sweeps, Co from DefaultCo) for the given weights.
func DefaultOptions(m Model, w1, w2 float64) (Options, error) {
	co, err := DefaultCo(m, w1, w2, DefaultSMax)
	if err != nil {
		return Options{}, err
	}
	return Options{W1: w1, W2: w2, Co: co, Epsilon: DefaultEpsilon, SMax: DefaultSMax, IterMax: DefaultIterMax}, nil
}

func (o Options) validate(m Model) error {
	switch {
	case !(o.W1 > 0) || math.IsInf(o.W1, 0):
		return fmt.Errorf("w1 (latency weight) must be a finite number > 0, got %v", o.W1)
	case !(o.W2 >= 0) || math.IsInf(o.W2, 0):
		return fmt.Errorf("w2 (power weight) must be a finite number >= 0, got %v", o.W2)
	case !(o.Co >= 0) || math.IsInf(o.Co, 0):
		return fmt.Errorf("co (overflow cost) must be a finite number >= 0, got %v", o.Co)
	case !(o.Epsilon > 0):
		return fmt.Errorf("epsilon must be > 0, got %v", o.Epsilon)
	case o.SMax < m.MaxBatch:
		return fmt.Errorf("smax must be >= B_max (%d) so that every batch size fits below the overflow state, got %d", m.MaxBatch, o.SMax)
	case o.SMax > maxSMax:
		return fmt.Errorf("smax must be <= %d, got %d", maxSMax, o.SMax)
	case o.IterMax < 1:
		return fmt.Errorf("iter-max must be >= 1, got %d", o.IterMax)
	}
	return nil
}

// maxSMax bounds the dense policy-evaluation matrix, (SMax+2)^2 float64s
// (32 MB at 2000), and its O(SMax^3) elimination.
const maxSMax = 2000

// Evaluation is the exact long-run performance of one deterministic policy
// on the finite model.
type Evaluation struct {
	// G is the average cost per ms, sum pi c / sum pi y, including the
	// abstract overflow cost.
	G float64
	// Delta is the overflow state's share: pi_So c(S_o, .) / sum pi y.
	// The approximation is trustworthy when Delta < DeltaAccept.
	Delta float64
	// LatencyMs is the mean response time (wait + batch), by Little's law.
	LatencyMs float64
	// PowerW is the mean power, batch energy per unit time (mJ/ms = W).
	PowerW float64
	// OverflowCost is the abstract part Co * (share of time in S_o), so
	// G = W1*LatencyMs + W2*PowerW + OverflowCost.
	OverflowCost float64
	// MeanBatch is the mean size of the batches the policy sends.
	MeanBatch float64
	// PiOverflow is the stationary probability of S_o in the embedded chain.
	PiOverflow float64
}

// Solution is an optimal policy and its exact evaluation.
type Solution struct {
	Evaluation
	// Policy holds the action per state 0..SMax, then S_o (len SMax+2).
	Policy []int
	// ControlLimit is the smallest index of Policy whose action serves
	// (SMax+1 means only the overflow state serves).
	ControlLimit int
	// Iterations is the number of RVI sweeps; Converged reports whether
	// the span fell below Epsilon within IterMax.
	Iterations int
	Converged  bool
	// GLower and GUpper bracket the optimal average cost from the last
	// sweep (min and max of J_new - J); G of Policy lies in between.
	GLower, GUpper float64
	// Eta is the uniformization constant used.
	Eta float64
}

// Action returns the policy's action with the given number of requests in
// the system; see ActionAt for counts beyond the finite model.
func (s Solution) Action(requests int) int { return ActionAt(s.Policy, requests) }

// ActionAt returns policy's action with the given number of requests in the
// system (len(policy) = SMax+2). A count of SMax or more gets the action of
// state SMax, not the overflow state's: S_o's action is shaped by the
// abstract cost Co (leaving S_o quickly is what pays there), which says
// nothing about how to serve a real long queue, whereas state SMax has the
// same real costs and transitions without the abstract charge.
func ActionAt(policy []int, requests int) int {
	if len(policy) < 2 || requests < 0 {
		return 0
	}
	sMax := len(policy) - 2
	return policy[min(requests, sMax)]
}

// ControlLimitOf returns the smallest index at which policy serves, or
// len(policy) if it never does.
func ControlLimitOf(policy []int) int {
	for s, a := range policy {
		if a > 0 {
			return s
		}
	}
	return len(policy)
}
