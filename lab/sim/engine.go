// Package sim is `ratebatch sim`: the discrete-event simulation of one
// model queue in front of a GPU (package replay, which the live proxy's
// what-if shares) on drawn arrivals, its flags, policy list, table and
// series CSV, and fleets of unequal GPUs behind a balancer.
package sim

import (
	"fmt"
	"time"

	"github.com/ratebatch/ratebatch/replay"
)

// The run, its result and its errors are the replay engine's.
type (
	Config       = replay.Config
	Result       = replay.Result
	Window       = replay.Window
	Spread       = replay.Spread
	InvalidError = replay.InvalidError
)

// Defaults of Config.
const (
	DefaultRequests   = replay.DefaultRequests
	DefaultWindow     = replay.DefaultWindow
	MinWindow         = replay.MinWindow
	DefaultDrainLimit = replay.DefaultDrainLimit
)

// Epoch is the virtual clock's time zero as policies see it.
var Epoch = replay.Epoch

// Run simulates one configuration (replay.Run).
var Run = replay.Run

func invalid(field, format string, a ...any) error {
	return &InvalidError{Field: field, Err: fmt.Errorf(format, a...)}
}

// msDur converts milliseconds to a duration.
func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
