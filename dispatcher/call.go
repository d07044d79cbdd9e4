package dispatcher

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratebatch/ratebatch/internal/guard"
	"github.com/ratebatch/ratebatch/kserve"
)

// Call is one caller's inference request on its way through a batch.
type Call struct {
	Version  string // model version from the URL path, "" for the default
	Req      *kserve.Request
	Rows     int    // dimension 0 of the request's inputs
	Key      string // kserve.BatchKey: calls batch together only when equal
	Priority uint64 // Triton's "priority" parameter: 1 is highest, 0 the default level
	// Timeout is Triton's "timeout" parameter (0: none), which the model's
	// queue policy honours or not (ModelSpec.Queue).
	Timeout time.Duration
	// Expire, set at Submit by the model's queue policy, is when the call
	// is refused with Triton's 503 "Request timeout expired" if it is
	// still queued; zero: never.
	Expire time.Time
	// Deadline, when set, is the latency target the slack policy plans by:
	// Expire if set, else arrival plus the model's SLA.
	Deadline time.Time
	// Wire, when its Body is set, is Req as it came over HTTP. A batch of
	// this call alone then sends these bytes unchanged and hands the caller
	// the upstream's answer unchanged: merging one request and splitting
	// its answer would only cost time and give back what Triton would have.
	// It must stay untouched until the call is answered. (A value, not a
	// pointer: one allocation fewer per request.)
	Wire Wire
	// CopyTurn, when set, is held while the call's body is written
	// upstream as it came (Wire, the call sent alone) and given back once
	// written, not while the upstream computes its answer: the HTTP door's
	// large-body lane, which copies one large body at a time, from a
	// client or to the upstream. A call merged with others is sent
	// without it.
	CopyTurn Turn
	// Source, when not 0, names the caller's connection. An HTTP/1.1
	// connection has no other call in the proxy while this one is there
	// (its next request follows this one's answer); a gRPC connection may
	// carry several at once, and the queue learns which it does. From the
	// sources the queue knows how many callers could still join a waiting
	// batch (policy.Queue.IdleSources) and learns each one's behaviour
	// (SourceStats). 0: unknown (a connection the door cannot name).
	Source uint64
	// Header is what the caller's request carries that decides who may
	// call (door.Forwarding): sent upstream with any batch the call is
	// in, and part of its key (Forward). "" for none.
	Header string
	// Trace is the caller's traceparent: sent upstream with the call when
	// it goes alone, as it would have gone straight to Triton; a merged
	// batch carries none of its callers' (a tracer's own, if one is on).
	Trace string
	// Received, when set, is when the caller's request began to arrive at
	// the door, before its body was read and decoded: the call's latency
	// the observers learn (Answer) is measured from there, so the
	// door's costs, which differ for a lone call passed through as it came
	// and a merged one decoded and re-encoded, are in it (NewCall sets
	// it). Zero: from Submit.
	Received time.Time

	// dataOnce decodes the JSON data the proxy deferred in Req (readData).
	dataOnce sync.Once
	dataErr  error

	// ctx is the context Submit was given (Context).
	ctx     context.Context
	arrived time.Time
	level   uint64 // the priority level Triton gives the call: smaller goes first
	// timeoutAt is when the call's own timeout ends, set when Triton
	// honours it: what is left of it then goes upstream (forwardTimeout).
	timeoutAt time.Time
	state     atomic.Int32
	done      chan Result
}

// Context is the context the call's door gave Submit, where an Observer
// finds what the door put there (a tracer, the caller's span); nil before
// Submit.
func (c *Call) Context() context.Context { return c.ctx }

// Forward gives the call its caller's forwarded headers, which join its
// batch key, so that callers with different credentials never share a
// batch, and its traceparent. Call it after NewCall, before Submit.
func (c *Call) Forward(header, trace string) {
	c.Trace = trace
	if header == "" {
		return
	}
	c.Header = header
	c.Key += "\x00h" + header
}

// The forwarded headers' form (Call.Header, Outgoing.Header): each name in
// lower case and its value, each followed by a NUL byte, which neither
// may hold. AppendHeaderName and EndHeader write it; eachHeader reads it.

// AppendHeaderName appends a forwarded header's name; its value follows,
// then EndHeader.
func AppendHeaderName(dst []byte, name string) []byte { return append(append(dst, name...), 0) }

// EndHeader ends a forwarded header's value.
func EndHeader(dst []byte) []byte { return append(dst, 0) }

// eachHeader calls f with each name and value of forwarded headers.
func eachHeader(header string, f func(name, value string)) {
	for header != "" {
		name, rest, _ := strings.Cut(header, "\x00")
		value, rest, _ := strings.Cut(rest, "\x00")
		f(name, value)
		header = rest
	}
}

// deadline is when the call's caller stops waiting: the deadline of the
// context its door gave Submit (a gRPC caller's); ok is false when it has
// none (an HTTP caller waits as long as Triton takes).
func (c *Call) deadline() (d time.Time, ok bool) {
	if c.ctx == nil {
		return time.Time{}, false
	}
	return c.ctx.Deadline()
}

// Arrived is when the call entered its queue (Submit), or began to arrive
// at its door when that is known and earlier (Received).
func (c *Call) Arrived() time.Time {
	if !c.Received.IsZero() && c.Received.Before(c.arrived) {
		return c.Received
	}
	return c.arrived
}

