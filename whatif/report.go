package whatif

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
)

// Report is a what-if: one model's recent arrivals replayed through each
// setting of the grid, beside what was lived over the same minutes.
type Report struct {
	Model string `json:"model"`
	// Enough is false when there is too little to say anything (Reason
	// says why: too few arrivals, no line learnt yet); only the window
	// and the arrivals are then filled in.
	Enough bool   `json:"enough"`
	Reason string `json:"reason,omitempty"`
	// The window replayed: the last minutes asked for, or less where the
	// proxy has not kept that much (Cut).
	From    time.Time `json:"from"`
	To      time.Time `json:"to"`
	Seconds float64   `json:"seconds"`
	Cut     bool      `json:"cut,omitempty"`

	Arrivals ArrivalCounts `json:"arrivals"`
	Line     Line          `json:"line"`
	// ClosedLoop is how closed-loop callers were replayed; nil when the
	// arrivals were replayed at their own times.
	ClosedLoop *ClosedLoop `json:"closed_loop"`
	Lived      Lived       `json:"lived"`
	// Points are the settings replayed: the one in force first, ad-hoc,
	// then the grid.
	Points []Point `json:"points"`
	// Efficiency names the axis the front maximises: requests per joule
	// where the energy line is known, else the GPU's idle share (1 less
	// its busy share).
	Efficiency string `json:"efficiency"`
	// Recommended is the index in Points of the setting recommended
	// (Recommendation says why); -1 for none.
	Recommended    int    `json:"recommended"`
	Recommendation string `json:"recommendation"`
	// CheckVsLived is the replay of the setting in force over what was
	// lived (predicted / lived; nil where a figure is missing): the
	// replay's own error on these minutes.
	CheckVsLived Ratios   `json:"check_vs_lived"`
	Assumptions  []string `json:"assumptions"`
	// TookSeconds is the what-if's time, CPUShare the share of a core it
	// was allowed.
	TookSeconds float64 `json:"took_seconds"`
	CPUShare    float64 `json:"cpu_share"`
}

// ArrivalCounts are the window's calls by their caller's kind
// (dispatcher.CallerKind), and how many had more than one row.
type ArrivalCounts struct {
	Total      int `json:"total"`
	OpenLoop   int `json:"open_loop"`
	ClosedLoop int `json:"closed_loop"`
	Lone       int `json:"lone"`
	Unknown    int `json:"unknown"`
	Unnamed    int `json:"unnamed"`
	MultiRow   int `json:"multi_row"`
	Rows       int `json:"rows"`
}

func countKinds(arrivals []arrival) ArrivalCounts {
	var c ArrivalCounts
	for _, a := range arrivals {
		c.Total++
		c.Rows += a.rows
		if a.rows > 1 {
			c.MultiRow++
		}
		switch a.kind {
		case dispatcher.CallerOpen:
			c.OpenLoop++
		case dispatcher.CallerClosed:
			c.ClosedLoop++
		case dispatcher.CallerLone:
			c.Lone++
		case dispatcher.CallerUnnamed:
			c.Unnamed++
		default:
			c.Unknown++
		}
	}
	return c
}

func (c ArrivalCounts) String() string {
	return fmt.Sprintf("%d calls: %d open-loop, %d closed-loop, %d of a lone caller, %d not learnt yet, %d without a named connection",
		c.Total, c.OpenLoop, c.ClosedLoop, c.Lone, c.Unknown, c.Unnamed)
}

