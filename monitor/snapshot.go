package monitor

import (
	"math"
	"time"

	"github.com/ratebatch/ratebatch/policy"
	"github.com/ratebatch/ratebatch/policy/batchcost"
	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Snapshot is the monitor's state for metrics and the status endpoint.
type Snapshot struct {
	Model      string        `json:"model"`
	Policy     string        `json:"policy"`
	BatchSize  int           `json:"batch_size"`
	MaxWait    time.Duration `json:"-"`
	MaxWaitMs  float64       `json:"max_wait_ms"`
	Note       string        `json:"note,omitempty"`
	RatePerSec float64       `json:"rate_rps"`
	Window     time.Duration `json:"-"`
	batchcost.Latency
	R2 float64 `json:"r2"`
	// SEAlphaMs and SETau0Ms are the fit's standard errors (null while the
	// samples cannot tell), FitDoubt why the rule does not trust it yet.
	SEAlphaMs *float64 `json:"se_alpha_ms"`
	SETau0Ms  *float64 `json:"se_tau0_ms"`
	Outliers  int      `json:"outliers"`
	FitDoubt  string   `json:"fit_doubt,omitempty"`
	// FitSource is where tau(b) is learnt from: "server statistics" (the
	// upstream's per-batch-size compute times) or "round trip" (the
	// proxy's own timing, for servers without statistics).
	FitSource string `json:"fit_source"`
	// OverheadMs is the mean round trip beyond the server's own tau(b)
	// (network, HTTP, the server's queue); null without server statistics.
	OverheadMs *float64 `json:"overhead_ms"`
	// Outside is the proxy's own time around a batch that the planning
	// policies count beside tau(b) (smdp.Extra): instance time beyond the
	// round trip (hold) and a caller's wait after its batch (after), for
	// batches of one caller and of several. A simulation takes it with
	// ratebatch sim --overheads.
	Outside   Outside `json:"outside"`
	Samples   int     `json:"samples"`
	MaxBatch  int     `json:"max_batch_size"`
	Instances int     `json:"instances"`
	Arrivals  int64   `json:"arrivals_total"`
	// PlannedMeanMs and PlannedP99Ms are the rule's predicted latency
	// (the budget policy's tail model; 0 when the rule predicts none),
	// LivedMeanMs and LivedP99Ms the calls' inside the proxy over the
	// last seconds (arrival to answer, decayed with a half-life of about
	// 70 plans).
	PlannedMeanMs float64 `json:"planned_mean_ms"`
	PlannedP99Ms  float64 `json:"planned_p99_ms"`
	LivedMeanMs   float64 `json:"lived_mean_ms"`
	LivedP99Ms    float64 `json:"lived_p99_ms"`
	// Objective is what the policy's plan optimises, for a policy that
	// weighs energy (budget, smdp): without an energy line it says what
	// the plan optimises instead of joules.
	Objective string `json:"objective,omitempty"`
	// Phase is where a policy that earns its holds stands (the budget's:
	// learning, holding or adhoc; policy.Phaser) and PhaseReason why;
	// empty for the other policies.
	Phase       string `json:"phase,omitempty"`
	PhaseReason string `json:"phase_reason,omitempty"`
}

// Snapshot returns the current state.
func (m *Monitor) Snapshot() Snapshot {
	p := m.current.Load()
	st := p.rule.Status()
	s := Snapshot{
		Model:      m.model,
		Policy:     st.Policy,
		BatchSize:  st.BatchSize,
		MaxWait:    st.MaxWait,
		MaxWaitMs:  float64(st.MaxWait) / float64(time.Millisecond),
		Note:       st.Note,
		RatePerSec: p.est.RatePerSec,
		Window:     p.est.Window,
		Latency:    p.fit.Line,
		R2:         p.fit.R2,
		SEAlphaMs:  finite(p.fit.SEAlphaMs),
		SETau0Ms:   finite(p.fit.SETau0Ms),
		Outliers:   p.fit.Outliers,
		FitDoubt:   p.est.FitDoubt,
		FitSource:  "round trip",
		Samples:    m.est.Observed() + int(m.serverBatches.Load()),
		MaxBatch:   p.est.MaxBatch,
		Instances:  p.est.Instances,
		Arrivals:   m.total.Load(),
		Outside:    m.outsideSnapshot(p.est.Extra),

		PlannedMeanMs: st.PlannedMeanMs,
		PlannedP99Ms:  st.PlannedP99Ms,
		LivedMeanMs:   math.Float64frombits(m.livedMean.Load()),
		LivedP99Ms:    math.Float64frombits(m.livedP99.Load()),
		Objective:     p.objective,
	}
	m.mu.Lock()
	pol := m.pol
	m.mu.Unlock()
	if ph, ok := pol.(policy.Phaser); ok {
		s.Phase, s.PhaseReason = ph.Phase()
	}
	if m.serverFed.Load() {
		s.FitSource = "server statistics"
		s.OverheadMs = finite(math.Float64frombits(m.overhead.Load()))
	}
	return s
}

// Outside is the time outside tau(b) as /status shows it.
type Outside struct {
	HoldLoneMs    float64 `json:"hold_lone_ms"`
	HoldMergedMs  float64 `json:"hold_merged_ms"`
	AfterLoneMs   float64 `json:"after_lone_ms"`
	AfterMergedMs float64 `json:"after_merged_ms"`
	// LoneBatches and MergedBatches count the batches measured.
	LoneBatches   int64 `json:"lone_batches"`
	MergedBatches int64 `json:"merged_batches"`
	// OverheadMs and OverheadPerRowMs are the round trip beyond the
	// server's compute as the plan takes it, o0 + o1*b (overheadLine);
	// zero without server statistics, where the round trip is the fit.
	OverheadMs       float64 `json:"overhead_ms"`
	OverheadPerRowMs float64 `json:"overhead_per_row_ms"`
	// ServiceSCV is the round trips' squared coefficient of variation
	// (policy.Estimate.ServiceSCV); 0 without server statistics.
	ServiceSCV float64 `json:"service_scv"`
	// TimerLateMs is how late the rule's timed waits end past the whole
	// milliseconds Go's poller waits (its 90th percentile,
	// policy.Estimate.TimerLate), over TimedWaits waits (decayed).
	TimerLateMs float64 `json:"timer_late_ms"`
	TimedWaits  int64   `json:"timed_waits"`
}

func (m *Monitor) outsideSnapshot(x smdp.Extra) Outside {
	m.outsideMu.Lock()
	lone, merged := m.outside.holdLone.n, m.outside.holdMerged.n
	m.outsideMu.Unlock()
	o := Outside{HoldLoneMs: x.HoldLoneMs, HoldMergedMs: x.HoldMergedMs, AfterLoneMs: x.AfterLoneMs, AfterMergedMs: x.AfterMergedMs,
		LoneBatches: lone, MergedBatches: merged}
	o.TimerLateMs, o.TimedWaits = m.late.snapshot()
	if m.serverFed.Load() && m.overheadN.Load() > 0 {
		o.OverheadMs, o.OverheadPerRowMs = m.overheadLine(math.Float64frombits(m.overhead.Load()))
		o.ServiceSCV = math.Float64frombits(m.serviceSCV.Load())
	}
	return o
}

func finite(v float64) *float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return nil
	}
	return &v
}
