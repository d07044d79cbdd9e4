package replay

import (
	"fmt"
	"time"

	"github.com/ratebatch/ratebatch/policy/smdp"
)

// Overheads is a live proxy's time outside the server's compute beyond
// Config.Overhead, which a simulation adds so that its latencies are the
// ones a client of the live proxy sees (docs/SIMULATION.md, "The live
// overheads").
type Overheads struct {
	// PerRow is the round trip's growth beyond compute per row of a batch
	// (the proxy's /status: rule.outside.overhead_per_row_ms; its
	// overhead_ms is Config.Overhead). It may be negative (a server whose
	// timer rounds small batches up); a batch's overhead stays >= 0.
	PerRow time.Duration
	// Extra is the proxy's hold of the instance around a batch and each
	// caller's wait after it, lone and merged (rule.outside).
	Extra smdp.Extra
	// Client is each request's time the proxy does not see: the client's
	// and the network's, and the proxy's reading and writing of the HTTP
	// exchange (the client's mean latency less the proxy's queue wait,
	// round trip and wait after the batch, in an ad-hoc run).
	Client time.Duration
}

// Validate reports a negative part.
func (o Overheads) Validate() error {
	if o.Client < 0 {
		return fmt.Errorf("live overheads: client time must be >= 0, got %v", o.Client)
	}
	return o.Extra.Validate()
}