// Line is what the replay ran on: the line the plan in force was made
// with, the spread of the round trips around it, the proxy's own time
// around a batch, and the energy.
type Line struct {
	AlphaMs  float64 `json:"alpha_ms"`
	Tau0Ms   float64 `json:"tau0_ms"`
	MaxBatch int     `json:"max_batch_size"`
	// Instances is the model's instances: batches that run at once.
	Instances int `json:"instances"`
	// Batches is how many round trips of the window the spread was drawn
	// from (0: none, the line alone); SpreadSCV is their squared
	// coefficient of variation about the line, MeanFactor their mean
	// ratio to it.
	Batches    int     `json:"batches"`
	SpreadSCV  float64 `json:"spread_scv"`
	MeanFactor float64 `json:"mean_factor"`
	// HoldLoneMs..AfterMergedMs are the proxy's time around a batch
	// (monitor.Outside), DoorMs a call's mean time from its first byte at
	// the door to the queue.
	HoldLoneMs    float64 `json:"hold_lone_ms"`
	HoldMergedMs  float64 `json:"hold_merged_ms"`
	AfterLoneMs   float64 `json:"after_lone_ms"`
	AfterMergedMs float64 `json:"after_merged_ms"`
	DoorMs        float64 `json:"door_ms"`
	// BetaMJ and Zeta0MJ are the energy line zeta(b) (nil: not learnt),
	// IdleWatts the idle power counted for the model (its share of the
	// GPUs' by batch time; nil: unknown).
	BetaMJ    *float64 `json:"beta_mj"`
	Zeta0MJ   *float64 `json:"zeta0_mj"`
	IdleWatts *float64 `json:"idle_watts"`
	// WindowSeconds is the monitor's window the replay plans at.
	WindowSeconds float64 `json:"window_seconds"`
}

// ClosedLoop is how the closed-loop callers' calls were replayed: as
// Clients synchronous clients thinking ThinkMs between an answer and their
// next call (as the queue measured it), over the span their Arrivals came
// in. Clients is as many as send those calls at the latency lived
// (Little's law); Seen is the closed-loop connections the queue counted.
type ClosedLoop struct {
	Clients  int     `json:"clients"`
	Seen     int     `json:"seen"`
	ThinkMs  float64 `json:"think_ms"`
	Arrivals int     `json:"arrivals"`
}

// Lived is what the window's calls lived, as the proxy measured them:
// latency from the first byte at the door to the answer written, the
// meter's requests per joule and the batches' share of the time.
type Lived struct {
	Requests         int      `json:"requests"`
	MeanMs           *float64 `json:"mean_ms"`
	P99Ms            *float64 `json:"p99_ms"`
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	BusyShare        *float64 `json:"busy_share"`
}

// Point is one setting replayed.
type Point struct {
	Label string `json:"label"`
	// Policy and Options are the setting as PUT /policy takes it.
	Policy  string            `json:"policy"`
	Options map[string]string `json:"options,omitempty"`
	Current bool              `json:"current,omitempty"`

	Requests         int      `json:"requests"`
	MeanMs           float64  `json:"mean_ms"`
	P99Ms            float64  `json:"p99_ms"`
	MeanBatch        float64  `json:"mean_batch"`
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	// BusyShare is the share of the window at least one batch ran.
	BusyShare float64 `json:"busy_share"`
	// VsAdhoc is each figure over ad-hoc's on the same arrivals.
	VsAdhoc Ratios `json:"vs_adhoc"`
	// Front marks a setting no other beats on mean, p99 and efficiency
	// at once.
	Front bool `json:"front"`
	// Apply is the command that puts the setting in force; "" for the
	// one in force.
	Apply string `json:"apply,omitempty"`
	// Error says why the setting could not be replayed; its figures are
	// then zero.
	Error string `json:"error,omitempty"`
}

// Ratios are figures over another's; nil where either is missing.
type Ratios struct {
	Mean             *float64 `json:"mean"`
	P99              *float64 `json:"p99"`
	RequestsPerJoule *float64 `json:"requests_per_joule"`
	BusyShare        *float64 `json:"busy_share"`
}

// ratio is a/b, nil where either is missing or b is not > 0.
func ratio(a, b *float64) *float64 {
	if a == nil || b == nil || !(*b > 0) {
		return nil
	}
	v := *a / *b
	return &v
}

func ptr(v float64) *float64 { return &v }

// label names a setting as a person reads it: the policy and its
// options, the grid's by what they bound.
func label(policy string, options map[string]string) string {
	if len(options) == 0 {
		return policy
	}
	var parts []string
	for _, k := range sortedKeys(options) {
		name := k
		if short, ok := shortKeys[k]; ok {
			name = short
		}
		parts = append(parts, name+" "+options[k])
	}
	return policy + " " + strings.Join(parts, " ")
}

// shortKeys name the grid's options in labels.
var shortKeys = map[string]string{"latency_budget": "mean", "tail_budget": "p99", "slo_p99": "p99<=", "max_queue_delay": "delay"}
