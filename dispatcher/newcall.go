package dispatcher

import (
	"errors"
	"sync"
	"time"

	"github.com/ratebatch/ratebatch/kserve"
)

// ErrQueueFull is in the chain of the error Submit returns when the model's
// queue has no room (alongside a *kserve.Error with status 503), so that a
// front door can answer with its own protocol's word for it.
var ErrQueueFull = errors.New("queue is full")

// queueFull is the 503 of a full queue that also matches ErrQueueFull.
type queueFull struct{ err *kserve.Error }

func (e *queueFull) Error() string   { return e.err.Msg }
func (e *queueFull) Unwrap() []error { return []error{e.err, ErrQueueFull} }

// NewCall prepares the call of a decoded inference request for Submit, the
// same way whichever front door it came through, so that callers of both
// doors share batches: the batch key (prefixed by the version when one is
// named), the rows and Triton's schedule parameters. batchable is false
// (and err nil) for requests Triton must handle alone: shared memory,
// sequences, inputs without a common batch dimension. now is when the
// request began to arrive (Call.Received).
func NewCall(req *kserve.Request, version string, now time.Time) (c *Call, batchable bool, err error) {
	key, rows, ok := kserve.BatchKey(req)
	if !ok {
		return nil, false, nil
	}
	c = calls.Get().(*Call)
	c.Version, c.Req, c.Rows, c.Key, c.Received = version, req, int(rows), key, now
	if version != "" {
		c.Key = "v" + version + "\x00" + key
	}
	if err := scheduleParams(req, c, now); err != nil {
		c.Release()
		return nil, true, err
	}
	return c, true, nil
}

// calls are Calls released after their answer, with their channel, for
// NewCall to reuse: three allocations fewer per request.
var calls = sync.Pool{New: func() any { return new(Call) }}

// Release gives c back for a later NewCall to reuse. Call it once Submit
// has returned and nothing will read c again; the Result does not refer to
// c. A call that left its queue without a batch (withdrawn because its
// caller went away, or expired) is left to the garbage collector instead:
// its key queue may still hold it until a decision pass drops it.
func (c *Call) Release() {
	if s := c.state.Load(); (s != stateTaken && s != stateNew) || len(c.done) != 0 {
		return
	}
	*c = Call{done: c.done}
	calls.Put(c)
}

// scheduleParams reads Triton's schedule-policy parameters, as Triton reads
// them: "priority" (uint64: 1 is the highest level, 0 the default level)
// and "timeout" (uint64 microseconds). What they mean for the call is the
// model's queue policy's to say, at enqueue (ModelSpec.Queue).
func scheduleParams(req *kserve.Request, c *Call, now time.Time) error {
	if v, ok := req.Parameters[kserve.ParamPriority]; ok {
		p, ok := req.Parameters.Uint(kserve.ParamPriority)
		if !ok {
			return kserve.BadRequest("parameter 'priority' must be a non-negative integer, got %v", v)
		}
		c.Priority = p
	}
	if v, ok := req.Parameters[kserve.ParamTimeout]; ok {
		us, ok := req.Parameters.Uint(kserve.ParamTimeout)
		if !ok {
			return kserve.BadRequest("parameter 'timeout' must be a non-negative integer of microseconds, got %v", v)
		}
		c.Timeout = microseconds(us)
	}
	return nil
}