// readData decodes the JSON data the proxy left undecoded in Req
// (kserve.DecodeRequestDeferred), once, on whichever goroutine needs it
// first: the caller while it waits in the queue, or the batch that merges
// it. A call that goes to Triton as it came never needs it.
// A panic of the decoder is this call's error (a 500), not its goroutine's
// end: the goroutine may be another caller's, running their batch.
func (c *Call) readData() error {
	c.dataOnce.Do(func() {
		defer func() {
			if v := recover(); v != nil {
				c.dataErr = &kserve.Error{Status: http.StatusInternalServerError, Msg: guard.Recovered(nil, "data", v).Error()}
			}
		}()
		c.dataErr = c.Req.DecodeData()
	})
	return c.dataErr
}

// A call's state: new until enqueued, then queued until a batch takes it
// or it leaves the queue without one (cancelled).
const (
	stateNew int32 = iota
	stateQueued
	stateTaken
	stateCancelled
)

// Result is a call's answer: a response, the upstream's answer as it came
// (Wire, for a call that went alone with its Wire set) or an error, exactly
// one of them. The answer may alias a buffer shared with the other callers
// of its batch: call Release once it has been written.
type Result struct {
	Resp *kserve.Response
	Wire *Wire
	Err  error // a *kserve.Error carries the HTTP status
	// Queued is how long the call waited before its batch was sent.
	Queued time.Duration
	// BatchRows is the size of the batch the call went in (0 if none).
	BatchRows int
	release   *shared
	// obs, set for the answer of a batch that succeeded, learns at
	// Dispatcher.Delivered the call's latency from its arrival and how long
	// the answer took from its batch's end (answered) to its being
	// written; calls is the batch's number of callers.
	obs      Observer
	model    string
	answered time.Time
	arrived  time.Time
	calls    int
	// run, in a call's channel instead of its answer, is a batch holding
	// the call for the call's own goroutine to run (launch).
	run *batch
}

// Release gives back the buffers the response aliases. The caller calls it
// once it has written the answer (and told Dispatcher.Delivered).
func (r Result) Release() {
	if r.release != nil {
		r.release.done()
	}
}

// shared releases a batch's response buffer once every caller is done.
type shared struct {
	refs atomic.Int32
	free func()
}

func (s *shared) done() {
	if s.refs.Add(-1) == 0 && s.free != nil {
		s.free()
	}
}

// Wire is an inference body in KServe v2's HTTP form: all JSON, or a JSON
// header of HeaderLen bytes followed by binary tensors (Triton's binary
// tensor extension).
type Wire struct {
	Body      []byte
	HeaderLen int // Inference-Header-Content-Length; -1 when all JSON
}

// Turn is a turn to copy a large body (Call.CopyTurn): Take waits for it,
// Give hands it on.
type Turn interface {
	Take()
	Give()
}

// turnBody sends a Wire as wireBody does, but holds its turn only while
// its bytes are written: it is a stream (no Bytes), whose writer takes the
// turn before the first byte and gives it back after the last (or when the
// upstream client closes it, or done is called once the exchange is over,
// whichever comes first). Each attempt takes the turn afresh.
type turnBody struct {
	w    *Wire
	turn Turn
	mu   sync.Mutex
	held bool
}

func (b *turnBody) BodyLen() int   { return len(b.w.Body) }
func (b *turnBody) HeaderLen() int { return b.w.HeaderLen }
func (b *turnBody) AppendBody(dst []byte) ([]byte, int) {
	return append(dst, b.w.Body...), b.w.HeaderLen
}
func (b *turnBody) Reader() io.Reader { return &turnReader{b: b, r: bytes.NewReader(b.w.Body)} }

func (b *turnBody) take() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.held {
		b.turn.Take()
		b.held = true
	}
}

// done gives the turn back if it is held.
func (b *turnBody) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held {
		b.held = false
		b.turn.Give()
	}
}

// turnReader is one attempt's stream of a turnBody. WriteTo is how
// fasthttp copies it: from the caller's buffer to the connection, as
// Bytes would, with no copy in between.
type turnReader struct {
	b *turnBody
	r *bytes.Reader
}

func (t *turnReader) WriteTo(w io.Writer) (int64, error) {
	t.b.take()
	defer t.b.done()
	return t.r.WriteTo(w)
}

func (t *turnReader) Read(p []byte) (int, error) {
	if t.r.Len() == 0 {
		return 0, io.EOF
	}
	t.b.take()
	n, err := t.r.Read(p)
	if err != nil || t.r.Len() == 0 { // a reader limited to the length never sees EOF
		t.b.done()
	}
	return n, err
}

func (t *turnReader) Close() error { t.b.done(); return nil }

// wireBody sends a Wire as a batch's Body. Bytes lets an upstream client
// send the caller's buffer itself instead of a copy.
type wireBody struct{ w *Wire }

func (b wireBody) Bytes() []byte     { return b.w.Body }
func (b wireBody) BodyLen() int      { return len(b.w.Body) }
func (b wireBody) HeaderLen() int    { return b.w.HeaderLen }
func (b wireBody) Reader() io.Reader { return bytes.NewReader(b.w.Body) }
func (b wireBody) AppendBody(dst []byte) ([]byte, int) {
	return append(dst, b.w.Body...), b.w.HeaderLen
}
