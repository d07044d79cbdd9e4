package registry

import (
	"math"
	"strconv"
	"time"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/internal/triton"
	"github.com/ratebatch/ratebatch/kserve"
)

// queuePolicy is the model's queue policy in Triton (its dynamic_batching
// section's priority levels and queue policies), which the model's queue
// in the proxy applies to each call as Triton would (dispatcher.QueuePolicy).
// A section that does not decode gives Triton's policy without one, with
// the error: no call is then refused for its timeout.
func queuePolicy(mc *triton.ModelConfig) (dispatcher.QueuePolicy, error) {
	db, err := mc.Batching()
	if err != nil {
		return dispatcher.QueuePolicy{}, err
	}
	p := dispatcher.QueuePolicy{Levels: uint64(db.PriorityLevels), DefaultLevel: uint64(db.DefaultPriorityLevel),
		Default: timeouts(db.DefaultQueuePolicy)}
	for k, qp := range db.PriorityQueuePolicy {
		level, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			continue // Triton refuses such a config at load
		}
		if p.ByLevel == nil {
			p.ByLevel = map[uint64]dispatcher.Timeouts{}
		}
		p.ByLevel[level] = timeouts(qp)
	}
	return p, nil
}

func timeouts(qp kserve.QueuePolicy) dispatcher.Timeouts {
	us := uint64(qp.DefaultTimeoutMicroseconds)
	d := time.Duration(math.MaxInt64)
	if us <= math.MaxInt64/uint64(time.Microsecond) {
		d = time.Duration(us) * time.Microsecond
	}
	return dispatcher.Timeouts{Default: d, AllowOverride: qp.AllowTimeoutOverride, Delay: qp.TimeoutAction == "DELAY"}
}
