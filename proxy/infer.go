package proxy

import (
	"errors"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/ratebatch/ratebatch/dispatcher"
	"github.com/ratebatch/ratebatch/door"
	"github.com/ratebatch/ratebatch/kserve"
	"github.com/ratebatch/ratebatch/tracing"
)

// inferPath serves a request on an inference path, whose model and
// version are the path's segments as sent, undecoded, as Triton reads
// them: the version digits only (door.PathVersion), the model a name a
// model can have (door.CheckModel), both checked before the model is
// looked up, so that a call reaches no queue and no upstream path but
// those of the model it names; anything else gets Triton's answer.
func (s *Server) inferPath(ctx *fasthttp.RequestCtx, model, rawVersion string) {
	var err error
	version := ""
	switch {
	case rawVersion != "" && !door.PathVersion(rawVersion):
		err = door.NoRoute
	case !door.CheckModel(model):
		err = door.NoModel(model)
	default:
		version, err = door.Version(rawVersion)
	}
	if err != nil {
		s.fail(ctx, "", err)
		closeUnread(ctx) // its body is not read
		return
	}
	s.infer(ctx, model, version)
}

// infer serves an inference request of a model by the doors' call path
// (door.Door): admitted (its memory, its turn in the lane, its buffer),
// its call queued for a batch, its answer written; a model the proxy does
// not batch is passed through.
func (s *Server) infer(ctx *fasthttp.RequestCtx, model, version string) {
	if !s.door.Batches(model) {
		s.passthrough(ctx) // not batched: stream it to Triton untouched
		return
	}
	var a admission
	s.door.Admit(&a.Admission, model, time.Now())
	defer a.release()
	if s.door.Tracing() {
		a.Trace(tracing.HeaderCarrier{H: &ctx.Request.Header})
		defer endSpan(ctx, a.Span)
	}
	if !s.admit(ctx, &a) || !s.read(ctx, version, &a) {
		return // answered
	}
	a.endRead()
	wait, w := s.hangUps.watch(ctx.Conn(), a.Start)
	res := a.Submit(wait)
	gone := wait.Err() != nil
	s.hangUps.stop(w)
	s.reply(ctx, &res, gone, &a)
}

// endSpan ends a traced request's span with the status written, and the
// error's message for a failure.
func endSpan(ctx *fasthttp.RequestCtx, span tracing.Request) {
	status, msg := ctx.Response.StatusCode(), ""
	if status >= http.StatusBadRequest {
		msg = string(ctx.Response.Body())
	}
	span.End(status, msg)
}

// read reads an admitted request's body and decodes it into its call
// (a.Call). false: the request is answered, refused or failed, or passed
// to Triton whole when it is not one the dispatcher batches.
func (s *Server) read(ctx *fasthttp.RequestCtx, version string, a *admission) bool {
	raw, body, err := s.readBody(ctx, a)
	if errors.Is(err, errOverBudget) {
		s.refuseMemory(ctx, a.Model, "memory_growing", a.Hold.Held())
		return false
	}
	if err != nil {
		s.fail(ctx, a.Model, err)
		return false
	}
	call, batchable, err := s.newCall(ctx, a, version, body)
	switch {
	case !batchable:
		s.door.PassedWhole(a.Model)
		s.passBuffered(ctx, raw) // shared memory, sequences, ...: Triton handles those itself
		return false
	case err != nil:
		s.fail(ctx, a.Model, err)
		return false
	}
	a.Call = call
	h := &ctx.Request.Header
	a.Forward(h.Peek, func(f func(name, value []byte)) {
		for k, v := range h.All() {
			f(k, v)
		}
	})
	return true
}

// admission is what an inference request of a batched model holds from
// its headers until its answer is written: the doors' admission (its
// bytes, and then its answer's, in the memory budget; its call; its
// span), and what this door reads the body with: a large body's pooled
// buffer (lease); its turn of the large-body lane while its body is read;
// the buffer its body is read into. release gives all of it back, in the
// one order that is right (see release).
type admission struct {
	door.Admission
	lease bodyLease
	lane  *lane // the lane whose turn it holds; nil: none
	// inLane is the lane whose room it holds until answered; nil: none.
	inLane *lane
	bp     *[]byte
}

// admit takes over what the request's headers reserved (reservations:
// its bytes, a lease, a turn of the lane) and holds its declared length
// before a byte of the body is read; a chunked or compressed body's bytes
// are held as its buffers grow (readBody). false: refused, and answered.
func (s *Server) admit(ctx *fasthttp.RequestCtx, a *admission) bool {
	if s.res != nil {
		r := s.res.take(&ctx.Request.Header)
		a.Hold.Adopt(r.n)
		if r.leased {
			a.lease = bodyLease{buf: r.buf, class: r.n}
		}
		if r.inLane {
			a.lane, a.inLane = s.lane, s.lane
		}
	}
	if n := ctx.Request.Header.ContentLength(); n > 0 && !a.Hold.Grow(int64(n)+1) {
		s.refuseMemory(ctx, a.Model, "memory_declared", int64(n))
		return false
	}
	a.bp = bodyBuffers.Get().(*[]byte)
	return true
}

// endRead ends a large body's turn of the lane once it is read: the next
// body is read while this one waits for its batch, is computed upstream
// and answered. Its call takes a turn again to be written upstream
// (dispatcher.Call.CopyTurn).
func (a *admission) endRead() {
	if a.lane == nil {
		return
	}
	a.Call.CopyTurn = a.lane
	a.lane.Give()
	a.lane = nil
}

// release gives back what the admission holds, once the handler is done
// with the request and its answer: the call first, after which nothing
// refers to the body; then the body's buffer, to its pool, and a large
// body's to the budget's, where the next body of its class to be read
// takes it (readBody claims it); the turn of the lane if the body still
// holds it (it was not read to the end, or was passed to Triton whole),
// and its room in the lane, after the buffer, so that the body the room
// lets in reads into it; and last the bytes held, the answer's among
// them, which until then made the next large requests wait.
func (a *admission) release() {
	a.ReleaseCall()
	if a.lease.keep != nil {
		a.Hold.Keep(a.lease.keep)
	}
	if a.bp != nil {
		putBodyBuffer(a.bp)
	}
	if a.lane != nil {
		a.lane.Give()
	}
	if a.inLane != nil {
		a.inLane.out()
	}
	a.Release()
}

// newCall decodes a read body into its call for the dispatcher; not
// batchable: the request is Triton's to handle (the call is nil).
func (s *Server) newCall(ctx *fasthttp.RequestCtx, a *admission, version string, body []byte) (*dispatcher.Call, bool, error) {
	if hook := testHookInfer.Load(); hook != nil {
		(*hook)(a.Model, body)
	}
	headerLen, err := kserve.ParseHeaderLength(string(ctx.Request.Header.Peek(kserve.HeaderContentLength)), len(body))
	if err != nil {
		return nil, true, err
	}
	req, err := kserve.DecodeRequestDeferred(body, headerLen)
	if err != nil {
		return nil, true, err
	}
	call, batchable, err := dispatcher.NewCall(req, version, a.Start)
	if !batchable || err != nil {
		return nil, batchable, err
	}
	call.Wire = dispatcher.Wire{Body: body, HeaderLen: headerLen}
	call.Source = door.HTTPSource(ctx.ConnID()) // one request at a time per connection
	return call, true, nil
}
